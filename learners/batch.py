"""Trajectories → padded training tensors (pure: torch + numpy only).

Each turn becomes one sequence ``prompt_ids + response_ids`` (the agent prompts carry a bounded history window, so
turns are independent sequences, as in verl-agent and HiPER). Token-level quantities are stored at the position of
the token they belong to: ``old_logprobs[b, j]`` is log π(x_j | x_<j) for response token j. Everything at prompt or
padding positions is 0 / False.

Shapes (B turns, L = longest prompt+response)::

    input_ids        int64[B, L]
    attention_mask   bool[B, L]
    response_mask    bool[B, L]   True on response tokens (what the policy is trained on)
    old_logprobs     float32[B, L]
    masks[name]      bool[B, L]   tag masks (switch_mask, subgoal_mask, action_mask, ...) placed at sequence positions
    prompt_last      int64[B]     index of the last prompt token: where V(s_t) / V_high(s_t) / V_low(s_t, o_{t-1}) are read
    subgoal_last     int64[B]     index of the last subgoal token (HiPER V_low(s_t, o_t)); prompt_last if no subgoal
    response_last    int64[B]     index of the last response token: where Q(s, u) is read (STEP-HRL's action-end token)

``TurnBatch`` is what the algorithms' ``compute_targets`` read (torch, built from trajectories); ``Sequences`` and
``LearnerBatch`` are what crosses to the learner group (numpy, the forward-pass input and the full training batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from actors.trajectory import Trajectory, Turn


@dataclass
class TurnBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor
    prompt_last: torch.Tensor
    subgoal_last: torch.Tensor
    response_last: torch.Tensor
    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    index: list[tuple[int, int]] = field(default_factory=list)
    """(trajectory index, turn index) of every row, to scatter per-turn results back."""
    group: list[int] = field(default_factory=list)
    """The episode group of every row (``Trajectory.group_id``s numbered in order of first appearance): rows of
    one group share their prompts' beginnings (``learner.minibatches=groups``); empty: unknown."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def with_logprobs(self, logprobs: np.ndarray) -> TurnBatch:
        """The same batch with ``old_logprobs`` replaced (float32[B, L]): the driver swaps in the learner's
        recomputation before targets, so every consumer (HiPER's β_t, the PPO ratio) reads one set per row."""
        if tuple(logprobs.shape) != tuple(self.old_logprobs.shape):
            raise ValueError(
                f"logprobs {tuple(logprobs.shape)} do not fit the batch {tuple(self.old_logprobs.shape)}"
            )
        return replace(self, old_logprobs=torch.as_tensor(logprobs, dtype=torch.float32))

    def select(self, rows: Sequence[int] | torch.Tensor) -> TurnBatch:
        rows_t = torch.as_tensor(rows, dtype=torch.long)
        return TurnBatch(
            input_ids=self.input_ids[rows_t],
            attention_mask=self.attention_mask[rows_t],
            response_mask=self.response_mask[rows_t],
            old_logprobs=self.old_logprobs[rows_t],
            prompt_last=self.prompt_last[rows_t],
            subgoal_last=self.subgoal_last[rows_t],
            response_last=self.response_last[rows_t],
            masks={k: v[rows_t] for k, v in self.masks.items()},
            index=[self.index[i] for i in rows_t.tolist()],
            group=[self.group[i] for i in rows_t.tolist()] if self.group else [],
        )

    def trim(self) -> TurnBatch:
        """Drop trailing all-padding columns (after ``select``, rows may be shorter than L)."""
        width = int(self.attention_mask.sum(dim=1).max().item()) if len(self) else 0
        return TurnBatch(
            input_ids=self.input_ids[:, :width],
            attention_mask=self.attention_mask[:, :width],
            response_mask=self.response_mask[:, :width],
            old_logprobs=self.old_logprobs[:, :width],
            prompt_last=self.prompt_last,
            subgoal_last=self.subgoal_last,
            response_last=self.response_last,
            masks={k: v[:, :width] for k, v in self.masks.items()},
            index=self.index,
            group=self.group,
        )


def _turn_rows(trajectories: Sequence[Trajectory], roles: set[str] | None) -> list[tuple[int, int, Turn]]:
    return [
        (i, j, turn)
        for i, traj in enumerate(trajectories)
        for j, turn in enumerate(traj.turns)
        if (roles is None or turn.role in roles) and turn.response_ids.size > 0
    ]


def build_turn_batch(
    trajectories: Sequence[Trajectory], *, max_len: int, pad_id: int, roles: set[str] | None = None
) -> TurnBatch:
    """Pad every (selected) turn into one batch. Prompts longer than ``max_len`` − response are cut from the left
    (the oldest history goes first), so the response and the most recent context always survive."""
    rows = _turn_rows(trajectories, roles)
    seqs, prompt_lens = [], []
    for _, _, t in rows:
        keep = max(1, max_len - t.response_ids.size)
        prompt = t.prompt_ids[-keep:]
        seqs.append(np.concatenate([prompt, t.response_ids])[:max_len])
        prompt_lens.append(prompt.size)
    b = len(rows)
    width = max((s.size for s in seqs), default=0)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.bool)
    response = torch.zeros((b, width), dtype=torch.bool)
    old_lp = torch.zeros((b, width), dtype=torch.float32)
    mask_names = sorted({k for _, _, t in rows for k in t.masks})
    masks = {k: torch.zeros((b, width), dtype=torch.bool) for k in mask_names}
    prompt_last = torch.zeros(b, dtype=torch.long)
    subgoal_last = torch.zeros(b, dtype=torch.long)
    response_last = torch.zeros(b, dtype=torch.long)
    for r, ((_, _, t), seq, p) in enumerate(zip(rows, seqs, prompt_lens, strict=True)):
        n = seq.size
        n_resp = n - p
        input_ids[r, :n] = torch.from_numpy(seq)
        attention[r, :n] = True
        response[r, p:n] = True
        old_lp[r, p:n] = torch.from_numpy(t.logprobs[:n_resp].astype(np.float32))
        for k, m in t.masks.items():
            masks[k][r, p:n] = torch.from_numpy(m[:n_resp])
        prompt_last[r] = p - 1
        response_last[r] = n - 1
        sg = t.masks.get("subgoal_mask")
        if sg is not None and sg[:n_resp].any():
            subgoal_last[r] = p + int(np.flatnonzero(sg[:n_resp])[-1])
        else:
            subgoal_last[r] = p - 1
    return TurnBatch(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=response,
        old_logprobs=old_lp,
        prompt_last=prompt_last,
        subgoal_last=subgoal_last,
        response_last=response_last,
        masks=masks,
        index=[(i, j) for i, j, _ in rows],
        group=_group_numbers([trajectories[i].group_id for i, _, _ in rows]),
    )


def _group_numbers(group_ids: Sequence[str]) -> list[int]:
    """Each id's number in order of first appearance: ["g7", "g2", "g7"] -> [0, 1, 0]."""
    number: dict[str, int] = {}
    return [number.setdefault(g, len(number)) for g in group_ids]


def _take_rows(record, rows: np.ndarray, keep: tuple[str, ...] = ()):
    """``record`` with every array field indexed by ``rows`` along axis 0 (None fields and ``keep`` stay as they are)."""
    out = {}
    for f in fields(record):
        v = getattr(record, f.name)
        if isinstance(v, Sequences):
            out[f.name] = v.rows(rows)
        elif v is None or f.name in keep:
            out[f.name] = v
        else:
            out[f.name] = v[rows]
    return type(record)(**out)


@dataclass(frozen=True)
class Sequences:
    """The forward-pass input of a batch (numpy; B rows, L padded width, K value slots)::

    input_ids       int64[B, L]
    attention_mask  bool[B, L]
    response_mask   bool[B, L]   the tokens whose log-probs are computed
    value_pos       int64[B, K]  where value slot k is read (``learners.targets.value_positions``)
    value_head      int64[K]     which critic head slot k reads (per slot, not per row)
    value_from_target bool[K] | None  slot k is read from the target critic (a soft-updated copy; IQL's
                                 Q_target / V_target), not the critic itself; None: every slot from the critic
    group           int64[B] | None  each row's episode group (``TurnBatch.group``): an update can keep a group's
                                 rows in one optimizer step (``learner.minibatches``); None: unknown
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    response_mask: np.ndarray
    value_pos: np.ndarray
    value_head: np.ndarray
    value_from_target: np.ndarray | None = None
    group: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def rows(self, rows: np.ndarray) -> Sequences:
        return _take_rows(self, rows, keep=("value_head", "value_from_target"))

    def narrow(self, width: int) -> Sequences:
        """The first ``width`` columns (right padding beyond every row's last token dropped)."""
        return replace(
            self,
            input_ids=self.input_ids[:, :width],
            attention_mask=self.attention_mask[:, :width],
            response_mask=self.response_mask[:, :width],
        )


@dataclass(frozen=True)
class LearnerBatch:
    """What the learner group trains on: the sequences plus the algorithm's targets (numpy; B, L, K as in
    ``Sequences``). One set of log-probs per row: ``old_logprobs`` is the learner's own recomputation at the start
    of the update (the ratio's denominator and what HiPER's β_t reads); the rollout engine's are used only for the
    ``logprob_gap`` metric, before this batch is built.

        seqs          Sequences
        old_logprobs  float32[B, L]  log π_old(x_j | x_<j) on response tokens, 0 elsewhere
        ref_logprobs  float32[B, L] | None  the reference policy's, when the algorithm has a KL term
        token_adv     float32[B, L]  the advantage each token is trained with (0 outside ``loss_mask``)
        loss_mask     bool[B, L]     the tokens the policy loss covers
        value_target  float32[B, K]  critic regression targets
        value_valid   bool[B, K]     which targets exist (HiPER's V_high only at segment boundaries)
        old_values    float32[B, K]  the critic's values when the targets were computed (value clipping)
        loss_weight   float32[B, L] | None  per-token aggregation weights of the mini-batch (set by the group)
        value_weight  float32[B, K] | None  valid / count of valid targets in the mini-batch (set by the group)
        behaviour_weight float32[B, L] | None  decoupled PPO's truncated π_old / π_behav per token (the engine's
                      log-probs as π_behav; ``learner.behaviour_is_cap``); None: off
        episode_weight float32[B] | None  1 / the loss tokens of the row's episode in the whole batch
                      (``learners.losses.episode_row_weights``): what ``episode-mean`` aggregation weighs rows by
    """

    seqs: Sequences
    old_logprobs: np.ndarray
    ref_logprobs: np.ndarray | None
    token_adv: np.ndarray
    loss_mask: np.ndarray
    value_target: np.ndarray
    value_valid: np.ndarray
    old_values: np.ndarray
    loss_weight: np.ndarray | None = None
    value_weight: np.ndarray | None = None
    behaviour_weight: np.ndarray | None = None
    episode_weight: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.seqs)

    def rows(self, rows: np.ndarray) -> LearnerBatch:
        return _take_rows(self, rows)

    def narrow(self, width: int) -> LearnerBatch:
        """The first ``width`` columns of every per-token field."""

        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[:, :width]

        return replace(
            self,
            seqs=self.seqs.narrow(width),
            old_logprobs=cut(self.old_logprobs),
            ref_logprobs=cut(self.ref_logprobs),
            token_adv=cut(self.token_adv),
            loss_mask=cut(self.loss_mask),
            loss_weight=cut(self.loss_weight),
            behaviour_weight=cut(self.behaviour_weight),
        )


def row_lengths(attention_mask: np.ndarray) -> np.ndarray:
    """int64[B]: one past each right-padded row's last attended column (1 for a row with none)."""
    lengths = attention_mask.shape[1] - np.argmax(attention_mask[:, ::-1], axis=1)
    lengths[~attention_mask.any(axis=1)] = 1
    return lengths.astype(np.int64)


def value_reach(seqs: Sequences) -> np.ndarray:
    """int64[B]: the columns a critic pass needs per row, one past the last position any value slot reads
    (``value_pos``), at most the row's length. A causal model's value at position p depends on tokens ≤ p only, so
    the tokens after it (HiPER: the action after the subgoal; PPO: the whole response) are computed for nothing."""
    lengths = row_lengths(seqs.attention_mask)
    if seqs.value_pos.shape[1] == 0:
        return lengths
    return np.minimum(lengths, seqs.value_pos.max(axis=1).astype(np.int64) + 1)


def micro_batches(
    attention_mask: np.ndarray, size: int, lengths: np.ndarray | None = None
) -> list[tuple[np.ndarray, int]]:
    """Rows of a right-padded batch (bool[B, L]) in micro-batches of at most ``size``, longest first, each with its
    width (the column after its longest row's last token; ``lengths``: the columns each row needs when fewer, as
    ``value_reach``). Rows of similar length share a micro-batch, so a forward pass computes on little padding; a
    causal model's outputs at a row's own positions do not depend on the padding after them, so narrowing changes no
    result (beyond float rounding of other matrix shapes)."""
    if lengths is None:
        lengths = row_lengths(attention_mask)
    order = np.argsort(-lengths, kind="stable")
    return (
        [(rows, int(lengths[rows].max())) for rows in np.array_split(order, -(-len(order) // size))]
        if len(order)
        else []
    )
