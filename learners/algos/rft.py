"""Rejection-sampling fine-tuning (RFT): behaviour cloning on the policy's own won episodes, the control that says
whether an RL method's machinery (advantages, critic, ratios) adds anything over imitating its successes.

The policy plays the RL tasks exactly as any RL algorithm's iteration does (same tasks, groups, sampling); the
update is the negative log-likelihood of every response token of the episodes that won, token-mean, and nothing of
the lost ones (STaR, Zelikman et al. 2022; RAFT, Dong et al. 2023; ReST's improve step, Gulcehre et al. 2023; the
"expert iteration" baseline of agent-RL papers). No critic, no π_old pass, no KL term. A batch without a win trains
nothing (``learners.prepare.takes_policy_step``: no loss token, no step).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.trajectory import Trajectory
from learners.algo_config import RLConfig
from learners.algorithm import Algorithm
from learners.algos.sft import policy_loss
from learners.batch import TurnBatch
from learners.targets import Targets


@dataclass(frozen=True)
class Config(RLConfig):
    """No shaping: the episode's win is the only thing read."""

    reward_terms: tuple[str, ...] = ()


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    """Loss on the response tokens of rows whose episode won; no advantage (the NLL reads none)."""
    resp = batch.response_mask.numpy()
    won = np.array([trajectories[i].won for i, _ in batch.index], bool)
    return Targets(
        token_adv=np.zeros(resp.shape, np.float32),
        loss_mask=resp & won[:, None],
        value_target=np.zeros((len(batch), 0), np.float32),
        value_valid=np.zeros((len(batch), 0), bool),
        stats={"rft_rows": float(won.sum())},
    )


ALGORITHM = Algorithm(
    name="rft",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=policy_loss,
    uses_old_logprobs=False,  # NLL needs no π_old
)
