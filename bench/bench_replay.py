"""Paired update replay: what one learner update does to the policy, per variant, from the same state on the same
trajectories, in minutes instead of a multi-hour learning run.

    python bench/bench_replay.py --run RUN --iteration 1 --repeats 2 \
        --variant "hiper" --variant "hiper_eq10=algo.switch_adv=eq10" --variant "ppo=algo=ppo" \
        --out bench/results/replay.json

RUN is a finished ``hierarl train ... save_trajectories=true checkpoint_keep_last=0`` run. Every variant starts
from the same state and trains on the same rollouts:
* policy: ``RUN/checkpoints/iter_<k-1>`` (each policy adapter with its optimizer state); the KL term's reference is
  the frozen copy saved with that state, as in the run (the policy RL started from; Multi2's online phase: π_off),
  or ``iter_0``'s policy for a variant that keeps one the run did not;
* critic: fresh (every value 0, as RL iteration 1 finds it) and then the variant's ``learner.critic_warmup_passes``
  critic-only passes (``Updater.warm_up_critic``), so each algorithm's critic is fitted by its own targets on the
  same data; or, with ``--critic-from-run`` and a variant of the run's algorithm, the run's critic at ``iter_<k-1>``
  (with its target copy: STEP-HRL's and Multi2's IQL critics, whose warm-up the run did);
* trajectories: ``RUN/trajectories/iter_<k>.jsonl`` (collected by that policy), shaped afresh per variant (HISR:
  scored by the run's reward models as the run had them, the online hindsight model trained as the run did);
* the variant's driver stage (``launch.driver.stages``) as a resume from ``iter_<k-1>`` has it: restored from the
  checkpoint's driver state and prepared on the learner (HISR's reward models: the checkpoint's, or the stage cache's
  for ``k`` = 1; the stored data's phase and critic steps owed); nothing is collected again;
* one update: the driver's code (``launch.driver.stages.staged_update`` over the run's ``Updater``), seed ``seed + k`` for
  the mini-batch order; the first variant is repeated with other seeds (``--repeats``) to measure the noise floor.
  Replaying iteration 1, RL starts as the driver starts it (``launch.driver.warm_start.start_rl``: the variant's
  ``learner.rl_optimizer`` and warm-up), so a run written before RL's optimizer was reset replays under today's
  default unless the variant says ``learner.rl_optimizer=continue``;
* ``--controls``: each variant also with its advantages negated and zeroed (``learner.advantage_scale`` −1, 0),
  and the table adds its first-order part, (Δ − Δ_negated) / 2, and its sign-independent part, (Δ + Δ_negated) / 2
  (read together with the two rows' KL: the split holds where they are close).
A variant is ``name=key=value key=value ...`` (overrides on the run's config, as ``hierarl train`` takes them;
``algo=ppo`` switches algorithm and keeps the shared ``algo.*`` keys). Measured per variant:
* the update's KL per token group on the batch it trained on (``kl_update/<group>``: switch, subgoal of a boundary
  turn, subgoal copied on a KEEP turn, action, other; ``learners.diagnostics``);
* the change of log P(expert decision) on a fixed teacher-forced probe: the env expert's demonstrations on the first
  eval tasks (sorted ids) until ``--probe-states`` states, each split by the expert's decision (turn 0, KEEP,
  SWITCH) and segment (final or not): Δ log P of the ``<switch>`` block, of the new subgoal (SWITCH states) and of
  the action, in nats, mean over states; for a protocol with several roles, also per role (each row read under its
  role's adapter: STEP-HRL's high / low / progress, Multi2's planner and executor), a second table; split too by
  whether the start policy's greedy reply is already the expert's (``greedy_right`` / ``greedy_wrong``: where it
  is right an update can only lose);
* the same Δ log P on a second probe, the expert's decisions on the batch's own train tasks (``train/...``): what
  the update does where it was taken, beside what it does on held-out tasks.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from _env import setup

ROOT = setup()

from bench_prompts import cpu_model  # noqa: E402


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``name=key=value key=value`` → (name, ["key=value", ...]); a bare ``name`` keeps the run's config."""
    head, *rest = text.split()
    name, _, first = head.partition("=")
    return name, ([first] if first else []) + rest


def _run_config(run: Path, overrides: list[str]) -> Any:
    """The run's saved config with ``overrides`` applied (the saved YAML as a preset, then the overrides)."""
    from launch.config import resolve_config

    text = (run / "config.yaml").read_text().split("\nresolved_algo:\n", 1)[0]
    # a run written before the controls became learner.advantage_scale
    text = text.replace("  negate_advantages: false\n", "").replace(
        "  negate_advantages: true\n", "  advantage_scale: -1\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    return resolve_config(f.name, overrides)


def _reference_weights(state: Path, start: Path, ref: str) -> dict[str, Any]:
    """The KL reference ``ref`` (``ref_<adapter>``) the run's update used: the frozen copy saved with the state
    (an online run: the policy RL began with; Multi2's online phase: π_off), else the start's policy adapter (a
    variant that keeps a reference the run did not)."""
    from actors.lora_weights import read_peft_adapter

    name = ref.removeprefix("ref_")
    for folder in (state / "adapter" / ref, start / "adapter" / name, start / "adapter"):
        if (folder / "adapter_config.json").exists():
            return read_peft_adapter(folder)[0]
    raise SystemExit(f"bench_replay: no weights for the reference {ref!r} under {state} or {start}")


def replay_updater(
    cfg: Any,
    algo: Any,
    algo_cfg: Any,
    learner: Any,
    state: Path,
    start: Path,
    pad: int,
    *,
    engine_old_logprobs: bool = False,
) -> Any:
    """The run's ``Updater`` over ``learner`` (``launch.driver.wiring.updater``) at ``state``, the KL references its update
    read loaded; the rollouts were the state's own, so no behaviour correction, and π_old as ``engine_old_logprobs``
    says (False: recomputed)."""
    from launch.driver.wiring import updater

    up = updater(cfg, algo, algo_cfg, learner, pad)
    up.behaviour_is_cap = 0.0
    up.engine_old_logprobs = engine_old_logprobs
    for ref in up.ref_adapters:
        learner.load_adapter_weights(_reference_weights(state, start, ref), adapter=ref)
    return up


def _driver_stage(cfg: Any, algo: Any, algo_cfg: Any, tok: Any, pad: int, updater: Any, run: Path) -> Any:
    """The variant's driver stage over the run's folder (``launch.driver.stage_builders.STAGES``, as ``build_run`` builds it), with
    no rollouts: what it would collect (HISR's π_ref episodes, the stored data) must be there already."""
    from launch.driver.stage_builders import StageInputs, stage_builder

    def no_rollouts(*_: Any, **__: Any) -> list[Any]:
        raise RuntimeError("bench_replay: the driver stage's data and models are read back, never collected")

    inputs = StageInputs(
        cfg=replace(cfg, run_dir=str(run)),
        algo=algo,
        algo_cfg=algo_cfg,
        tokenizer=tok,
        pad_id=pad,
        train_ids=(),
        learner=updater.learner,
        collect=no_rollouts,
        sample=no_rollouts,
        demonstrations=no_rollouts,
        log=lambda _row: None,
        freeze_reference=updater.freeze_reference,
    )
    return stage_builder(algo)(inputs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, type=Path)
    ap.add_argument("--iteration", type=int, default=1, help="replay iteration k's update (state iter_<k-1>)")
    ap.add_argument("--variant", action="append", default=[], help="name=key=value ... (repeatable)")
    ap.add_argument(
        "--repeats", type=int, default=2, help="runs of the first variant, with other mini-batch seeds"
    )
    ap.add_argument("--probe-states", type=int, default=50)
    ap.add_argument("--critic-from-run", action="store_true")
    ap.add_argument(
        "--controls", action="store_true", help="each variant also with its advantages negated and zeroed"
    )
    ap.add_argument(
        "--critic-passes",
        type=int,
        default=None,
        help="critic-only passes before the update (default: a fresh critic's learner.critic_warmup_passes; none "
        "for the run's critic, which the run already fitted)",
    )
    ap.add_argument("--out", type=Path, default=Path("bench/results/replay.json"))
    args = ap.parse_args(argv)
    return replay(args)


def replay(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoTokenizer

    from actors.models import resolve_model_path
    from actors.trajectory import read_jsonl
    from cluster.ray_cluster import WorkerResources, init_ray
    from launch.config import resolve_algo_config
    from launch.driver.algos import get_algo
    from launch.driver.stages import staged_update
    from launch.driver.warm_start import start_rl
    from launch.driver.wiring import env_task_ids, expert_demonstrations, learner_spec
    from learners.batch import build_turn_batch
    from learners.diagnostics import probe_deltas, probe_splits
    from learners.group import LearnerGroup
    from learners.learner_spec import CRITIC_ADAPTER
    from learners.targets import sequences

    run, k = args.run, args.iteration
    state, start = run / "checkpoints" / f"iter_{k - 1}", run / "checkpoints" / "iter_0"
    traj_path = run / "trajectories" / f"iter_{k}.jsonl"
    for need in (state, start, traj_path):
        if not need.exists():
            raise SystemExit(
                f"bench_replay: {need} is missing (run with save_trajectories=true checkpoint_keep_last=0)"
            )
    base = _run_config(run, [])
    model_path = resolve_model_path(base.model.path, base.model.cache_dir)
    tok = AutoTokenizer.from_pretrained(model_path)
    pad = tok.pad_token_id or tok.eos_token_id
    init_ray(base.ray_address, device="cpu")

    def probe_on(ids: list[str]) -> Probe:
        """The expert's decisions on ``ids`` (in order, until ``--probe-states`` states), in the run's format."""
        trajs: list[Any] = []
        for chunk in range(0, len(ids), 4):
            trajs += expert_demonstrations(
                replace(base, bc=replace(base.bc, episodes=4)), tok, ids[chunk : chunk + 4]
            )
            if sum(len(t.turns) for t in trajs) >= args.probe_states:
                break
        turns = build_turn_batch(trajs, max_len=base.learner.max_seq_len, pad_id=pad)
        return Probe(trajs, turns, sequences(turns, ()), probe_splits(trajs))

    batch_tasks = sorted({t.task_id for t in read_jsonl(traj_path)})
    probes = {
        "": probe_on(sorted(env_task_ids(base, base.env.eval_split))),  # held-out: the first eval tasks
        "train/": probe_on(batch_tasks),  # the tasks the replayed batch was collected on
    }
    splits = probes[""].splits

    variants = [parse_variant(v) for v in args.variant] or [("run", [])]
    plan = [(variants[0][0] + (f"#{r}" if r else ""), variants[0][1], r) for r in range(args.repeats)]
    plan += [(name, over, 0) for name, over in variants[1:]]
    if args.controls:
        plan = [
            (f"{name}{tag}", [*over, *extra], r)
            for name, over, r in plan
            for tag, extra in (("", []), ("/neg", [NEGATE]), ("/zero", [ZERO]))
            if not (r and tag)
        ]
    rows, before = [], None
    for name, overrides, repeat in plan:
        cfg = _run_config(run, overrides)
        algo = get_algo(cfg.algo)
        algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
        t0 = time.perf_counter()
        spec = learner_spec(cfg, algo, algo_cfg, model_path, "cpu")
        learner = LearnerGroup(
            spec, cfg.learner.num_workers, WorkerResources(cfg.learner.cpus_per_worker, 0.0)
        )
        try:
            own_critic = args.critic_from_run and cfg.algo == base.algo and algo.value_slots
            policy = list(cfg.model.adapter_names) or ["default"]
            learner.load_checkpoint(str(state), only=[*policy, *([CRITIC_ADAPTER] if own_critic else [])])
            updater = replay_updater(cfg, algo, algo_cfg, learner, state, start, pad)
            if k == 1:  # RL starts here, as the driver starts it
                start_rl(learner, cfg.learner, policy)
            lp_before = {key: p.logprobs(updater) for key, p in probes.items()}
            if before is None:  # the start policy: whether its greedy reply is already the expert's
                before = lp_before[""]
                for p in probes.values():
                    p.mark_greedy(learner, updater)
            trajs = list(read_jsonl(traj_path))
            for t in trajs:
                for turn in t.turns:
                    turn.shaped.clear()
            warmup = args.critic_passes
            if warmup is None:
                warmup = 0 if own_critic else cfg.learner.critic_warmup_passes
            # the algorithm's own models beside policy and critic (HISR's reward models) as the run had them, and
            # its driver stage as a resume from iter_<k-1> finds it
            models = [n for n, _ in spec.adapters if n not in policy] + [c.name for c in spec.extra_critics]
            if models:
                learner.load_checkpoint(str(state), only=models)
            stage = _driver_stage(cfg, algo, algo_cfg, tok, pad, updater, run)
            stage.restore(torch.load(state / "driver.pt", weights_only=False))
            stage.prepare(k - 1)
            metrics, timings = staged_update(
                updater,
                stage,
                trajs,
                algo,
                algo_cfg,
                seed=cfg.seed + k + 1000 * repeat,
                iteration=k,
                critic_warmup=warmup,
            )
            lp_after = {key: p.logprobs(updater) for key, p in probes.items()}
        finally:
            learner.shutdown()
        start_diff = max(float(np.nanmax(np.abs(before[b] - lp_before[""][b]), initial=0.0)) for b in before)
        deltas = {
            f"{key}{name}": v
            for key, p in probes.items()
            for name, v in probe_deltas(p.splits, lp_before[key], lp_after[key]).items()
        }
        row = {
            "variant": name,
            "overrides": overrides,
            "repeat": repeat,
            "algo": cfg.algo,
            "critic_warmup_passes": warmup,
            "start_diff": start_diff,
            "probe": deltas,
            "metrics": {k2: v for k2, v in metrics.items() if isinstance(v, int | float)},
            "timings": timings,
            "wall_s": time.perf_counter() - t0,
        }
        rows.append(row)
        print(_line(row), flush=True)
        out = {
            "run": str(run),
            "iteration": k,
            "trajectories": len(trajs),
            "probe_states": len(splits),
            "probe_split_counts": {
                s: sum(x["kind"] == s for x in splits) for s in ("turn0", "keep", "switch")
            },
            "probe_greedy_right": sum(bool(x.get("start_greedy")) for x in splits),
            "train_probe_tasks": batch_tasks,
            "train_probe_states": len(probes["train/"].splits),
            "train_probe_greedy_right": sum(bool(x.get("start_greedy")) for x in probes["train/"].splits),
            "cpu": cpu_model(),
            "rows": rows,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))  # after every row: a failure later loses none of them
        if start_diff > START_TOLERANCE:
            raise SystemExit(
                f"bench_replay: {name} starts from another policy than the first row (probe log-probs differ by up "
                f"to {start_diff:.3g} nats > {START_TOLERANCE}); rows so far in {args.out}"
            )
    print(table(out), flush=True)
    return 0


NEGATE, ZERO = "learner.advantage_scale=-1", "learner.advantage_scale=0"


@dataclass
class Probe:
    """Expert demonstrations read teacher-forced: their turns, sequences and per-state splits."""

    trajs: list[Any]
    turns: Any
    seqs: Any
    splits: list[dict[str, Any]]

    def logprobs(self, updater: Any) -> dict[str, np.ndarray]:
        """Each block's summed log-probs per state under the updater's policy (``block_logprobs``)."""
        from learners.diagnostics import block_logprobs

        rows = updater.adapter_rows(self.trajs, self.turns)
        return block_logprobs(self.turns, updater.policy_logprobs(self.seqs, rows))

    def mark_greedy(self, learner: Any, updater: Any) -> None:
        """Mark each state with whether the policy's greedy reply is the expert's (every response token its
        argmax), under the adapter of the state's role."""
        match = np.zeros(self.seqs.input_ids.shape, np.float32)
        for name, rows in updater.adapter_rows(self.trajs, self.turns).items():
            match[rows] = learner.greedy_match(self.seqs.rows(rows), adapter=name)
        resp = self.seqs.response_mask.astype(bool)
        for split, m, r in zip(self.splits, match, resp, strict=True):
            split["start_greedy"] = bool(m[r].all())


START_TOLERANCE = 1e-2
"""Nats by which a row's start policy may differ from the first row's on a probe block's summed log-probs (each row
records its ``start_diff``): learner processes of other configs sum the same fp32 log-probs in another order (a
check at 1e-4 once failed on that alone); a wrong checkpoint differs by whole nats."""


def _line(row: dict[str, Any]) -> str:
    m, p = row["metrics"], row["probe"]
    return (
        f"[replay] {row['variant']:<16} kl {m.get('kl_update', 0):.5f} switch {m.get('kl_update/switch', 0):.5f} "
        f"action {m.get('kl_update/action', 0):.5f} | dlogP action {p.get('action/all', 0):+.4f} switch "
        f"{p.get('switch/all', 0):+.4f}"
        + (
            f" | A mean {m['adv_mean']:+.4f} sd {m['adv_std']:.4f} >0 {m['adv_pos_share']:.2f}"
            if "adv_std" in m
            else ""
        )
        + f" ({row['wall_s']:.0f}s)"
    )


TABLE_KL = (
    "kl_update",
    "kl_update/switch",
    "kl_update/subgoal",
    "kl_update/subgoal_keep",
    "kl_update/action",
)
TABLE_PROBE = (
    "action/all",
    "action/turn0",
    "action/keep",
    "action/greedy_wrong",
    "action/greedy_right",
    "switch/keep",
    "subgoal/switch",
    "response/keep",
    "train/action/all",
)


def table(out: dict[str, Any]) -> str:
    """Markdown: one row per variant; update KL per token group (x1e3), then Δ log P(expert) on the probe."""
    head = ["variant", *(c.replace("kl_update", "KL").replace("/", " ") for c in TABLE_KL), "steps"]
    head += [f"dlogP {c.replace('/', ' ')}" for c in TABLE_PROBE]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in out["rows"]:
        m, p = row["metrics"], row["probe"]
        cells = [row["variant"], *(f"{1e3 * m.get(c, float('nan')):.2f}" for c in TABLE_KL)]
        cells.append(f"{m.get('optimizer_steps', 0):.0f}")
        cells += [f"{p.get(c, float('nan')):+.3f}" for c in TABLE_PROBE]
        lines.append("| " + " | ".join(cells) + " |")
    lines += controls_table(out["rows"])
    role_cols = sorted({c for row in out["rows"] for c in row["probe"] if "." in c.split("/")[0]})
    if role_cols:  # several roles: Δ log P of each role's blocks, every state of that role
        lines += [
            "",
            "| variant | " + " | ".join(f"dlogP {c.removesuffix('/all')}" for c in role_cols) + " |",
        ]
        lines.append("|" + "---|" * (len(role_cols) + 1))
        for row in out["rows"]:
            cells = [row["variant"], *(f"{row['probe'].get(c, float('nan')):+.3f}" for c in role_cols)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def controls_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: for each variant replayed with its controls (``--controls``), the update KL of it and its
    negated twin, and on the probe's action blocks its first-order part (Δ − Δ_neg) / 2, its sign-independent part
    (Δ + Δ_neg) / 2 and the zero-advantage row's Δ (what the optimizer and the KL term do with no signal)."""
    by = {r["variant"]: r for r in rows}
    cols = ("action/all", "action/turn0", "action/keep", "action/greedy_wrong", "train/action/all")
    lines = []
    for name, row in by.items():
        neg, zero = by.get(f"{name}/neg"), by.get(f"{name}/zero")
        if neg is None or zero is None:
            continue
        if not lines:
            head = ["variant", "KL ×1e3", "KL neg ×1e3", "KL zero ×1e3"]
            head += [f"{kind} {c}" for c in cols for kind in ("first-order", "sign-indep.", "zero")]
            lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        cells = [name] + [
            f"{1e3 * r['metrics'].get('kl_update', float('nan')):.2f}" for r in (row, neg, zero)
        ]
        for c in cols:
            a, b = row["probe"].get(c, float("nan")), neg["probe"].get(c, float("nan"))
            cells += [
                f"{(a - b) / 2:+.3f}",
                f"{(a + b) / 2:+.3f}",
                f"{zero['probe'].get(c, float('nan')):+.3f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
