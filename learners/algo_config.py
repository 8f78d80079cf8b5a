"""What every algorithm's ``Config`` shares, and the checks each one runs on its own fields (pure).

Each ``learners/algos/<name>.py`` declares a frozen ``Config`` that inherits ``RLConfig`` (reward terms, shaping
constants, the loss aggregation) or ``PolicyLossConfig`` (those plus the PPO clip and the KL term) and checks its own
fields in ``__post_init__`` with ``check`` / ``check_choice``. A bad value fails as the Config is built, in one line
naming the ``algo.<key>`` and what is allowed, before Ray starts (``launch.config`` turns the error into its
one-line exit); no table elsewhere knows the algorithms' fields.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from learners.advantages import GroupMode, Truncation
from learners.losses import AGG_MODES, KL_KINDS
from learners.outcomes import NO_OUTCOME_BATCH
from reward.shaping import TERMS, ShapingConstants

UNIT = "a number in [0, 1]"
NON_NEGATIVE = "a number >= 0"
POSITIVE = "a number > 0"
AT_LEAST_ONE = "an integer >= 1"


def check(key: str, ok: bool, value: Any, allowed: str) -> None:
    """``algo.<key>: got <value>; allowed: <allowed>`` unless ``ok``."""
    if not ok:
        raise ValueError(f"algo.{key}: got {value!r}; allowed: {allowed}")


def check_choice(key: str, value: Any, allowed: Iterable[Any]) -> None:
    """``algo.<key>: unknown value <value> (did you mean ...?); allowed: ...`` unless ``value`` is allowed."""
    allowed = list(allowed)
    if value not in allowed:
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"algo.{key}: unknown value {value!r}{hint}; allowed: {', '.join(map(str, allowed))}"
        )


def check_fractions(cfg: Any, *names: str) -> None:
    """Each named field of ``cfg`` (a discount, a λ, a share) lies in [0, 1]."""
    for name in names:
        value = getattr(cfg, name)
        check(name, 0 <= value <= 1, value, UNIT)


def check_group_fields(cfg: Any) -> None:
    """GiGPO's step term: ``gamma`` in [0, 1], ``step_weight`` and ``eps`` >= 0, ``mode`` a group normaliser."""
    check_fractions(cfg, "gamma")
    check("step_weight", cfg.step_weight >= 0, cfg.step_weight, NON_NEGATIVE)
    check("eps", cfg.eps >= 0, cfg.eps, NON_NEGATIVE)
    check_choice("mode", cfg.mode, typing.get_args(GroupMode))


@dataclass(frozen=True)
class RLConfig:
    """The fields of every algorithm: ``reward_terms`` (which shaping terms, ``reward.shaping.TERMS``),
    ``shaping`` (their constants, ``algo.shaping.<name>``), ``agg`` (how the loss aggregates tokens)."""

    reward_terms: tuple[str, ...] = ("format",)
    shaping: ShapingConstants = field(default_factory=ShapingConstants)
    """The shaping constants (``algo.shaping.<name>``), in units of the env's success reward; the papers'
    defaults."""
    agg: str = "token-mean"
    no_outcome_batch: str = "train"
    """What the policy does with a batch whose episodes all ended the same way (``learners.outcomes``): "train" a
    step anyway (behaviour cloning; the offline methods; HIPIF's and HISR's process rewards tell lost episodes
    apart); "skip" no policy step, the critic still trains (``PolicyLossConfig``'s default: the outcome is the
    signal, and whitened shaping residue is not)."""

    def __post_init__(self) -> None:
        check_choice("no_outcome_batch", self.no_outcome_batch, NO_OUTCOME_BATCH)
        for term in self.reward_terms:
            check_choice("reward_terms", term, sorted(TERMS))
        if len(set(self.reward_terms)) != len(self.reward_terms):
            raise ValueError(
                f"algo.reward_terms: {', '.join(self.reward_terms)} names a term twice; allowed: each term once"
            )
        check_choice("agg", self.agg, AGG_MODES)


@dataclass(frozen=True)
class PolicyLossConfig(RLConfig):
    """``RLConfig`` plus the clipped surrogate's range and the KL term (``learners.targets.clipped_policy_loss``):
    the defaults are HiPER App. C.1's, which every paper here shares (clip 0.2, KL 0.01, low-variance estimator)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.01
    """HiPER App. C.1: KL loss coefficient 0.01 for every method."""
    kl_kind: str = "low_var_kl"
    no_outcome_batch: str = "skip"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("clip_low", "clip_high", "kl_coef"):
            check(name, getattr(self, name) >= 0, getattr(self, name), NON_NEGATIVE)
        check_choice("kl_kind", self.kl_kind, KL_KINDS)


@dataclass(frozen=True)
class CriticFields:
    """What a step-limit cut's last state is worth to a critic; mixed in first (its ``__post_init__`` runs the
    config's own) by every config with a critic, on-policy (``ActorCriticConfig``) or offline (``OfflineRLConfig``)."""

    truncation: str = "bootstrap"
    """bootstrap: V(s_T) ≈ V(s_{T−1}) after a step-limit cut (``learners.targets.bootstrap_value``; offline, a cut
    transition's V(s') ≈ V(s), ``learners.transitions``); terminal: V(s_T) = 0, as after a real end
    (``learners.advantages.Truncation``)."""

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]  # the RLConfig it is mixed into
        check_choice("truncation", self.truncation, typing.get_args(Truncation))


@dataclass(frozen=True)
class ActorCriticConfig(CriticFields, PolicyLossConfig):
    """``PolicyLossConfig`` plus a critic (PPO, HISR, HiPER)."""


EXPECTILE_DIRECTIONS = ("iql", "authors")
ACTOR_LOSSES = ("awr", "advantage")
ADVANTAGE_QS = ("online", "target")
ADV_NORMS = ("none", "whiten")


def value_expectile(tau: float, direction: str) -> float:
    """The expectile V regresses to: ``iql`` τ (IQL Eq. 5 as STEP-HRL Eq. 12 and Multi2 Eq. 5 write it), ``authors``
    1 − τ (STEP-HRL's and Multi2's public code weigh V − Q_target > 0 by τ, i.e. IQL at 1 − τ)."""
    return tau if direction == "iql" else 1.0 - tau


@dataclass(frozen=True)
class OfflineRLConfig(CriticFields, RLConfig):
    """The IQL-style offline methods' fields (STEP-HRL, Multi2): a critic with a soft-updated target copy, an
    expectile value, advantage-weighted regression, and the offline data (``launch.driver.offline_data``). Each method sets its
    paper's values."""

    reward_terms: tuple[str, ...] = ()
    agg: str = "seq-mean-token-sum"
    """log π(a|s) = Σ_l log π(a_l | s, a_<l) (STEP-HRL Eq. 10, Multi2 Eq. 6), mean over transitions."""
    gamma: float = 0.99
    beta: float = 1.0
    """AWR temperature: w(A) = exp(A / β)."""
    expectile: float = 0.95
    """τ of the expectile regression of V."""
    expectile_direction: str = "iql"
    """iql: V tracks the upper τ expectile of Q_target, as the papers write it; authors: the authors' code's
    weights, IQL at 1 − τ (``value_expectile``)."""
    target_tau: float = 0.2
    """Polyak rate of the target critic, after every critic step."""
    warmup_steps: int = 0
    """Critic-only optimizer steps before the actor joins, rounded up to whole passes."""
    max_weight: float = 100.0
    advantage_q: str = "online"
    """Which Q the advantage reads: online, A = Q(s, u) − V(s) (STEP-HRL Eq. 13, Multi2's A = Q − V, both authors'
    code); target, A = Q_target(s, u) − V(s), IQL's form (the soft-updated copy V was fitted to). On Multi2's
    synthetic preset both make the same update (docs/results/multi2_replay.md)."""
    adv_norm: str = "none"
    """none: A as the critic gives it (the papers); whiten: (A − mean) / sd over the iteration's transitions of each
    role (Multi2: the executor's data rows and its policy-anchored rows apart) before the weight, so that AWR ranks a
    role's actions against each other instead of reading the offset between the critic's Q and V heads, which moved
    every A to one sign on Multi2's synthetic preset (docs/results/multi2_replay.md). Not in either paper."""
    actor_loss: str = "awr"
    """awr: w(A) = min(exp(A/β), max_weight); advantage: w = A (the authors' code)."""
    data_ratio: float = 2.0
    """Collected BC-policy trajectories per expert trajectory in the offline data (``launch.driver.offline_data``)."""
    collect_temperature: float = 0.7
    """Sampling temperature of the BC-policy collection."""
    offline_iterations: int = 0
    """Iterations on the stored data alone before the online collection (``online_groups``) starts."""
    online_groups: int = 0
    """> 0: every iteration after ``offline_iterations`` also collects this many groups (``rollout.group_size``
    each) with the current policy and appends them to the buffer (online fine-tuning); 0: offline only."""
    env_reward_scale: float = 1.0
    """Multiplies the env reward in the transitions (ScienceWorld reports increments of a 0-100 score where the
    papers read 0-1: its presets set 0.01)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fractions(self, "gamma")
        check_choice("expectile_direction", self.expectile_direction, EXPECTILE_DIRECTIONS)
        check_choice("actor_loss", self.actor_loss, ACTOR_LOSSES)
        check_choice("advantage_q", self.advantage_q, ADVANTAGE_QS)
        check_choice("adv_norm", self.adv_norm, ADV_NORMS)
        for name, ok, allowed in (
            ("beta", self.beta > 0, POSITIVE),
            ("expectile", 0 < self.expectile < 1, "a number in (0, 1)"),
            ("target_tau", 0 < self.target_tau <= 1, "a number in (0, 1]"),
            ("warmup_steps", self.warmup_steps >= 0, "an integer >= 0"),
            ("max_weight", self.max_weight > 0, POSITIVE),
            ("data_ratio", self.data_ratio >= 0, NON_NEGATIVE),
            ("collect_temperature", self.collect_temperature >= 0, NON_NEGATIVE),
            ("offline_iterations", self.offline_iterations >= 0, "an integer >= 0"),
            ("online_groups", self.online_groups >= 0, "an integer >= 0 (0: offline only)"),
            ("env_reward_scale", self.env_reward_scale > 0, POSITIVE),
        ):
            check(name, ok, getattr(self, name), allowed)

    def online(self, it: int) -> bool:
        """Whether iteration ``it`` belongs to the online phase (collects and, with a KL term, has a reference)."""
        return self.online_groups > 0 and it > self.offline_iterations

    def warmup_left(self, critic_steps: int) -> int:
        """Critic-only steps still owed once ``critic_steps`` optimizer steps were taken."""
        return max(0, self.warmup_steps - critic_steps)
