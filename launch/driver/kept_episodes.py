"""What a run keeps of its episodes by default (``keep_episodes``), for ``hierarl view``: a bounded sample of each
RL iteration, written after the update shaped it, with each response token's text, group and advantage and the
critic's values (``<run_dir>/episodes/iter_<k>.jsonl``), and every evaluation episode
(``episodes/eval_iter_<k>.<panel>.jsonl``, after BC k = 0, zero-shot −1; a resumed run that evaluates an
iteration again writes it over). ``save_trajectories`` keeps every episode as
the update read it (``trajectories/``); this keeps few, as the update trained on them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from actors.trajectory import Trajectory
from learners.batch import TurnBatch
from learners.diagnostics import turn_annotations

FORMAT = 1
"""The kept episodes' format version (``"format"`` in every line): the viewer reads what it knows."""


def sample(trajectories: Sequence[Trajectory], n: int) -> list[int]:
    """Indices of at most ``n`` episodes, half won and half lost where the batch has both (the first of each, in
    order), the rest filled in order: a page shows both outcomes even when one is rare."""
    won = [i for i, t in enumerate(trajectories) if t.won]
    lost = [i for i, t in enumerate(trajectories) if not t.won]
    half = n // 2
    take = won[: max(half, n - len(lost))] + lost[: max(n - half, n - len(won))]
    return sorted(take)[:n]


def episode_record(
    traj: Trajectory,
    iteration: int,
    notes: dict[int, dict[str, Any]],
    pieces: Callable[[Sequence[int]], list[str]],
    source: str = "train",
) -> dict[str, Any]:
    """One kept episode: its outcome and, per turn, the text the viewer shows, the reward terms, the parser's
    decision and (``notes``: turn → ``turn_annotations``) each response token's piece, group and advantage.
    ``source``: "train" (an RL iteration's), or the evaluation panel it was played on."""
    turns = []
    for j, t in enumerate(traj.turns):
        row = {
            "observation": t.observation,
            "response_text": t.response_text,
            "decision": dataclasses.asdict(t.decision),
            "env_reward": t.env_reward,
            "shaped": dict(t.shaped),
            "segment_index": t.segment_index,
            "role": t.role,
        }
        note = notes.get(j)
        if note is not None:
            text = pieces(t.response_ids.tolist())
            # a row cut to learner.max_seq_len holds fewer response tokens than the turn: keep its last ones
            row |= {**note, "pieces": text[len(text) - len(note["token_adv"]) :]}
        turns.append(row)
    return {
        "format": FORMAT,
        "source": source,
        "iteration": iteration,
        "traj_id": traj.traj_id,
        "task_id": traj.task_id,
        "won": traj.won,
        "status": traj.status,
        "score": traj.score,
        "turns": turns,
    }


class EpisodeKeeper:
    """Writes each RL iteration's sample (``sample``) of at most ``per_iteration`` episodes; ``tokenizer`` turns
    token ids into the pieces the page colours; ``slots``: the algorithm's value slots' names."""

    def __init__(self, run_dir: Path, tokenizer: Any, per_iteration: int, slots: Sequence[str]) -> None:
        self.dir = Path(run_dir) / "episodes"
        self.tokenizer = tokenizer
        self.per_iteration = per_iteration
        self.slots = tuple(slots)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.tokenizer.decode([i]) for i in ids]

    def observer(self, iteration: int) -> Callable[[list[Trajectory], TurnBatch, Any], None] | None:
        """The ``Updater.update`` hook that keeps iteration ``iteration``'s sample; None when nothing is kept."""
        if self.per_iteration <= 0:
            return None

        def observe(trajs: list[Trajectory], turns: TurnBatch, batch: Any) -> None:
            notes = turn_annotations(trajs, turns, batch, self.slots)
            by_traj: dict[int, dict[int, dict[str, Any]]] = {}
            for (i, j), note in notes.items():
                by_traj.setdefault(i, {})[j] = note
            self.dir.mkdir(parents=True, exist_ok=True)
            lines = [
                json.dumps(
                    episode_record(trajs[i], iteration, by_traj.get(i, {}), self.pieces), ensure_ascii=False
                )
                for i in sample(trajs, self.per_iteration)
            ]
            (self.dir / f"iter_{iteration}.jsonl").write_text("".join(line + "\n" for line in lines))

        return observe

    def keep_eval(self, iteration: int, source: str, trajs: Sequence[Trajectory]) -> None:
        """Every episode of one evaluation (``source``: its panel) in ``eval_iter_<iteration>.<source>.jsonl``."""
        if self.per_iteration <= 0:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps(episode_record(t, iteration, {}, self.pieces, source), ensure_ascii=False)
            for t in trajs
        ]
        (self.dir / f"eval_iter_{iteration}.{source.replace(' ', '_')}.jsonl").write_text(
            "".join(line + "\n" for line in lines)
        )
