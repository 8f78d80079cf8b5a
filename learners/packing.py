"""Prefix-tree packing of a learner pass's rows (pure: numpy + torch).

Every turn is one right-padded row ``prompt + response``, and the rows of one episode group repeat each other's
beginnings: the system prompt and the task in every row, turn 0's prompt in all of a group's episodes, often more.
A *pack* is the prefix tree (trie) of some rows' token sequences: each node is a token together with everything
before it, stored once however many rows hold it, at the position it has in those rows (its depth). A node attends
to itself and its ancestors only, which are exactly the tokens before it in each of its rows; so a causal decoder run
on the pack with these position ids and this mask gives every node the hidden state it has in each of its rows alone,
and the rows' layout is read back by gathering (``Pack.scatter``). The gradient of a shared node sums the
contributions of every row that holds it, which is what the rows' separate passes add up to.

Rows sorted as token strings (``lexicographic_order``) put rows that share a prefix next to each other, and a row's
longest common prefix with any earlier row is then its common prefix with the row before it, so a trie is built in
one pass over the sorted rows, and a budget of packed tokens cuts the sorted rows into packs (``plan_packs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def _lengths(attention_mask: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
    """int64[B]: the tokens of each right-padded row that are packed (``lengths``, else the attended ones)."""
    if lengths is None:
        lengths = np.asarray(attention_mask).astype(bool).sum(axis=1)
    return np.asarray(lengths, dtype=np.int64)


def lexicographic_order(input_ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64[B]: the rows sorted as token strings of their first ``lengths`` tokens, a row that is a prefix of
    another before it (stable: equal rows keep their order)."""
    b, width = input_ids.shape
    if b == 0 or width == 0:
        return np.arange(b, dtype=np.int64)
    # tokens past a row's length read -1, below every token id: a shorter row sorts before its extensions
    keys = np.where(np.arange(width)[None, :] < lengths[:, None], input_ids, -1)
    return np.lexsort(keys.T[::-1]).astype(np.int64)  # lexsort's last key is the primary one: column 0


def shared_with_previous(input_ids: np.ndarray, lengths: np.ndarray, order: np.ndarray) -> np.ndarray:
    """int64[len(order)]: the leading tokens each row of ``order`` has in common with the row before it in
    ``order`` (0 for the first)."""
    if order.size == 0:
        return np.zeros(0, np.int64)
    ids, n = input_ids[order], lengths[order]
    differ = ids[1:] != ids[:-1]
    first = np.where(differ.any(axis=1), differ.argmax(axis=1), ids.shape[1])
    return np.concatenate([[0], np.minimum(first, np.minimum(n[1:], n[:-1]))]).astype(np.int64)


def packed_tokens(input_ids: np.ndarray, lengths: np.ndarray) -> int:
    """Tokens in the prefix tree of the rows: each row's length less what it shares with the row before it in
    lexicographic order."""
    order = lexicographic_order(input_ids, lengths)
    return int(lengths.sum() - shared_with_previous(input_ids, lengths, order).sum())


@dataclass(frozen=True)
class Pack:
    """The prefix tree of B right-padded rows of width L, N nodes in depth-first order (a parent before its
    children)::

    input_ids     int64[N]     each node's token
    position_ids  int64[N]     its position in its rows (its depth)
    parent        int64[N]     the node before it in its rows; -1 at position 0
    scatter       int64[B, L]  the node of each row position; N (one past the last node) past the row's length
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    parent: np.ndarray
    scatter: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.input_ids.size)

    def tree_mask(self) -> np.ndarray:
        """bool[N, N]: node i attends to node j iff j is i or an ancestor of i (a row's causal mask, per node)."""
        n = self.tokens
        mask = np.zeros((n, n), dtype=bool)
        for i, p in enumerate(self.parent):
            if p >= 0:
                mask[i] = mask[p]  # parents precede children: the parent's row is complete
            mask[i, i] = True
        return mask


def build_pack(input_ids: np.ndarray, attention_mask: np.ndarray, lengths: np.ndarray | None = None) -> Pack:
    """The prefix tree of right-padded rows (int64[B, L], bool[B, L]); ``lengths`` int64[B]: pack only each row's
    first so many tokens (default: its attended ones; a critic pass needs no token after its last value slot)."""
    lengths = _lengths(attention_mask, lengths)
    b, width = input_ids.shape
    order = lexicographic_order(input_ids, lengths)
    shared = shared_with_previous(input_ids, lengths, order)
    n = int(lengths.sum() - shared.sum())
    scatter = np.full((b, width), n, dtype=np.int64)
    ids, pos, parent = (np.zeros(n, np.int64) for _ in range(3))
    top, prev = 0, -1
    for r, c in zip(order.tolist(), shared.tolist(), strict=True):
        length = int(lengths[r])
        if c:
            scatter[r, :c] = scatter[prev, :c]
        new = np.arange(top, top + max(0, length - c))
        scatter[r, c:length] = new
        ids[new] = input_ids[r, c:length]
        pos[new] = np.arange(c, length)
        if new.size:
            parent[new] = scatter[r, c - 1 : length - 1] if c else np.concatenate([[-1], new[:-1]])
        top += new.size
        prev = r
    return Pack(input_ids=ids, position_ids=pos, parent=parent, scatter=scatter)


def plan_packs(
    input_ids: np.ndarray, attention_mask: np.ndarray, pack_tokens: int, lengths: np.ndarray | None = None
) -> list[np.ndarray]:
    """The rows of each pack (int64 row indices, in lexicographic order): the rows sorted as token strings, cut
    where the next row's new tokens would take the pack past ``pack_tokens`` (a repeat of the row before it adds
    none and always joins). A row longer than the budget starts a pack of its own. Rows that share a prefix are
    adjacent, so a cut separates few of them."""
    if pack_tokens < 1:
        raise ValueError(f"pack_tokens must be >= 1, got {pack_tokens}")
    lengths = _lengths(attention_mask, lengths)
    order = lexicographic_order(input_ids, lengths)
    new = lengths[order] - shared_with_previous(input_ids, lengths, order)
    packs: list[list[int]] = []
    used = 0
    for r, k in zip(order.tolist(), new.tolist(), strict=True):
        if packs and (k == 0 or used + k <= pack_tokens):
            packs[-1].append(r)
            used += k
        else:  # a new pack holds the row whole: nothing before it to share
            packs.append([r])
            used = int(lengths[r])
    return [np.array(p, dtype=np.int64) for p in packs]


def learner_tokens_ratio(
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    packs: list[np.ndarray],
    lengths: np.ndarray | None = None,
) -> float:
    """The packs' tokens ÷ the rows' own tokens (1.0 for no rows): what a packed pass computes per token of the
    rows one by one."""
    lengths = _lengths(attention_mask, lengths)
    own = int(lengths.sum())
    tree = sum(packed_tokens(input_ids[p], lengths[p]) for p in packs)
    return tree / own if own else 1.0


@dataclass(frozen=True)
class PackedRows:
    """One pack as a decoder's input (torch, on the model's device)::

    input_ids     int64[1, N]
    position_ids  int64[1, N]
    mask          bool[1, 1, N, N]  True where a node may attend (``Pack.tree_mask``)
    scatter       int64[B, L]       the node of each row position, N past the row's length
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    mask: torch.Tensor
    scatter: torch.Tensor

    @classmethod
    def of(cls, pack: Pack, device: torch.device | str) -> PackedRows:
        def dev(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device)

        return cls(
            input_ids=dev(pack.input_ids)[None],
            position_ids=dev(pack.position_ids)[None],
            mask=dev(pack.tree_mask())[None, None],
            scatter=dev(pack.scatter),
        )

    def additive_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """The mask as added to attention scores: 0 where a node attends, the dtype's lowest value elsewhere."""
        return torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device).masked_fill(
            ~self.mask, torch.finfo(dtype).min
        )

    def rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """float[B, L, D] from the pack's hidden states float[1, N, D]: each row position reads its node (so the
        gradient of a node sums over its rows' positions), a position past its row's length reads zeros."""
        flat = torch.cat([hidden[0], hidden.new_zeros(1, hidden.shape[-1])])
        return flat[self.scatter]
