"""Typed records that cross actor boundaries: turns, trajectories, groups.

One schema serves every method (PPO/GRPO/RLOO/GiGPO baselines, HiPER, HIPIF, STEP-HRL, HISR, Multi2):

* a ``Turn`` is one model call plus (for acting roles) one environment step;
* a ``Trajectory`` is one episode: its turns in order, how it ended, and its task;
* a ``TrajectoryGroup`` is G episodes from the same task and initial state (GRPO/RLOO/GiGPO groups).

Shapes (per turn, ``P`` = prompt tokens, ``R`` = response tokens)::

    prompt_ids   int64[P]
    response_ids int64[R]
    logprobs     float32[R]     sampling log-probabilities reported by the inference engine
    masks[name]  bool[R]        True on the response tokens inside tag ``name`` (tag text included)

Mask names are what they cover: ``switch_mask``, ``subgoal_mask``, ``action_mask``, ``reflection_mask``,
``progress_mask``, ``think_mask`` ... (``MASK_NAMES``).  ``terminated`` (the MDP ended: success or failure state)
and ``truncated`` (cut by a step limit or a failure of the machinery) are kept apart, because a truncated episode
bootstraps its value and a terminated one does not.

Two wire forms: a compact dict of flat numpy arrays for the Ray object store (zero-copy, see ``to_numpy_dict``)
and JSON lines for disk (``to_jsonl`` / ``read_jsonl``).  Both round-trip exactly.

This module is pure: it imports no ray, vllm or deepspeed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

MASK_NAMES: tuple[str, ...] = (
    "think_mask",
    "switch_mask",
    "subgoal_mask",
    "action_mask",
    "reflection_mask",
    "progress_mask",
    "completion_mask",
)
"""Known mask names; others are allowed (``masks`` is an open dict) but these are the ones parsers emit."""

EpisodeStatus = Literal["running", "finished", "truncated", "failed"]


@dataclass
class Decision:
    """What the parser read from one model response.

    ``switch`` is HiPER's q_t (True = SWITCH, False = KEEP, None = the protocol has no switch);
    ``subgoal`` is the subgoal in force after this turn (o_t); ``action`` the environment command sent (after any
    fallback for a malformed output); ``valid`` False when the output broke the format (format penalty applies).
    ``extra`` holds protocol-specific fields (reflection text, completion flag, progress text, ...).
    """

    action: str = ""
    valid: bool = True
    switch: bool | None = None
    subgoal: str | None = None
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One model call (and, for acting roles, the environment step its action caused).

    Fields the learner reads: ``prompt_ids`` int64[P], ``response_ids`` int64[R], ``logprobs`` float32[R],
    ``masks`` {name: bool[R]}, ``env_reward`` (the benchmark's reward for this step), ``shaped`` (each shaping
    component separately, e.g. ``{"format": -0.1, "keep": -0.3}``), ``terminated`` / ``truncated`` (set on the last
    turn of the episode), ``switch`` / ``segment_index`` (HiPER boundaries), ``anchor_key`` (GiGPO's anchor-state
    key: the observation the decision was made from, normalised), ``policy_version`` and ``adapter`` (which weights
    generated it), ``role`` (``"agent"`` for single-call protocols; ``"high"``/``"low"``/``"progress"`` for STEP-HRL,
    ``"planner"``/``"executor"`` for Multi2).
    """

    prompt_ids: np.ndarray
    response_ids: np.ndarray
    logprobs: np.ndarray
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    decision: Decision = field(default_factory=Decision)
    observation: str = ""
    response_text: str = ""
    env_reward: float = 0.0
    shaped: dict[str, float] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    policy_version: int = 0
    adapter: str = ""
    role: str = "agent"
    anchor_key: str = ""
    segment_index: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prompt_ids = np.asarray(self.prompt_ids, dtype=np.int64).reshape(-1)
        self.response_ids = np.asarray(self.response_ids, dtype=np.int64).reshape(-1)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float32).reshape(-1)
        if self.logprobs.shape != self.response_ids.shape:
            raise ValueError(
                f"logprobs has {self.logprobs.size} entries for {self.response_ids.size} response tokens"
            )
        self.masks = {k: np.asarray(v, dtype=bool).reshape(-1) for k, v in self.masks.items()}
        for name, m in self.masks.items():
            if m.shape != self.response_ids.shape:
                raise ValueError(f"{name} has {m.size} entries for {self.response_ids.size} response tokens")

    @property
    def reward(self) -> float:
        """Environment reward plus every shaping component: the scalar r_t the advantage estimators see."""
        return float(self.env_reward + sum(self.shaped.values()))

    @property
    def switch(self) -> bool | None:
        return self.decision.switch


@dataclass
class Trajectory:
    """One episode. ``status`` says how it ended: ``finished`` (terminated), ``truncated`` (step limit), or
    ``failed`` (the environment crashed or hung; ``failure`` holds the reason and the group must be retried)."""

    traj_id: str
    group_id: str
    task_id: str
    env_name: str
    turns: list[Turn] = field(default_factory=list)
    task: str = ""
    status: EpisodeStatus = "running"
    failure: str = ""
    won: bool = False
    score: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def terminated(self) -> bool:
        return bool(self.turns) and self.turns[-1].terminated

    @property
    def truncated(self) -> bool:
        return bool(self.turns) and self.turns[-1].truncated

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    def rewards(self) -> np.ndarray:
        """float64[T]: r_t of every turn (env reward + shaping)."""
        return np.array([t.reward for t in self.turns], dtype=np.float64)

    def switches(self) -> np.ndarray:
        """bool[T]: q_t, with turn 0 always a boundary (HiPER Sec. 4.2)."""
        q = np.array([bool(t.decision.switch) for t in self.turns], dtype=bool)
        if q.size:
            q[0] = True
        return q


@dataclass
class TrajectoryGroup:
    """G trajectories that started from the same task and initial state."""

    group_id: str
    task_id: str
    trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(t.status == "failed" for t in self.trajectories)


# ---------------------------------------------------------------------------------------------------------------
# JSON lines (disk)
# ---------------------------------------------------------------------------------------------------------------


def _turn_to_json(t: Turn) -> dict[str, Any]:
    d = dataclasses.asdict(t)
    d["prompt_ids"] = t.prompt_ids.tolist()
    d["response_ids"] = t.response_ids.tolist()
    d["logprobs"] = t.logprobs.tolist()
    d["masks"] = {k: v.tolist() for k, v in t.masks.items()}
    return d


def _turn_from_json(d: dict[str, Any]) -> Turn:
    d = dict(d)
    d["decision"] = Decision(**d["decision"])
    return Turn(**d)


def trajectory_to_json(traj: Trajectory) -> dict[str, Any]:
    d = {f.name: getattr(traj, f.name) for f in dataclasses.fields(traj) if f.name != "turns"}
    d["turns"] = [_turn_to_json(t) for t in traj.turns]
    return d


def trajectory_from_json(d: dict[str, Any]) -> Trajectory:
    d = dict(d)
    d["turns"] = [_turn_from_json(t) for t in d["turns"]]
    return Trajectory(**d)


def to_jsonl(trajectories: Iterable[Trajectory], path: str | Path, *, append: bool = False) -> None:
    """Write one JSON object per trajectory (the documented on-disk schema: the dataclass fields by name)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for traj in trajectories:
            f.write(json.dumps(trajectory_to_json(traj), ensure_ascii=False) + "\n")


def read_jsonl(path: str | Path) -> Iterator[Trajectory]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield trajectory_from_json(json.loads(line))


# ---------------------------------------------------------------------------------------------------------------
# Compact numpy dict (Ray object store)
# ---------------------------------------------------------------------------------------------------------------

_TURN_ARRAYS = ("prompt_ids", "response_ids", "logprobs")
_TURN_SCALARS: dict[str, Any] = {
    "env_reward": np.float64,
    "terminated": bool,
    "truncated": bool,
    "policy_version": np.int64,
    "segment_index": np.int64,
}


def to_numpy_dict(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """Pack trajectories into flat numpy arrays plus one small JSON string for the text fields.

    Token arrays of all turns are concatenated (``tok.<name>``) with int64 offsets (``off.<name>``, length
    n_turns+1); masks likewise, one array per mask name with a presence flag per turn; per-turn scalars are arrays of
    length n_turns; ``turns_per_traj`` int64[n_traj] cuts turns into trajectories. Ray ships numpy arrays zero-copy,
    which is why this beats pickling the dataclasses (docs/platform.md: 128 MiB in 158 ms vs 1.08 s as torch tensors).
    """
    turns = [t for traj in trajectories for t in traj.turns]
    out: dict[str, Any] = {"turns_per_traj": np.array([len(tr.turns) for tr in trajectories], dtype=np.int64)}
    for name in _TURN_ARRAYS:
        arrs = [getattr(t, name) for t in turns]
        out[f"off.{name}"] = np.cumsum([0, *[a.size for a in arrs]], dtype=np.int64)
        dtype = np.float32 if name == "logprobs" else np.int64
        out[f"tok.{name}"] = np.concatenate(arrs).astype(dtype) if arrs else np.zeros(0, dtype)
    mask_names = sorted({k for t in turns for k in t.masks})
    for name in mask_names:
        out[f"mask.{name}"] = np.concatenate(
            [t.masks.get(name, np.zeros(t.response_ids.size, bool)) for t in turns]
        ).astype(bool)
        out[f"has.{name}"] = np.array([name in t.masks for t in turns], dtype=bool)
    for name, dtype in _TURN_SCALARS.items():
        out[f"turn.{name}"] = np.array([getattr(t, name) for t in turns], dtype=dtype)
    meta_turns = [
        {
            "decision": dataclasses.asdict(t.decision),
            "observation": t.observation,
            "response_text": t.response_text,
            "shaped": t.shaped,
            "adapter": t.adapter,
            "role": t.role,
            "anchor_key": t.anchor_key,
            "info": t.info,
        }
        for t in turns
    ]
    meta_trajs = [
        {f.name: getattr(tr, f.name) for f in dataclasses.fields(tr) if f.name != "turns"}
        for tr in trajectories
    ]
    out["meta"] = json.dumps({"turns": meta_turns, "trajectories": meta_trajs}, ensure_ascii=False)
    return out


def from_numpy_dict(d: dict[str, Any]) -> list[Trajectory]:
    """Inverse of ``to_numpy_dict``."""
    meta = json.loads(d["meta"])
    n_turns = len(meta["turns"])
    mask_names = [k[len("mask.") :] for k in d if k.startswith("mask.")]
    turns: list[Turn] = []
    for i in range(n_turns):
        arrays = {}
        for name in _TURN_ARRAYS:
            off = d[f"off.{name}"]
            arrays[name] = np.array(d[f"tok.{name}"][off[i] : off[i + 1]])
        r0, r1 = d["off.response_ids"][i], d["off.response_ids"][i + 1]
        masks = {m: np.array(d[f"mask.{m}"][r0:r1]) for m in mask_names if d[f"has.{m}"][i]}
        scalars = {name: d[f"turn.{name}"][i].item() for name in _TURN_SCALARS}
        tm = dict(meta["turns"][i])
        tm["decision"] = Decision(**tm["decision"])
        turns.append(Turn(**arrays, masks=masks, **scalars, **tm))
    trajs: list[Trajectory] = []
    start = 0
    for n, tm in zip(d["turns_per_traj"].tolist(), meta["trajectories"], strict=True):
        trajs.append(Trajectory(turns=turns[start : start + n], **tm))
        start += n
    return trajs
