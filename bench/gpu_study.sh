#!/usr/bin/env bash
# A named multi-run study for the lent GPU, every run at once in the background (bench/gpu_background.sh), so that it
# can outlive one device call: the first call starts it and waits, the next calls wait again (each packs what ran so
# far into OUT/study.tgz). Run after bash bench/gpu_setup.sh has installed the bundle.
#   bash bench/gpu_study.sh NAME SECONDS OUT      # start NAME unless started, then wait up to SECONDS
#   bash bench/gpu_study.sh NAME --print          # print NAME's bench_gpu_train.py arguments, one per line; run nothing
# Studies (each run: hierarl train with vLLM rollouts from the carried SmolLM2, a 0.1 GPU share per worker, runs
# started 15 s apart with vLLM at 0.12 of the GPU's memory: docs/operations.md, several runs on one GPU):
#   main_engine the main job (hiper_textcraft_cpu) for seeds 0-2 with vLLM and with the HF engine (the learner in
#               bf16 both ways): whether vLLM's CUDA path is what broke the format on the 2026-11-29 lend (a bf16
#               learner on the CPU did not, gpu_vllm_train.md); bench/gpu_sampler.py runs beside it
#   d2_scale    HiPER and PPO on TextCraft depth 2 for seeds 0-2, 128 episodes an iteration on 32 train tasks
# Exit status of a wait: 0 once the study ended, 3 while it still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?study name} seconds=${2:?SECONDS or --print}
dir=/tmp/study_$name
export PYTHONPATH=${PYTHONPATH:-/tmp/site} PYTHONUNBUFFERED=1
if [ ! -d "$dir" ]; then
  G="rollout.gpu_memory_utilization=0.12 cpu_threads=2"
  R=()
  case $name in
    main_engine)
      for s in 0 1 2; do for e in vllm hf; do
        R+=(--run "main_${e}_s$s=hiper_textcraft_cpu seed=$s rollout.engine=$e $G")
      done; done
      deadline=780 ;;
    d2_scale)
      S="rollout.groups_per_iter=32 env.train_tasks=32 iterations=3 eval_every=1 learner.micro_batch_size=8"
      for s in 0 1 2; do for m in hiper ppo; do
        R+=(--run "${m}_s$s=${m}_textcraft_d2 seed=$s rollout.engine=vllm $G $S checkpoint_every=0")
      done; done
      deadline=780 ;;
    *) echo "gpu_study: unknown study $name (main_engine, d2_scale)" >&2 && exit 2 ;;
  esac
  args=(--model smollm2 --parallel --share 0.1 --stagger 15 --deadline "$deadline" --work "$dir/work"
    --out "$dir/$name.json" "${R[@]}")
  [ "$seconds" = --print ] && printf '%s\n' "${args[@]}" && exit 0
  if [ "$name" = main_engine ]; then  # first, so that its engine starts before the runs' (a 0.1 share)
    bash bench/gpu_background.sh start /tmp/sampler python3 bench/gpu_sampler.py --out /tmp/sampler/res
    sleep 15
  fi
  bash bench/gpu_background.sh start "$dir" python3 bench/bench_gpu_train.py "${args[@]}"
fi
rc=0
bash bench/gpu_background.sh wait "$dir" "$seconds" "${3:?OUT}" || rc=$?
if [ -d /tmp/sampler ]; then bash bench/gpu_background.sh wait /tmp/sampler 1 "$3" > /dev/null || true; fi
exit $rc
