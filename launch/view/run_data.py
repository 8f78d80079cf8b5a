"""What ``hierarl view`` shows, read from a run folder and nothing else: the metrics rows (``metrics.jsonl``), the
episodes the run kept (``episodes/iter_<k>.jsonl``, ``keep_episodes``: with each token's advantage; else
``trajectories/iter_<k>.jsonl``, ``save_trajectories``) and the evaluations' per-task rates. Pure: no Ray, no model,
no env; a folder from older code or a cut run reads as far as it goes, and what is missing is said in ``notes``."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAGS = ("think", "switch", "subgoal", "action", "reflection", "progress", "completion")
"""The response tags a span is coloured by (the agent protocols' blocks; anything else is "other")."""
_TAG = re.compile(r"<(" + "|".join(TAGS) + r")>(.*?)(?:</\1>|$)", re.S)
_ITER = re.compile(r"^(?:eval_)?iter_(-?\d+)(?:\.\w+)?\.jsonl$")


class ViewError(ValueError):
    """A run folder the viewer cannot read at all (its message is the one line the command prints)."""


@dataclass(frozen=True)
class Span:
    """A piece of a response: its text and the block it belongs to (a tag of ``TAGS`` or ``other``)."""

    text: str
    kind: str


@dataclass(frozen=True)
class TokenView:
    """One response token as the update trained on it: its text, group (switch, subgoal, subgoal_keep, action,
    other, ...), advantage, and whether the loss covered it."""

    piece: str
    group: str
    adv: float
    in_loss: bool


@dataclass(frozen=True)
class TurnView:
    observation: str
    spans: tuple[Span, ...]
    switch: bool | None
    subgoal: str | None
    action: str
    valid: bool
    error: str
    env_reward: float
    shaped: dict[str, float]
    segment: int
    tokens: tuple[TokenView, ...] = ()
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeView:
    iteration: int
    task_id: str
    won: bool
    status: str
    turns: tuple[TurnView, ...]
    source: str = "train"
    """"train" (an RL iteration's sample) or the evaluation panel the episode was played on."""

    @property
    def episode_return(self) -> float:
        return sum(t.env_reward + sum(t.shaped.values()) for t in self.turns)


@dataclass(frozen=True)
class PanelGrid:
    """One evaluation panel before RL and at the last evaluation: each task's success rate over its samples."""

    label: str
    panel: str
    task_ids: tuple[str, ...]
    before: tuple[float, ...]
    after: tuple[float, ...]
    samples: int

    def change(self, i: int) -> str:
        d = self.after[i] - self.before[i]
        return "same" if abs(d) < 1e-9 else ("gained" if d > 0 else "lost")


@dataclass
class RunView:
    name: str
    history: list[dict[str, Any]]
    episodes: list[EpisodeView] = field(default_factory=list)
    grids: list[PanelGrid] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def spans(text: str) -> tuple[Span, ...]:
    """``text`` cut into tagged blocks (tag text included, as the learner's masks cover it) and the rest; an
    unclosed tag runs to the end of the text, as the parsers read it."""
    out, at = [], 0
    for m in _TAG.finditer(text):
        if m.start() > at:
            out.append(Span(text[at : m.start()], "other"))
        out.append(Span(m.group(0), m.group(1)))
        at = m.end()
    if at < len(text):
        out.append(Span(text[at:], "other"))
    return tuple(out)


def _tokens(d: dict[str, Any]) -> tuple[TokenView, ...]:
    """A kept turn's tokens (``launch.driver.kept_episodes``); none for a turn the update did not read."""
    pieces, groups, adv, loss = (d.get(k) or [] for k in ("pieces", "groups", "token_adv", "in_loss"))
    if not (len(pieces) == len(groups) == len(adv) == len(loss)):
        return ()
    return tuple(
        TokenView(str(p), str(g), float(a), bool(m))
        for p, g, a, m in zip(pieces, groups, adv, loss, strict=True)
    )


def _turn(d: dict[str, Any]) -> TurnView:
    dec = d.get("decision") or {}
    return TurnView(
        observation=str(d.get("observation", "")),
        spans=spans(str(d.get("response_text", ""))),
        switch=dec.get("switch"),
        subgoal=dec.get("subgoal"),
        action=str(dec.get("action", "")),
        valid=bool(dec.get("valid", True)),
        error=str(dec.get("error", "")),
        env_reward=float(d.get("env_reward", 0.0)),
        shaped={k: float(v) for k, v in (d.get("shaped") or {}).items()},
        segment=int(d.get("segment_index", 0)),
        tokens=_tokens(d),
        values={k: float(v) for k, v in (d.get("values") or {}).items()},
    )


def read_episodes(path: Path, iteration: int, limit: int) -> tuple[list[EpisodeView], str | None]:
    """The first ``limit`` episodes of one iteration's file; a line that does not parse (a cut write) ends the read
    with a note instead of an error."""
    out: list[EpisodeView] = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append(
                    EpisodeView(
                        iteration=iteration,
                        task_id=str(d.get("task_id", "")),
                        won=bool(d.get("won", False)),
                        status=str(d.get("status", "")),
                        turns=tuple(_turn(t) for t in d.get("turns", [])),
                        source=str(d.get("source", "train")),
                    )
                )
            except (json.JSONDecodeError, TypeError, ValueError, AttributeError) as e:
                return out, f"{path.name}: line {n} unreadable ({type(e).__name__}); read up to there"
    return out, None


PANELS = (("eval_", "held-out panel"), ("train_eval_", "RL tasks"))
"""The evaluations a grid is drawn for: (metric prefix, what its tasks are)."""


def _grid_between(
    start: dict[str, Any], end: dict[str, Any], prefix: str, label: str, names: tuple[str, str]
) -> PanelGrid | None:
    """``start``'s and ``end``'s per-task rates on one panel (None where the panel or its size differ)."""
    before, after = start[f"{prefix}task_rates"], end[f"{prefix}task_rates"]
    if len(before) != len(after) or start.get(f"{prefix}panel") != end.get(f"{prefix}panel"):
        return None
    ids = end.get(f"{prefix}task_ids") or [f"task {i + 1}" for i in range(len(after))]
    where = [
        f"{n} {r.get('phase', '?')} {r.get('iteration', '')}".strip()
        for n, r in zip(names, (start, end), strict=True)
    ]
    return PanelGrid(
        label=f"{label}: {where[0]} → {where[1]}",
        panel=str(end.get(f"{prefix}panel", "")),
        task_ids=tuple(ids),
        before=tuple(float(x) for x in before),
        after=tuple(float(x) for x in after),
        samples=int(end.get(f"{prefix}samples", 1)),
    )


def _evals(history: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [r for r in history if f"{prefix}task_rates" in r]


def _grid(history: list[dict[str, Any]], prefix: str, label: str) -> PanelGrid | None:
    """A run's panel after BC (else its first evaluation) against its last evaluation."""
    rows = _evals(history, prefix)
    start = next((r for r in rows if r.get("phase") == "bc"), rows[0] if rows else None)
    if start is None or rows[-1] is start:
        return None
    return _grid_between(start, rows[-1], prefix, label, ("", ""))


def compare_grids(a: RunView, b: RunView) -> list[PanelGrid]:
    """Run A's last evaluation against run B's on each panel both scored (what ``hierarl eval RUN_A RUN_B``
    compares): "gained" where B's rate is higher."""
    out = []
    for prefix, label in PANELS:
        ra, rb = _evals(a.history, prefix), _evals(b.history, prefix)
        if ra and rb and (grid := _grid_between(ra[-1], rb[-1], prefix, label, (a.name, b.name))) is not None:
            out.append(grid)
    return out


def _row(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def _iteration_files(folder: Path, pattern: str = "iter_*.jsonl") -> list[tuple[int, Path]]:
    return sorted((int(m.group(1)), p) for p in folder.glob(pattern) if (m := _ITER.search(p.name)))


def read_run(run_dir: str | Path, *, episodes_per_iteration: int = 16) -> RunView:
    """The run folder's metrics, kept episodes (at most ``episodes_per_iteration`` an iteration) and eval grids.
    Raises ``ViewError`` only where there is nothing to show (no folder, no readable metrics row)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ViewError(f"{run}: no such run folder")
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        raise ViewError(
            f"{run}: no metrics.jsonl (not a hierarl run folder, or a run cut before its first row)"
        )
    lines = [ln for ln in metrics.read_text().splitlines() if ln.strip()]
    history = [r for r in map(_row, lines) if r is not None]
    if not history:
        raise ViewError(f"{metrics}: no readable row")
    view = RunView(name=run.name, history=history)
    if len(history) < len(lines):
        view.notes.append(f"metrics.jsonl: {len(lines) - len(history)} unreadable line(s) left out")
    kept = _iteration_files(run / "episodes")
    files = kept or _iteration_files(run / "trajectories")
    if not files:
        view.notes.append("no episodes kept: the run had keep_episodes=0 and save_trajectories=false")
    elif not kept:
        view.notes.append(
            "episodes from trajectories/ (written before the update): no advantages or reward terms"
        )
    for it, path in files:
        eps, note = read_episodes(path, it, episodes_per_iteration)
        view.episodes += eps
        if note:
            view.notes.append(note)
    for it, path in _iteration_files(run / "episodes", "eval_iter_*.jsonl"):  # every evaluation episode
        eps, note = read_episodes(path, it, 10**9)
        view.episodes += eps
        if note:
            view.notes.append(note)
    for prefix, label in PANELS:
        grid = _grid(history, prefix, label)
        if grid is not None:
            view.grids.append(grid)
    if not view.grids:
        view.notes.append("no before/after evaluation pair yet: the eval grid needs two evaluations")
    return view


def series(history: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(iterations, values) of ``key`` over the rows that have a finite one (BC is iteration 0)."""
    xs, ys = [], []
    for r in history:
        v = r.get(key)
        if isinstance(v, int | float) and not math.isnan(v) and "iteration" in r:
            xs.append(int(r["iteration"]))
            ys.append(float(v))
    return xs, ys


def keys_with(history: list[dict[str, Any]], prefix: str) -> list[str]:
    """Every metric key starting with ``prefix`` in any row, sorted (the token groups of ``kl_update/``, ...)."""
    return sorted({k for r in history for k in r if k.startswith(prefix)})
