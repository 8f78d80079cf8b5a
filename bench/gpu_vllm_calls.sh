#!/usr/bin/env bash
# The device tool's `run` calls of issue 43, in order, for the bundle bench/gpu_bundle.sh --smollm2 --vllm left in
# .gpu/: one call per part, then bench/gpu_vllm.py. Make them back to back: the machine goes back after ~30 s idle and
# its /tmp (the parts kept so far, the install) with it. Every command starts with bench/gpu_setup.sh, which keeps the
# arriving part and installs once all are there; its exit status 3 with "went cold" means earlier parts were lost:
# repeat the calls from the first missing part (nothing was installed). The last part's call installs and runs the
# hot-swap check (swap, ~150 s on an H200: the prefix-cache fix seen working) and the learning run at scale (scale,
# cut by --budget-s, which counts from after the ~40 s install, its rows kept); the next calls the main job and
# Multi2 with vLLM (train) and the loop timing (loops). decode was measured on 2026-11-29 (docs/results/gpu_vllm.md).
# On that H200 the five transfer calls took 5-6 s each, so the last part's call can take the call's whole 600 s.
# Prints one block per call: carry, timeout_s, command.
#   bash bench/gpu_vllm_calls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
parts=$(ls -d .gpu/[0-9]* 2>/dev/null | sort)
[ -n "$parts" ] || { echo "gpu_vllm_calls: no parts in .gpu/: run bash bench/gpu_bundle.sh --smollm2 --vllm" >&2 && exit 2; }
n=$(echo "$parts" | wc -l)
run='export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 && set -o pipefail && python3 bench/gpu_vllm.py --out $OUT'
k=0
for p in $parts; do
  k=$((k + 1))
  if [ $k -lt "$n" ]; then
    cmd="bash bench/gpu_setup.sh; echo \"gpu_setup rc \$?\"   # rc 3 here is expected: parts $((k + 1))..$n still to come"
    timeout=120
  else
    cmd="bash bench/gpu_setup.sh && $run --steps swap,scale --budget-s 520 2>&1 | tee \$OUT/log_engines.txt"
    timeout=600
  fi
  printf 'call %d of %d\n  carry: ["%s"]\n  timeout_s: %d\n  command: %s\n\n' "$k" $((n + 2)) "$p" "$timeout" "$cmd"
done
for step in train loops; do
  k=$((k + 1))
  printf 'call %d of %d\n  carry: []\n  timeout_s: %d\n  command: %s\n\n' "$k" $((n + 2)) 600 \
    "bash bench/gpu_setup.sh && $run --steps $step --budget-s 560 2>&1 | tee \$OUT/log_$step.txt"
done
