"""The algorithm record: everything the driver and the learner need from one algorithm, as plain values (pure).

Each ``learners/algos/<name>.py`` ends with one ``ALGORITHM = Algorithm(...)``; ``learners.algos.registry`` maps names to these
records. The driver reads fields (``value_slots``, ``uses_reference(cfg)``, ``uses_old_logprobs``) instead of
branching on module names or probing configs with ``getattr``; the learner calls ``policy_loss`` and
``value_loss``, which are pure functions of tensors (``learners.targets``: ``PolicyInputs``, ``CriticInputs``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.batch import TurnBatch
from learners.targets import CriticInputs, PolicyInputs, Targets, ValueSlot


class TargetsFn(Protocol):
    def __call__(
        self, trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Any
    ) -> Targets: ...


class PolicyLossFn(Protocol):
    """float[B, L] per-token loss (aggregated by the learner with the mini-batch's ``loss_weight``) + metrics."""

    def __call__(
        self, new_logprobs: torch.Tensor, inputs: PolicyInputs, cfg: Any
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


class ValueLossFn(Protocol):
    """Scalar mini-batch critic loss from values float[B, K] (``learners.targets``' convention) + metrics."""

    def __call__(
        self, values: torch.Tensor, inputs: CriticInputs, cfg: Any
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


def never(_cfg: Any) -> bool:
    return False


@dataclass(frozen=True)
class Algorithm:
    """One trainable algorithm.

    ``Config``: its frozen config dataclass (``algo.<key>`` overrides resolve against it).
    ``value_slots``: where the critic is read (empty: no critic); the critic has ``value_heads`` outputs.
    ``uses_reference(cfg)``: whether the update needs the reference policy's log-probs (a KL term).
    ``uses_old_logprobs``: whether its loss reads log π_old (a PPO ratio) of sampled turns. False (behaviour cloning
    on demonstrations): the learner's log-prob pass is skipped and no engine-vs-learner ``logprob_gap`` is reported.
    ``min_group_size``: smallest ``rollout.group_size`` it works with (group-relative baselines need 2).
    ``agents``: the agent protocols (``rollout.agent``) the method is defined with; empty: any. HIPIF is its
    folded-history protocol as much as its advantage, so ``algo=hipif`` with another agent is refused at start.
    ``offline``: the RL iterations train on a stored dataset (expert demonstrations + BC-policy rollouts, its driver
    stage ``launch.driver.offline_data``), not on fresh rollouts; rollouts only build the data and evaluate.
    With ``offline`` and ``uses_reference(cfg)``, the KL reference is the policy as the online phase found it: a
    frozen copy of each policy adapter (``offline_<name>`` on the learner), taken at the first online iteration;
    offline iterations have no KL term.
    ``anchor_role``: every offline iteration, a share ``cfg.anchor_fraction`` of this role's dataset states get one
    response sampled from the current policy, added as one-turn trajectories with ``info["anchor"]`` (Multi2's
    policy-anchored term; ``launch.driver.offline_data``).
    ``target_critic``: the learner keeps a soft-updated copy of the critic (``cfg.target_tau`` per critic step) that
    value slots with ``target=True`` read, and the first ``cfg.warmup_steps`` optimizer steps train the critic alone.
    ``driver_stage``: the driver's own work for this algorithm around its updates, by name in
    ``launch.driver.stage_kinds.STAGE_KINDS`` (a name, since the learner side imports nothing of the driver), whose
    kind also brings the learner's extra models and its config rules: "reward_models" (HISR,
    ``launch.driver.hisr_rewards``), "offline_data" (STEP-HRL, Multi2: ``launch.driver.offline_data``); "": none.
    """

    name: str
    Config: type
    compute_targets: TargetsFn
    policy_loss: PolicyLossFn
    value_slots: tuple[ValueSlot, ...] = ()
    value_loss: ValueLossFn | None = None
    uses_reference: Callable[[Any], bool] = never
    uses_old_logprobs: bool = True
    min_group_size: int = 1
    agents: tuple[str, ...] = ()
    target_critic: bool = False
    anchor_role: str = ""
    offline: bool = False
    driver_stage: str = ""

    def __post_init__(self) -> None:
        if bool(self.value_slots) != (self.value_loss is not None):
            raise ValueError(f"algorithm {self.name!r}: value slots and a value loss come together")

    def reference_adapters(self, cfg: Any, kl_reference: str, adapters: Sequence[str]) -> tuple[str, ...]:
        """The frozen copies (``ref_<adapter>``; ``adapters`` empty: the one adapter ``default``) the learner keeps as
        the KL term's reference policy: the policy as RL begins (``kl_reference="start"``; an offline algorithm's
        online phase: π_off, always). Empty: no KL term, or ``kl_reference="base"`` (the base model, every adapter
        disabled)."""
        if not self.uses_reference(cfg) or (kl_reference == "base" and not self.offline):
            return ()
        return tuple(f"ref_{n}" for n in adapters or ["default"])

    @property
    def value_heads(self) -> int:
        """Critic outputs: one more than the largest head a slot reads (0: no critic)."""
        return 1 + max(s.head for s in self.value_slots) if self.value_slots else 0
