"""HIPIF's rule-based subgoal-oriented process rewards (HIPIF Sec. 3.3, Eq. 7; App. B "Reward Design").

    r^proc_t = r^gr_t + r^term_t + r^exec_t + r^fmt_t                                   (Eq. 7)

* r^gr  (``ungrounded_subgoal_penalty``): −0.1 on a subgoal step whose subgoal names no object or location that
  string-matches an entity of the available environment context;
* r^term (``subgoal_failure_penalty``): successful trajectories only, −0.1 on the step that proposed a subgoal whose
  final observation shows an execution failure ("Nothing happens", "No known action matches that input");
* r^exec (``repeat_penalty``): −0.1 when the same action–observation pair appears for the third time within the
  span of one subgoal;
* r^fmt is ``reward.format.format_penalty``.

Rules only, no learned judge: the paper chose them "to avoid extra computational overhead and reduce the risk of
reward hacking" and penalises "only steps clearly identified as erroneous from environment feedback".

Subgoal spans are HiPER-style segments: a span starts at every turn with q_t = 1 (``Trajectory.switches()``, turn 0
included) and runs to the turn before the next one; so a HIPIF parser marks the turn that proposes a new subgoal
(z_t = completed, plus its first action) with ``decision.switch = True``.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from actors.trajectory import Trajectory
from reward.grounding import (
    FAILURE_PATTERNS,
    action_failed,
    admissible_per_turn,
    is_acting,
    next_observation,
    normalize_text,
)

# Words that never name an object or location: function words, the verbs and state adjectives of the household /
# science / shopping action languages, and planning vocabulary. Everything else in a text is a candidate entity.
_NON_ENTITY_TEXT = """
a an the this that these those it its itself them they their there here some any all each every both other
another one two three first second third next then now again also still just only more most less very too and or
but nor not no so if than as of in on at to into onto from with without by for about over under up down out off
inside outside near behind between around through until while when where which what who whom whose how i me my
we our you your he she his her him is are was were be been being am do does did done doing have has had can
could should would will shall may might must need needs let lets make sure try trying see seeing saw seen arrive
arrived happen happens happened quickly middle loc go goes going went walk run move moving moved take taking
took taken pick picking picked put putting place placing placed get getting got grab grabbing bring bringing
return returning carry carrying drop dropping find finding found locate locating search searching look looking
examine examining check checking inspect explore exploring visit visiting open opening opened close closing
closed use using used toggle toggling turn turning switch switched heat heating heated cool cooling cooled clean
cleaning cleaned wash washing washed slice slicing sliced cut cutting chop chopping warm warmed hot cold dirty
activate activating deactivate connect disconnect focus wait read mix mixing pour pouring fill filling empty eat
drink buy buying click clicking select selecting choose choosing purchase add adding remove removing sit stand
lie plug unplug push pull wipe type task subgoal goal step steps action actions object objects item items thing
things location locations place somewhere anything something nothing everything way current new
"""
NON_ENTITY_WORDS: frozenset[str] = frozenset(_NON_ENTITY_TEXT.split())

_WORD = re.compile(r"[a-z]+")


def _singular(word: str) -> str:
    """Crude English singular so that "apples"/"apple" and "boxes"/"box" match; applied to both sides of a match."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith(("ches", "shes", "sses", "xes", "oes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@functools.lru_cache(maxsize=8192)
def entity_words(text: str) -> frozenset[str]:
    """Candidate object/location names of ``text``: its lower-case words minus ``NON_ENTITY_WORDS``, singularised.

    Entity ids ("cabinet 1") lose their number, so a subgoal naming "the cabinets" matches "cabinet 1". Cached:
    observations and admissible actions recur across the turns and trajectories of a batch."""
    out: set[str] = set()
    for word in _WORD.findall(text.lower()):
        single = _singular(word)
        if len(single) > 1 and word not in NON_ENTITY_WORDS and single not in NON_ENTITY_WORDS:
            out.add(single)
    return frozenset(out)


def subgoal_spans(traj: Trajectory) -> list[tuple[int, int]]:
    """[(b_k, b_{k+1})]: half-open turn ranges of the subgoals, cut where ``traj.switches()`` is True."""
    if not traj.turns:
        return []
    starts = np.flatnonzero(traj.switches()).tolist()  # starts[0] == 0: turn 0 is always a boundary
    return list(zip(starts, [*starts[1:], len(traj.turns)], strict=True))


def ungrounded_subgoal_penalty(traj: Trajectory, penalty: float, include_task: bool = True) -> np.ndarray:
    """float64[T]: r^gr_t = −penalty on each subgoal step (q_t = 1 with a non-empty subgoal) whose subgoal contains no
    grounded object or location (HIPIF App. B): none of its ``entity_words`` string-matches an entity word of the
    environment context available at that step, namely the task instruction (``include_task``), every observation
    seen so far (turns 0..t, what HIPIF's folded and local histories of Eq. 2 draw on) and the admissible actions of
    the step's state. A missing subgoal is left to the format penalty."""
    out = np.zeros(len(traj.turns), dtype=np.float64)
    seen: set[str] = set(entity_words(traj.task)) if include_task else set()
    q = traj.switches()
    for t, (turn, admissible) in enumerate(zip(traj.turns, admissible_per_turn(traj), strict=True)):
        seen |= entity_words(turn.observation)
        subgoal = turn.decision.subgoal or ""
        if q[t] and subgoal.strip():
            context = seen.union(*(entity_words(a) for a in admissible or ()))
            if entity_words(subgoal).isdisjoint(context):
                out[t] = -penalty
    return out


def subgoal_failure_penalty(
    traj: Trajectory, penalty: float, patterns: Sequence[str] = FAILURE_PATTERNS
) -> np.ndarray:
    """float64[T]: r^term_t, only for successful trajectories (``traj.won``): −penalty on the step that proposed a
    subgoal whose final observation shows execution failure (HIPIF App. B).

    The final observation of a subgoal is the environment's answer to the last action inside its span (the subgoal
    ends at a switch or at the end of the episode); failure means ``info["valid_action"] is False`` or a failure
    pattern in that answer (``reward.grounding.action_failed``). Spans without any action are skipped."""
    out = np.zeros(len(traj.turns), dtype=np.float64)
    if not traj.won:
        return out
    acting = is_acting(traj)
    for start, end in subgoal_spans(traj):
        acted = np.flatnonzero(acting[start:end])
        if acted.size and action_failed(traj, start + int(acted[-1]), patterns):
            out[start] = -penalty
    return out


def repeat_penalty(traj: Trajectory, penalty: float, threshold: int = 3) -> np.ndarray:
    """float64[T]: r^exec_t = −penalty on every turn whose (action, resulting observation) pair has now occurred
    ``threshold`` or more times within the current subgoal span (HIPIF App. B: penalise the third occurrence; App. D
    found penalising the second occurrence less stable). Counts restart at every subgoal switch, "since the same
    action may still be valid in different task stages"; pairs are compared after ``normalize_text``."""
    out = np.zeros(len(traj.turns), dtype=np.float64)
    acting = is_acting(traj)
    for start, end in subgoal_spans(traj):
        seen: Counter[tuple[str, str]] = Counter()
        for t in range(start, end):
            if not acting[t]:
                continue
            pair = (normalize_text(traj.turns[t].decision.action), normalize_text(next_observation(traj, t)))
            seen[pair] += 1
            if seen[pair] >= threshold:
                out[t] = -penalty
    return out
