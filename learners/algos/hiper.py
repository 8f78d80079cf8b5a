"""HiPER (seed 001): Plan–Execute agent trained with Hierarchical Advantage Estimation and PPO.

Per turn the agent writes ``<switch>KEEP|SWITCH</switch><subgoal>o_t</subgoal><action>a_t</action>``. Rewards
r_t = env reward + format penalty + KEEP penalty c_t = −c_KEEP (1 − q_t) (App. C) + KEEP-consistency penalty (a KEEP
that rewrites the subgoal; the authors' code charges it, the paper's prompt forbids it). Every constant is in units
of the env's success reward R (``reward.shaping``): the paper's c_KEEP 0.3 and format 0.1 against R = 10 are 0.03 R
and 0.01 R, so a TextCraft or synthetic run (R = 1) gets the paper's ratio.

Advantages (``learners.advantages.hierarchical_advantages``): low-level GAE inside segments bootstrapping at the next
boundary (Eq. 6–7; there to the high level's λ-return by default, ``low_bootstrap``), high-level GAE over segments
(Eq. 8), and the switching advantage, one of (``switch_adv``):

* ``"return"`` (default; the authors' code, ``hiper_hae/core_hae.py``): A^switch_t = Ḡ_t − V_sw(s_t, o_{t−1}), Ḡ_t the
  return from t to the end of its segment bootstrapped at the next boundary's V_high, V_sw a third critic head read
  where the switch is decided and regressed on Ḡ_t: a sample of Q^switch − V^switch of Theorem 4.1;
* ``"eq10"`` (the paper): (q_t − β_t)(V_high(s_t) − V_low(s_t, o_{t−1})).

Both are 0 at turn 0 (no switch decision: b_0 = 0 is forced). Actor loss Eq. 28: switch tokens get A^switch, subgoal
tokens A^high on boundary turns only, action tokens A^low (``learners.losses.decision_token_advantages``); a KEEP
turn's copied subgoal is no decision (Eq. 28 gives it nothing); here it carries the turn's A^low by default
(``keep_copy_adv``: it is the executor's text, and without an advantage it drifted freely); + KL to the
reference policy with β = 0.01 (Eq. 30, App. C.1). Critic loss Eq. 12/29: squared error of every valid slot.

The critic (one shared backbone, three heads, App. C.2 plus the authors' third head):
* V_high(s_t): head 0 at the last prompt token, regressed at boundaries;
* V_low(s_t, o_{t−1}): head 1 at the last prompt token (the prompt states o_{t−1}), regressed on KEEP turns, where
  o_t = o_{t−1} and its target is V_low(s_t, o_t)'s;
* V_low(s_t, o_t): head 1 at the last token of the new ``<subgoal>`` block, regressed on every turn;
* V_sw(s_t, o_{t−1}): head 2 at the last prompt token, regressed on Ḡ_t on every decided turn (t ≥ 1).
Every slot is trained whatever ``switch_adv`` reads, so either form can be replayed from the same critic.
Targets (``critic_target``): ``"lambda"`` (default; the authors' ``ret = adv + V``): λ-returns A^low + V_low and
A^high + V_high, which carry the outcome back to early states in one iteration; ``"td0"``: the paper's Eq. 11 / 13.

Advantage normalisation (``adv_norm``, on when ``normalize_advantages``; the paper specifies none): ``"per_type"``
(default, the authors' ``norm_adv``) centres and scales each type over the turns that carry it (every turn for
A^low, boundaries for A^high, decided turns for A^switch). How A^switch is scaled (``switch_norm``): ``"own"``
(centred and scaled by its own std: the authors' choice for the return form), ``"action"`` (divided by A^low's
std and not centred) or ``"raw"`` (neither: in units of the env's success reward R; the return form's default).
Any scaling by a batch std turns a near-expert batch's tiny, structured A^switch (the KEEP charge c_KEEP, the
critic's bias at segment cuts) into a unit-strength push: replayed from a BC policy that wins 0.875, "own" moved
log P of the expert's switch decisions (mostly KEEP) by -3.0 nats in one update (PPO with the same KEEP terms
-3.3), "raw" by -0.003, with a sixth of PPO's update KL (docs/results/hiper_replay_3stage.md). Eq. 10 is already centred (E[q − β] = 0) and its scale is its only measure of confidence:
scaled by its own std any consistent sign of δ = V_high − V_low, however small, becomes a unit-strength push, so
``eq10`` takes ``"action"`` by default. ``"joint"``: one mean and std over all three types (verl practice; it lets
the action advantages' mean flip switch signs).

Deviations, all documented: β_t = π(SWITCH | s_t, o_{t−1}) is taken from the sampled switch span's probability
(P(span) if SWITCH was sampled, 1 − P(span) if KEEP was), not from a separate forward pass over both words;
response tokens outside the three blocks (whitespace, EOS) and a KEEP turn's copied subgoal get A^low; a step-limit
cut is terminal by default as in the authors' code (``truncation="bootstrap"``: V_high(s_{T−1}) stands for V(s_T)).
Hyperparameters (App. C.1): actor lr 1e-6, critic lr 1e-5, λ_high = λ_low = 0.95, KL 0.01, rollout temperature 1.0,
validation temperature 0.4, mini-batch 256 — the learning rates and batch sizes live in the run config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.trajectory import Trajectory
from learners.advantages import hierarchical_advantages
from learners.algo_config import ActorCriticConfig, check_choice, check_fractions
from learners.algorithm import Algorithm
from learners.batch import TurnBatch
from learners.losses import decision_token_advantages
from learners.targets import (
    CriticInputs,
    Targets,
    ValueSlot,
    bootstrap_value,
    clipped_policy_loss,
    has_kl_term,
    rows_per_trajectory,
    squared_value_loss,
    whiten,
)
from reward.shaping import HIPER_TERMS


@dataclass(frozen=True)
class Config(ActorCriticConfig):
    """HiPER's fields beside the shared ones (``learners.algo_config.ActorCriticConfig``: clip 0.2, KL 0.01, and the
    shaping constants in units of the env's success reward: c_keep 0.03, format_penalty 0.01, ...);
    ``reward_terms`` adds the KEEP terms."""

    reward_terms: tuple[str, ...] = HIPER_TERMS
    truncation: str = "terminal"
    """A step-limit cut is terminal, V(s_T) = 0: the authors' default (``HAEConfig.bootstrap_truncated=False``),
    and the prompts number the steps, so the limit is part of the state. "bootstrap" reads V_high(s_{T−1}), a slot
    regressed only at boundaries while s_{T−1} of a lost episode is nearly always a KEEP turn."""
    keep_copy_adv: str = "low"
    """What a KEEP turn's copied subgoal is trained with: "low" A^low, the advantage of the executor's action on
    that turn (the copy is part of its output, and an invalid turn's unclosed ``<subgoal>`` span, which runs to the
    end of the text, then carries the format penalty); "none" no advantage, the KL term only (which at β = 0.01 held
    nothing: the copies took HiPER's largest update KL, docs/results/learning_fixes.md)."""
    low_bootstrap: str = "lambda"
    """What the low level's last step in a segment bootstraps to: "lambda" (default) the high level's λ-return at
    the next boundary, V_high + A^high (what V_high is regressed on), equal to Eq. 7's in expectation once V_high is
    fitted, which carries the outcome into earlier segments while V_high is cold; "v_high" V_high(s_{b_{k+1}})
    alone (Eq. 7). Replayed at depth 2 from a cold critic, Eq. 7 gave won episodes' first-segment actions the lost
    ones' credit and moved the expert's actions by −0.071 nats first-order, "lambda" by +0.060 (PPO +0.048)
    (docs/results/hierarchy_textcraft_d2.md)."""
    gamma: float = 0.99
    lam_low: float = 0.95
    lam_high: float = 0.95
    switch_adv: str = "return"
    """"return": Ḡ_t − V_sw(s_t, o_{t−1}) (the authors' code); "eq10": (q_t − β_t)(V_high − V_low(s_t, o_{t−1}))
    (the paper's Eq. 10). See the module docstring."""
    switch_norm: str | None = None
    """How ``adv_norm="per_type"`` scales A^switch: "own" (centred, divided by its own std), "action" (divided by
    A^low's std, not centred) or "raw" (neither: in units of R, so a near-zero A^switch stays a near-zero push);
    None: "raw" for ``switch_adv="return"``, "action" for "eq10" (docs/results/hiper_replay_3stage.md)."""
    critic_target: str = "lambda"
    """"lambda": λ-return targets A + V (the authors' code); "td0": the paper's one-step targets (Eq. 11, 13)."""
    normalize_advantages: bool = True
    adv_norm: str = "per_type"
    """"per_type": each advantage type over the turns that carry it (default); "joint": one mean/std over all
    three, which lets the action advantages' mean flip switch-token signs (see the module docstring)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fractions(self, "gamma", "lam_low", "lam_high")
        for name, allowed in (
            ("adv_norm", ADV_NORMS),
            ("switch_adv", SWITCH_ADVS),
            ("switch_norm", (None, *SWITCH_NORMS)),
            ("critic_target", CRITIC_TARGETS),
            ("keep_copy_adv", KEEP_COPY_ADVS),
            ("low_bootstrap", LOW_BOOTSTRAPS),
        ):
            check_choice(name, getattr(self, name), allowed)

    @property
    def resolved_switch_norm(self) -> str:
        """``switch_norm``, or the switch form's own choice when it is None."""
        if self.switch_norm is not None:
            return self.switch_norm
        return "raw" if self.switch_adv == "return" else "action"


ADV_NORMS = ("per_type", "joint")
SWITCH_ADVS = ("return", "eq10")
SWITCH_NORMS = ("own", "action", "raw")
CRITIC_TARGETS = ("lambda", "td0")
KEEP_COPY_ADVS = ("low", "none")
LOW_BOOTSTRAPS = ("v_high", "lambda")


VALUE_SLOTS = (
    ValueSlot("v_high", 0, "prompt_last"),
    ValueSlot("v_low_prev", 1, "prompt_last"),
    ValueSlot("v_low", 1, "subgoal_last"),
    ValueSlot("v_switch", 2, "prompt_last"),
)
V_HIGH, V_LOW_PREV, V_LOW, V_SWITCH = range(4)
"""Column of each slot in ``values`` / ``value_target``."""


def switch_probability(logprobs: np.ndarray, switch_mask: np.ndarray, switched: bool) -> float:
    """β_t from the sampled switch span: P(span) when SWITCH was sampled, else 1 − P(span)."""
    p = float(np.exp(logprobs[switch_mask].sum())) if switch_mask.any() else 0.5
    return p if switched else 1.0 - p


@dataclass
class _TurnAdvantages:
    """Per-row (turn) advantages, critic targets and the rows each applies to, for a whole batch."""

    switch: np.ndarray
    high: np.ndarray
    low: np.ndarray
    boundary: np.ndarray
    decided: np.ndarray
    target: np.ndarray
    valid: np.ndarray
    delta: np.ndarray


def turn_advantages(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray, cfg: Config
) -> _TurnAdvantages:
    """HAE per trajectory (``learners.advantages.hierarchical_advantages``), the configured switch form and the
    critic targets of the four slots, laid out by batch row."""
    n = len(batch)
    out = _TurnAdvantages(
        *(np.zeros(n) for _ in range(3)),
        boundary=np.zeros(n, bool),
        decided=np.zeros(n, bool),
        target=np.zeros((n, len(VALUE_SLOTS)), np.float32),
        valid=np.zeros((n, len(VALUE_SLOTS)), bool),
        delta=np.zeros(n),
    )
    old_lp = batch.old_logprobs.numpy()
    sw_mask = batch.masks.get("switch_mask", torch.zeros_like(batch.response_mask)).numpy()
    for traj, rows in zip(trajectories, rows_per_trajectory(batch, trajectories), strict=True):
        q = traj.switches()
        beta = np.array([switch_probability(old_lp[r], sw_mask[r], bool(q[i])) for i, r in enumerate(rows)])
        v = values[rows].astype(np.float64)
        res = hierarchical_advantages(
            traj.rewards(),
            v[:, V_LOW],
            v[:, V_LOW_PREV],
            v[:, V_HIGH],
            q,
            beta,
            gamma=cfg.gamma,
            lam_low=cfg.lam_low,
            lam_high=cfg.lam_high,
            terminated=traj.terminated,
            bootstrap_value=bootstrap_value(traj, v[-1, V_HIGH], cfg.truncation),
            low_bootstrap=cfg.low_bootstrap,
        )
        boundary = res.boundary.numpy()
        decided = np.arange(len(rows)) > 0  # turn 0 has no switch decision
        keep = decided & ~boundary
        a_low, a_high = res.adv_low.numpy(), res.adv_high.numpy()
        if cfg.switch_adv == "eq10":
            a_switch = res.adv_switch.numpy()
        else:
            a_switch = np.where(decided, res.switch_return.numpy() - v[:, V_SWITCH], 0.0)
        if cfg.critic_target == "lambda":
            y_high, y_low = a_high + v[:, V_HIGH], a_low + v[:, V_LOW]
        else:
            y_high, y_low = res.target_high.numpy(), res.target_low.numpy()
        out.switch[rows], out.high[rows], out.low[rows] = a_switch, a_high, a_low
        out.boundary[rows], out.decided[rows] = boundary, decided
        out.delta[rows] = v[:, V_HIGH] - v[:, V_LOW_PREV]
        for slot, y, ok in (
            (V_HIGH, y_high, boundary),
            (V_LOW_PREV, y_low, keep),  # o_t = o_{t-1} on a KEEP turn: V_low(s_t, o_{t-1}) = V_low(s_t, o_t)
            (V_LOW, y_low, np.ones_like(boundary)),
            (V_SWITCH, res.switch_return.numpy(), decided),
        ):
            out.target[rows, slot] = np.where(ok, y, 0.0)
            out.valid[rows, slot] = ok
    return out


def normalise(a: _TurnAdvantages, cfg: Config) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(switch, high, low) per row after ``adv_norm`` (see the module docstring); rows a type does not apply to
    stay 0."""
    rows = {"switch": a.decided, "high": a.boundary, "low": np.ones_like(a.boundary)}
    raw = {"switch": a.switch, "high": a.high, "low": a.low}
    if not cfg.normalize_advantages:
        return a.switch, a.high, a.low
    if cfg.adv_norm == "joint":
        pooled = np.concatenate([raw[k][rows[k]] for k in raw])
        mean, std = (pooled.mean(), pooled.std()) if pooled.size > 1 else (0.0, 1.0)
        out = {k: np.where(rows[k], (raw[k] - mean) / (std + 1e-8), 0.0) for k in raw}
        return out["switch"], out["high"], out["low"]
    high = whiten(a.high, a.boundary).astype(np.float64)
    low = whiten(a.low, rows["low"]).astype(np.float64)
    if cfg.resolved_switch_norm == "own":
        switch = whiten(a.switch, a.decided).astype(np.float64)
    elif cfg.resolved_switch_norm == "raw":
        switch = np.where(a.decided, a.switch, 0.0)
    else:  # scaled like the actions' advantages, not re-centred: Eq. 10's size stays its confidence
        scale = a.low.std() if a.low.size > 1 else 1.0
        switch = np.where(a.decided, a.switch / (scale + 1e-8), 0.0)
    return switch, high, low


def _rms(x: np.ndarray, rows: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x[rows] ** 2))) if rows.any() else 0.0


def compute_targets(
    trajectories: Sequence[Trajectory], batch: TurnBatch, values: np.ndarray | None, cfg: Config
) -> Targets:
    assert values is not None, "HiPER needs its critic"
    a = turn_advantages(trajectories, batch, values, cfg)
    switch, high, low = normalise(a, cfg)
    resp = batch.response_mask
    m_switch = batch.masks.get("switch_mask", torch.zeros_like(resp)) & resp
    m_sub = batch.masks.get("subgoal_mask", torch.zeros_like(resp)) & resp & ~m_switch
    m_act = resp & ~m_switch & ~m_sub
    token_adv, loss_mask = decision_token_advantages(
        m_switch,
        m_sub,
        m_act,
        torch.from_numpy(switch),
        torch.from_numpy(high),
        torch.from_numpy(low),
        torch.from_numpy(a.boundary),
    )
    # a KEEP turn's copied subgoal is no decision of its own (no A^high); it is trained with the turn's A^low
    # (keep_copy_adv="low") or the KL anchor alone ("none"), and is under the KL anchor like every token
    if cfg.keep_copy_adv == "low":
        m_copy = m_sub & ~torch.from_numpy(a.boundary).unsqueeze(-1)
        token_adv = token_adv + m_copy.to(token_adv.dtype) * torch.from_numpy(low).to(
            token_adv.dtype
        ).unsqueeze(-1)
    loss_mask = loss_mask | m_sub
    d = a.delta[a.decided]
    n = len(batch)
    return Targets(
        token_adv=token_adv.numpy().astype(np.float32),
        loss_mask=loss_mask.numpy(),
        value_target=a.target,
        value_valid=a.valid,
        stats={
            "switch_rate": float(a.boundary[a.decided].mean()) if a.decided.any() else 0.0,
            "delta_mean": float(d.mean()) if d.size else 0.0,
            "delta_sd": float(d.std()) if d.size else 0.0,
            "adv_raw_rms_switch": _rms(a.switch, a.decided),
            "adv_raw_rms_high": _rms(a.high, a.boundary),
            "adv_raw_rms_low": _rms(a.low, np.ones(n, bool)),
        },
    )


def value_loss(values: torch.Tensor, inputs: CriticInputs, cfg: Config):
    """HiPER Eq. 12 + its low-level analogue (App. B Eq. 29): 0.5 · squared error of each valid slot, unclipped."""
    return squared_value_loss(values, inputs)


ALGORITHM = Algorithm(
    name="hiper",
    Config=Config,
    compute_targets=compute_targets,
    policy_loss=clipped_policy_loss,  # per-token clipped surrogate + kl_coef · KL to the reference
    value_slots=VALUE_SLOTS,
    value_loss=value_loss,
    uses_reference=has_kl_term,
)
