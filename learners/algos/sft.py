"""Behaviour cloning / SFT: negative log-likelihood of the response tokens only (prompt tokens are context), the
warm start STEP-HRL (Sec. 3.2, behaviour cloning), HISR and Multi2 (System 1 SFT) use before RL.

Demonstrations are expert trajectories in the agent's own output format (``actors.demos``); the loss is
−Σ log π(x_j | x_<j) over response tokens, token-mean over the mini-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.algo_config import RLConfig
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.targets import PolicyInputs, Targets


@dataclass(frozen=True)
class Config(RLConfig):
    """No shaping: behaviour cloning reads no reward."""

    reward_terms: tuple[str, ...] = ()


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    resp = batch.response_mask.numpy()
    return Targets(
        token_adv=np.zeros(resp.shape, np.float32),
        loss_mask=resp,
        value_target=np.zeros((len(batch), 0), np.float32),
        value_valid=np.zeros((len(batch), 0), bool),
    )


def policy_loss(new_lp: torch.Tensor, inputs: PolicyInputs, cfg: Config):
    mask = inputs.loss_mask.bool()
    nll = torch.where(mask, -new_lp, torch.zeros_like(new_lp))
    return nll, {"nll": float(nll.detach().sum() / mask.sum().clamp(min=1))}


ALGORITHM = Algorithm(
    name="sft",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=policy_loss,
    uses_old_logprobs=False,  # NLL needs no π_old, and demonstrations carry no sampling log-probs
)
