"""Where the policy starts before RL: behaviour cloning on the env expert's demonstrations, another run's BC
checkpoint (``bc.from_run``), or a saved PEFT adapter (``model.init_adapter``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from actors.lora_weights import read_peft_adapter
from actors.trajectory import Trajectory
from common.lora import LoraSpec
from launch.driver.update_plan import UpdatePlan
from launch.driver.updater import Updater
from launch.evaluation.metrics import EVAL_PREFIXES
from learners.algos.registry import get_algo
from learners.group import LearnerGroup


def bc_loss_config(bc_cfg: Any) -> Any:
    """The SFT config of the behaviour-cloning warm start (``bc``: the run's BC section): NLL aggregated by
    ``bc.agg``."""
    return get_algo("sft").Config(agg=bc_cfg.agg)


def behaviour_cloning(
    updater: Updater,
    demos: Sequence[Trajectory],
    bc_cfg: Any,
    *,
    seed: int,
    after_epoch: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """``bc_cfg.epochs`` SFT epochs on ``demos`` (``bc``: the run's BC section) through the run's learner group (an
    ``Updater`` of SFT beside the run's ``updater``), at the BC learning rate and mini-batch; NLL aggregated by
    ``bc.agg``; ``after_epoch(k)`` after the k-th pass of each k in ``bc.eval_epochs`` (the trainer's evaluation of
    the BC curve). Returns the BC row's fields."""
    t0 = time.perf_counter()
    bc = updater.with_algorithm(get_algo("sft"), bc_loss_config(bc_cfg))
    out: dict[str, Any] = {"demos": len(demos), "turns": sum(len(d.turns) for d in demos)}
    for epoch in range(bc_cfg.epochs):
        # one pass per BC epoch, whatever the RL updates' ppo_epochs
        plan = UpdatePlan(
            seed=seed + epoch, lr=bc_cfg.lr, mini_batch_size=bc_cfg.mini_batch_size, measure=False, epochs=1
        )
        m = bc.update(list(demos), plan).metrics
        out[f"nll_epoch{epoch}"] = m.get("nll", float("nan"))
        # several adapters (Multi2's planner and executor): each one's NLL too, since their row counts differ
        per_adapter = {k.removesuffix("/nll"): v for k, v in sorted(m.items()) if k.endswith("/nll")}
        out.update({f"{name}/nll_epoch{epoch}": v for name, v in per_adapter.items()})
        each = ", ".join(f"{name} {v:.3f}" for name, v in per_adapter.items())
        print(
            f"[hierarl] BC epoch {epoch + 1}/{bc_cfg.epochs}: nll {out[f'nll_epoch{epoch}']:.3f}"
            f"{f' ({each})' if each else ''} ({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )
        if after_epoch is not None and epoch + 1 in bc_cfg.eval_epochs:
            after_epoch(epoch + 1)
    out["wall_s"] = time.perf_counter() - t0
    return out


def bc_from_run(
    learner: LearnerGroup, ckpt: Path, adapters: Sequence[str], *, with_eval: bool = False
) -> dict[str, Any]:
    """``bc.from_run``: the policy adapters (with their optimizer state) after another run's BC, and that run's BC
    row (its demonstrations, NLLs and wall time; the critic, which BC never trains, keeps its initialisation);
    ``with_eval``: its evaluation after BC too (the ``eval_*`` and ``train_eval_*`` fields)."""
    learner.load_checkpoint(str(ckpt), only=list(adapters))
    rows = (json.loads(r) for r in (ckpt.parent.parent / "metrics.jsonl").read_text().splitlines() if r)
    bc = next((r for r in rows if r.get("phase") == "bc"), {})
    evaluated = EVAL_PREFIXES if with_eval and "eval_success" in bc else ()
    keep = {
        k: v
        for k, v in bc.items()
        if k in ("demos", "turns", "wall_s") or "nll_epoch" in k or (evaluated and k.startswith(evaluated))
    }
    print(f"[hierarl] BC warm start taken from {ckpt}", flush=True)
    return {"demos": 0, "turns": 0, "wall_s": 0.0, **keep, "bc_from_run": str(ckpt.parent.parent)}


def start_rl(learner: LearnerGroup, learner_cfg: Any, adapters: Sequence[str]) -> None:
    """RL begins: each policy adapter's AdamW moments forgotten (``learner.rl_optimizer=fresh``) and its learning rate
    warmed up over ``learner.rl_warmup_steps`` steps (``learner``: the run's learner section). The driver calls it
    once, before checkpoint 0, so a resume or an update replay from ``iter_0`` starts RL the same way."""
    for name in adapters:
        learner.start_rl(
            name, fresh=learner_cfg.rl_optimizer == "fresh", warmup_steps=learner_cfg.rl_warmup_steps
        )


def load_init_adapter(learner: LearnerGroup, path: str, lora: LoraSpec) -> None:
    """Warm start from a saved PEFT adapter (e.g. another run's BC checkpoint), checked against the run's LoRA."""
    weights, spec = read_peft_adapter(Path(path).expanduser())
    mine = (lora.rank, lora.alpha, tuple(sorted(lora.target_modules)))
    if (spec.rank, spec.alpha, tuple(sorted(spec.target_modules))) != mine:
        raise ValueError(
            f"model.init_adapter {path}: rank/alpha/targets {spec.rank}/{spec.alpha}/{spec.target_modules} "
            f"differ from the run's {lora.rank}/{lora.alpha}/{lora.target_modules}"
        )
    learner.load_adapter_weights(weights)
    print(f"[hierarl] policy initialised from {path}", flush=True)
