"""STEP-HRL: step-level offline RL with IQL critics and advantage-weighted regression (STEP-HRL Sec. 3.3, App. B).

Three roles (high / low / progress, ``actors.agents.step_hrl``) share one LoRA policy; each has its own critic heads
Q(s, u) and V(s) on one critic model (the base with its own LoRA): V read at the last prompt token (the state-end
token), Q at the last response token (the action-end token), as "the hidden state of the last token" of Sec. 3.3.
The data are step-level transitions (``learners.transitions``) of expert demonstrations plus BC-policy rollouts,
mixed 1:2 (Sec. 4.1, App. A), built and cached by ``launch.driver.offline_data``.

    L_Q = E[(r + γ (1 − done) V_target(s') − Q(s, u))²]                  (Eq. 11)
    L_V = E[L₂^τ₂(Q_target(s, u) − V(s))],  L₂^τ(d) = |τ − 1(d < 0)| d²   (Eq. 12)
    L_A = −E[exp(A(s, u) / β) log π(u | s)],  A = Q(s, u) − V(s)          (Eq. 13, log π summed over tokens: Eq. 10)

Table 4: γ 0.99, β 0.95, τ₁ (soft target update) 0.2, τ₂ (expectile) 0.95, 100 critic warm-up steps, actor lr 1e-5,
critic lr 1e-4, 3 offline epochs, batch 128.

Deviations and readings, each labelled:
* **Target refresh.** Q_target(s, u), V_target(s') and A are computed once per pass over the data (one driver
  iteration = ``learner.ppo_epochs`` passes on the same targets), from the target critic and the critic at the
  start of the pass; the target copy itself is soft-updated with τ₁ after every critic step, as in the paper.
* **Warm-up in whole passes.** The critic trains alone until it has taken ``warmup_steps`` steps, rounded up to
  whole passes: A comes from the critic at the start of a pass, so an actor joining mid-pass would train on the
  advantages of an unwarmed critic (measured: with a zero-initialised head every A is 0, and the actor's first pass
  is plain BC on the whole dataset, failures included: eval 0.25 -> 0.00 on the synthetic preset).
* **Weights capped** at ``max_weight`` (100, IQL's cap; the paper reports none).
* ``actor_loss="advantage"`` trains with A · log π (what the authors' code does after computing the weights); the
  default ``"awr"`` is Eq. 13.
* r̂ (the low level's intrinsic reward) and the progress role's reward are this repo's readings
  (``learners.transitions``); the paper's DeepSeek annotation of subtasks and progress is replaced by the expert
  plan's subgoals and a deterministic progress text (``actors.demos``).
* Q and V share one critic model per role-head pair (six heads on one LoRA critic), not a network per role:
  the paper says "a separate critic network" per role; ours separates them by head.
* **Expectile direction.** Eq. 12 is IQL's L₂^τ₂ with τ₂ = 0.95 > 0.5, "an upper expectile", the default
  (``expectile_direction="iql"``). The authors' public code (TonyStark042/STEP-HRL, ``alg/step_rl.py``) weighs
  V − Q_target < 0 by 1 − τ₂ and > 0 by τ₂ ("conservative estimate"), which is IQL at 1 − τ₂: its V tracks the
  lower 0.05 expectile. ``expectile_direction="authors"`` gives the code's weights.
* **Collection temperature.** App. B samples the high-level and local-progress policies at 0.7 and the low level
  greedily (temperature 0, for well-formed actions; App. A says 1.0 and 0); the authors' collection code calls
  ``generate`` without sampling, greedy for every role. Ours samples all three roles at one
  ``collect_temperature`` (0.7: App. B's for two of the three roles), because a rollout worker batches every
  role's prompts in one generation call with one temperature; per-role temperatures need that call split by role
  (``actors.episodes.iter_episodes``). ``collect_temperature=0`` is the authors' code (greedy everywhere).
* **Behaviour cloning** (Sec. 3.2) is the run's shared ``bc`` phase, token-mean NLL by default (one BC start for
  every method compared); Eq. 9–10 sum log π over a response's tokens and average over responses
  (``bc.agg=seq-mean-token-sum``); the authors' code averages each response's token log-probs
  (``bc.agg=seq-mean-token-mean``). The RL actor loss does sum them (Eq. 10 via Eq. 13, ``agg``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.algo_config import OfflineRLConfig, value_expectile
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.losses import awr_weights, iql_slot_loss
from learners.targets import (
    CriticInputs,
    PolicyInputs,
    Targets,
    ValueSlot,
    advantage_stats,
    broadcast_turn_values,
    whiten_groups,
)
from learners.transitions import ROLES, step_hrl_transitions, with_truncation


@dataclass(frozen=True)
class Config(OfflineRLConfig):
    """Table 4's constants over the shared offline fields (``learners.algo_config.OfflineRLConfig``): AWR β 0.95
    (Eq. 13), expectile τ₂ 0.95 (Eq. 12), target τ₁ 0.2, a critic warm-up of 100 steps (App. B), the 1:2 data
    mixture (App. A), collection at 0.7 (App. B, high/progress roles; see ``launch.driver.offline_data``)."""

    beta: float = 0.95
    warmup_steps: int = 100


def _slots() -> tuple[ValueSlot, ...]:
    current = []
    for i, role in enumerate(ROLES):
        current += [
            ValueSlot(f"q_{role}", 2 * i, "response_last"),
            ValueSlot(f"v_{role}", 2 * i + 1, "prompt_last"),
        ]
    target = [ValueSlot(f"{s.name}_target", s.head, s.at, target=True) for s in current]
    return (*current, *target)


VALUE_SLOTS = _slots()
"""Slots 0..5: Q_high, V_high, Q_low, V_low, Q_progress, V_progress of the critic; 6..11 the same of the target."""
N_CURRENT = 2 * len(ROLES)


def q_slot(role: str) -> int:
    return 2 * ROLES.index(role)


def v_slot(role: str) -> int:
    return 2 * ROLES.index(role) + 1


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    """Per row (one turn of role r): Q-slot target r + γ(1 − done) V_target(s'), V-slot target Q_target(s, u),
    both valid only on r's slots; every response token gets A = Q(s, u) − V(s) (``advantage_q="target"``:
    Q_target(s, u) − V(s)). ``values`` float[B, 12] in
    ``VALUE_SLOTS`` order."""
    assert values is not None, "STEP-HRL needs critic values"
    b = len(batch)
    row_of = {ij: r for r, ij in enumerate(batch.index)}
    trans = [
        with_truncation(step_hrl_transitions(t, cfg.env_reward_scale), cfg.truncation) for t in trajectories
    ]
    target = np.zeros((b, len(VALUE_SLOTS)), np.float32)
    valid = np.zeros((b, len(VALUE_SLOTS)), bool)
    adv = np.zeros(b)
    roles = [trajectories[i].turns[j].role for i, j in batch.index]
    for r, (i, j) in enumerate(batch.index):
        role = roles[r]
        q, v = q_slot(role), v_slot(role)
        tr = trans[i]
        nxt = row_of.get((i, int(tr.next_turn[j])), r) if tr.next_turn[j] >= 0 else r
        v_next = 0.0 if tr.done[j] else float(values[nxt, N_CURRENT + v])
        target[r, q] = tr.reward[j] + cfg.gamma * v_next
        target[r, v] = values[r, N_CURRENT + q]
        valid[r, [q, v]] = True
        adv[r] = values[r, q if cfg.advantage_q == "online" else N_CURRENT + q] - values[r, v]
    resp = batch.response_mask.numpy()
    weighted = adv
    if cfg.adv_norm == "whiten":
        weighted = whiten_groups(adv, [np.array(roles) == role for role in ROLES])
    return Targets(
        token_adv=broadcast_turn_values(weighted, resp),
        loss_mask=resp,
        value_target=target,
        value_valid=valid,
        stats={  # the critic's A, before any whitening
            **advantage_stats(adv),
            **{f"transitions_{role}": float(roles.count(role)) for role in ROLES},
        },
    )


def policy_loss(new_lp: torch.Tensor, inputs: PolicyInputs, cfg: Config):
    """Per-token −w · log π with w = min(exp(A/β), max_weight) (Eq. 13) or w = A (``actor_loss="advantage"``);
    A is ``inputs.token_adv``. Summed over a row's tokens and averaged over rows by the ``seq-mean-token-sum``
    aggregation, this is −E[w log π(u|s)]."""
    mask = inputs.loss_mask.bool()
    adv = inputs.token_adv.float()
    w = awr_weights(adv, cfg.beta, cfg.max_weight) if cfg.actor_loss == "awr" else adv
    zero = torch.zeros_like(new_lp)
    loss = torch.where(mask, -w * new_lp, zero)
    n = mask.sum().clamp(min=1)
    return loss, {
        "awr_weight": float(torch.where(mask, w, zero).sum() / n),
        "nll": float(torch.where(mask, -new_lp, zero).detach().sum() / n),
    }


IS_V_SLOT = tuple(k < N_CURRENT and k % 2 == 1 for k in range(len(VALUE_SLOTS)))


def value_loss(values: torch.Tensor, inputs: CriticInputs, cfg: Config):
    """Σ w · ℓ over float[B, 12]: ℓ = (y − Q)² on Q slots (Eq. 11), L₂^τ₂(y − V) on V slots (Eq. 12), with w the
    convention's ``value_weight`` (0 on the target slots and on the other roles' slots)."""
    tau = value_expectile(cfg.expectile, cfg.expectile_direction)
    return iql_slot_loss(values, inputs.value_target, inputs.value_weight, IS_V_SLOT, tau)


ALGORITHM = Algorithm(
    name="step_hrl",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=policy_loss,
    value_slots=VALUE_SLOTS,
    value_loss=value_loss,
    uses_old_logprobs=False,  # AWR reads no π_old; expert demonstrations carry no sampling log-probs
    agents=("step_hrl",),
    target_critic=True,
    offline=True,
    driver_stage="offline_data",
)
