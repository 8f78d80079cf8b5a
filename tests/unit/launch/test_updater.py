"""One update's phases (``launch/driver/updater.py``) over a fake learner group, without Ray: which passes and steps
an ``UpdatePlan`` asks of the group, in which order, under which timing keys (the metrics rows' ``time_<phase>``),
the skip of a batch without outcome signal, the reference pass skipped while π_ref is the unstepped policy, and
behaviour cloning's updater of SFT over the same group."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from launch.config import LearnerConfig
from launch.driver.update_plan import UpdatePlan, UpdaterSettings
from launch.driver.updater import Updater
from learners.algos import ppo, sft
from tests.unit.glue_turns import glue_traj

ACTOR_LR = 5e-5


class Learner:
    """Records every call; log-probs -0.5 everywhere, values 0, each ``update`` two optimizer steps."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def logprobs(self, seqs: Any, *, reference: bool = False, adapter: str | None = None) -> np.ndarray:
        self.calls.append(("logprobs", "reference" if reference else adapter, len(seqs)))
        return np.full(seqs.input_ids.shape, -0.5, np.float32)

    def values(self, seqs: Any, critic: str | None = None) -> np.ndarray:
        self.calls.append(("values",))
        return np.zeros((len(seqs), len(ppo.ALGORITHM.value_slots)), np.float32)

    def update(self, batch: Any, **kw: Any) -> dict[str, float]:
        steps = ("policy" if kw["policy_loss"] else "") + ("+critic" if kw["value_loss"] else "")
        self.calls.append(("update", kw.get("adapter"), steps, kw["epochs"], kw["mini_batch_size"]))
        return {"optimizer_steps": 2.0, "loss": 0.25, "value_loss": 0.5}

    def set_lr(self, lr: float, adapter: str | None = None) -> None:
        self.calls.append(("set_lr", lr, adapter))

    def adapter_weights(self, adapter: str | None = None) -> dict[str, Any]:
        return {}

    def load_adapter_weights(self, weights: dict[str, Any], adapter: str | None = None) -> None:
        self.calls.append(("load", adapter))


def updater(learner: Learner, cfg: Any, **settings: Any) -> Updater:
    run = LearnerConfig(actor_lr=ACTOR_LR, mini_batch_size=8, ppo_epochs=2, measure_rows=0)
    return Updater(
        learner, ppo.ALGORITHM, cfg, UpdaterSettings(run, pad_id=0, success_reward=1.0, **settings)
    )


def won_and_lost() -> list:
    return [glue_traj("w", [0.0, 1.0], gid="a"), glue_traj("l", [0.0, 0.0], gid="a")]


def test_a_ppo_update_runs_its_phases_in_order_under_the_rows_timing_keys():
    """π_old and the base model's π_ref, the stage's annotation, a critic warm-up pass (one epoch, critic only),
    values, the steps (the run's epochs), the KL measured after; the observer sees the batch before any step."""
    learner = Learner()
    seen: list[int] = []
    plan = UpdatePlan(
        seed=3,
        critic_warmup=1,
        annotate=lambda trajs, turns, logprobs: {"annotated": float(len(trajs))},
        observe=lambda trajs, turns, batch: seen.append(len(learner.calls)),
    )
    metrics, timings = updater(learner, ppo.Config()).update(won_and_lost(), plan)
    assert list(timings) == [
        "advantage",
        "logprobs",
        "reward_models",
        "critic_warmup",
        "values",
        "update",
        "measure",
    ]
    assert learner.calls == [
        ("logprobs", None, 4),
        ("logprobs", "reference", 4),
        ("values",),
        ("update", None, "+critic", 1, 8),
        ("values",),
        ("update", None, "policy+critic", 2, 8),
        ("logprobs", None, 4),
    ]
    assert seen == [5]  # after the passes, before the steps
    assert metrics["annotated"] == 2.0 and metrics["policy_step"] == 1.0 and metrics["loss"] == 0.25
    assert metrics["critic_warmup_loss_first"] == 0.5 and "kl_update" in metrics


def test_a_batch_without_outcome_signal_steps_the_critic_alone(capsys):
    """``algo.no_outcome_batch=skip`` and every episode lost: no policy step (``policy_step`` 0), the critic steps,
    the KL after is the KL before (no pass), and while the reference is the unstepped policy no reference pass is
    read; the first policy step ends that."""
    learner = Learner()
    up = updater(learner, ppo.Config(no_outcome_batch="skip"), ref_adapters=("ref_default",))
    up.freeze_reference()
    lost = [glue_traj("l1", [0.0, 0.0], gid="a"), glue_traj("l2", [0.0], gid="a")]
    learner.calls.clear()
    metrics, _ = up.update(lost, UpdatePlan(seed=0))
    assert metrics["policy_step"] == 0.0 and up.reference_is_policy
    assert learner.calls == [("logprobs", None, 3), ("values",), ("update", None, "+critic", 2, 8)]
    assert "takes no step on this batch: its 2 episodes all ended alike" in capsys.readouterr().out
    learner.calls.clear()
    up.update(won_and_lost(), UpdatePlan(seed=1))
    assert ("logprobs", "ref_default", 4) not in learner.calls and not up.reference_is_policy
    learner.calls.clear()
    up.update(won_and_lost(), UpdatePlan(seed=2))
    assert ("logprobs", "ref_default", 4) in learner.calls


def test_behaviour_clonings_updater_reads_no_pass_and_restores_the_learning_rate():
    """SFT over the same learner group: no π_old, no reference, nothing measured; the plan's learning rate for its
    steps, the run's restored after; one pass at the plan's mini-batch."""
    learner = Learner()
    bc = updater(learner, ppo.Config()).with_algorithm(sft.ALGORITHM, sft.Config())
    plan = UpdatePlan(seed=0, lr=1e-3, mini_batch_size=4, epochs=1, measure=False)
    _, timings = bc.update(won_and_lost(), plan)
    assert learner.calls == [
        ("set_lr", 1e-3, None),
        ("update", None, "policy", 1, 4),
        ("set_lr", ACTOR_LR, None),
    ]
    assert list(timings) == ["advantage", "logprobs", "update"]


def test_role_adapters_step_apart_and_the_critic_on_every_row():
    """Several adapters (here one role on a named adapter): its policy steps on its rows under its own name, then the
    critic on every row; metrics per adapter and their row-weighted mean."""
    learner = Learner()
    up = updater(learner, ppo.Config(), role_adapters={"agent": "actor"}, ref_adapters=("ref_actor",))
    metrics, _ = up.update(won_and_lost(), UpdatePlan(seed=0, measure=False))
    assert [c for c in learner.calls if c[0] != "values"] == [
        ("logprobs", "actor", 4),
        ("logprobs", "ref_actor", 4),
        ("update", "actor", "policy", 2, 8),
        ("update", None, "+critic", 2, 8),
    ]
    assert metrics["actor/loss"] == 0.25 and metrics["loss"] == pytest.approx(0.25)
