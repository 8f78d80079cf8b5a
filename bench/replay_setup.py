"""What an update replay starts from (``bench/bench_replay.py``, and ``bench_iteration``'s learner arms): the run's saved
config with a variant's overrides, its ``Updater`` at a checkpoint with the KL references the update read, the
variant's driver stage read back from the run folder, and the teacher-forced probe of the expert's decisions."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np


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
    variant: tuple[Any, Any, Any],
    learner: Any,
    state: Path,
    start: Path,
    pad: int,
    *,
    engine_old_logprobs: bool = False,
) -> Any:
    """The run's ``Updater`` of ``variant`` (its config, algorithm and algorithm config) over ``learner``
    (``launch.driver.wiring.updater_settings``) at ``state``, the KL references its update read loaded; the
    rollouts were the state's own, so no behaviour correction, and π_old as ``engine_old_logprobs`` says (False:
    recomputed)."""
    from launch.driver.updater import Updater
    from launch.driver.wiring import updater_settings

    cfg, algo, algo_cfg = variant
    settings = updater_settings(cfg, algo, algo_cfg, learner.spec.device, pad)
    settings = replace(settings, behaviour_is_cap=0.0, engine_old_logprobs=engine_old_logprobs)
    up = Updater(learner, algo, algo_cfg, settings)
    for ref in up.ref_adapters:
        learner.load_adapter_weights(_reference_weights(state, start, ref), adapter=ref)
    return up


def _driver_stage(variant: tuple[Any, Any, Any], tok: Any, pad: int, updater: Any, run: Path) -> Any:
    """The variant's driver stage over the run's folder (its kind in ``launch.driver.stage_kinds``, built as
    ``build_run`` builds it), with no rollouts: what it would collect (HISR's π_ref episodes, the stored data) must
    be there already."""
    from launch.driver.stage_kinds import stage_kind
    from launch.driver.stages import StageInputs

    def no_rollouts(*_: Any, **__: Any) -> list[Any]:
        raise RuntimeError("bench_replay: the driver stage's data and models are read back, never collected")

    cfg, algo, algo_cfg = variant
    kind = stage_kind(algo)
    inputs = StageInputs(
        algo=algo,
        algo_cfg=algo_cfg,
        run_dir=run,
        seed=cfg.seed,
        sections=kind.sections_of(cfg),
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
    return kind.build(inputs)


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


def expert_probe(base: Any, tok: Any, pad: int, ids: list[str], states: int) -> Probe:
    """The expert's decisions on ``ids`` (in order, until ``states`` states), in the run's format."""
    from launch.driver.wiring import expert_demonstrations
    from learners.batch import build_turn_batch
    from learners.diagnostics import probe_splits
    from learners.targets import sequences

    trajs: list[Any] = []
    for chunk in range(0, len(ids), 4):
        trajs += expert_demonstrations(
            replace(base, bc=replace(base.bc, episodes=4)), tok, ids[chunk : chunk + 4]
        )
        if sum(len(t.turns) for t in trajs) >= states:
            break
    turns = build_turn_batch(trajs, max_len=base.learner.max_seq_len, pad_id=pad)
    return Probe(trajs, turns, sequences(turns, ()), probe_splits(trajs))
