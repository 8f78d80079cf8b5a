#!/usr/bin/env bash
# The device tool's `run` calls for the bundle bench/gpu_bundle.sh --smollm2 --vllm left in .gpu/: one call per part,
# the last part's call installing and starting a study (bench/gpu_study.sh, default main_engine) in the background,
# then one more call waiting for it with the device time left. Make them back to back: the machine goes back after
# ~30 s idle and its /tmp (the parts kept so far, the install, the study) with it. Every transfer call runs
# bench/gpu_setup.sh, which keeps the arriving part and installs once all are there; its exit status 3 with "went
# cold" means earlier parts were lost: repeat the calls from the first missing part (nothing was installed). On the
# H200 lends of 2026-11-29 the five transfer calls took 5-8 s each (start: ~32 s), so the study gets ~800 s of the
# 900: the last call's timeout_s is the budget left (the device tool's lease.budget_left_s) less 10 s.
# Prints one block per call: carry, timeout_s, command.
#   bash bench/gpu_vllm_calls.sh [STUDY]
set -euo pipefail
cd "$(dirname "$0")/.."
parts=$(ls -d .gpu/[0-9]* 2>/dev/null | sort)
[ -n "$parts" ] || { echo "gpu_vllm_calls: no parts in .gpu/: run bash bench/gpu_bundle.sh --smollm2 --vllm" >&2 && exit 2; }
n=$(echo "$parts" | wc -l)
study=${1:-main_engine}
k=0
for p in $parts; do
  k=$((k + 1))
  if [ $k -lt "$n" ]; then
    cmd="bash bench/gpu_setup.sh; echo \"gpu_setup rc \$?\"   # rc 3 here is expected: parts $((k + 1))..$n still to come"
    timeout=120
  else
    cmd="bash bench/gpu_setup.sh && bash bench/gpu_study.sh $study 540 \$OUT"
    timeout=600
  fi
  printf 'call %d of %d\n  carry: ["%s"]\n  timeout_s: %d\n  command: %s\n\n' "$k" $((n + 1)) "$p" "$timeout" "$cmd"
done
printf 'call %d of %d\n  carry: []\n  timeout_s: the budget left less 10\n  command: %s\n' $((n + 1)) $((n + 1)) \
  "bash bench/gpu_study.sh $study <timeout_s less 15> \$OUT"
