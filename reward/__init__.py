"""Pure reward shaping: one concern per module, each term a function ``Trajectory -> float64[T]``.

* ``reward.format``     format penalty (HiPER App. C, HIPIF App. B)
* ``reward.keep``       HiPER KEEP penalty c_KEEP and the KEEP-consistency penalty
* ``reward.grounding``  what the environment said about each action: invalid-action penalty, HISR action grounding
* ``reward.process``    HIPIF rule-based subgoal process rewards (grounding, terminal failure, repetition)
* ``reward.shaping``    ``ShapingConstants``, ``ShapingConfig`` and ``apply_shaping``: the configured terms into
  ``Turn.shaped``

What the terms read from a ``Turn`` (the rollout must fill these):

* ``decision`` - ``valid`` (format), ``switch`` (q_t), ``subgoal``, ``action`` (the command actually sent; empty for
  turns that did not step the environment), ``extra["keep_changed_subgoal"]`` (optional parser verdict);
* ``observation`` - the raw environment observation the decision was made from;
* ``info`` - the environment's step info for this turn's action (``envs.base.INFO_KEYS``) plus:

  - ``info["valid_action"]`` (bool): False when the environment did not understand the action;
  - ``info["next_observation"]`` (str): the observation returned by the step (else the next turn's
    ``observation`` is used, and for the last turn the answer counts as unknown);
  - ``info["admissible_actions"]`` (list[str] | None): as returned by the step, i.e. for the *next* state; the list
    for the first state comes from ``Trajectory.info["admissible_actions"]`` (the reset info).

``Trajectory.task`` (instruction text) and ``Trajectory.won`` are read by the HIPIF rules.

Stdlib + numpy only: no torch, ray, vllm or deepspeed.
"""

from reward.format import format_penalty
from reward.grounding import (
    FAILURE_PATTERNS,
    action_executable,
    action_grounding_reward,
    invalid_action_penalty,
)
from reward.keep import keep_changed_subgoal, keep_consistency_penalty, keep_penalty
from reward.process import repeat_penalty, subgoal_failure_penalty, ungrounded_subgoal_penalty
from reward.shaping import (
    HIPER_TERMS,
    HIPIF_TERMS,
    HISR_TERMS,
    TERMS,
    ShapingConfig,
    ShapingConstants,
    apply_shaping,
    shaping_components,
)

__all__ = [
    "FAILURE_PATTERNS",
    "HIPER_TERMS",
    "HIPIF_TERMS",
    "HISR_TERMS",
    "TERMS",
    "ShapingConfig",
    "ShapingConstants",
    "action_executable",
    "action_grounding_reward",
    "apply_shaping",
    "format_penalty",
    "invalid_action_penalty",
    "keep_changed_subgoal",
    "keep_consistency_penalty",
    "keep_penalty",
    "repeat_penalty",
    "shaping_components",
    "subgoal_failure_penalty",
    "ungrounded_subgoal_penalty",
]
