"""Prefix-tree packing (``learners.packing``) and the decoder call that runs a pack (``learners.value_model``), on
rows written out by hand: golden trees, masks, pack plans and the gather's gradient.

The rows of every test below (pad 0, width 4)::

    r0  1 2 3 4
    r1  1 2 5 .
    r2  1 2 3 4     a repeat of r0
    r3  1 2 3 .     a prefix of r0
    r4  7 8 . .     nothing in common with the others
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from learners.packing import (
    PackedRows,
    build_pack,
    learner_tokens_ratio,
    lexicographic_order,
    packed_tokens,
    plan_packs,
    shared_with_previous,
)
from learners.value_model import decoder_hidden, tree_mask_kind

ROWS = [[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 4], [1, 2, 3], [7, 8]]


def _rows() -> tuple[np.ndarray, np.ndarray]:
    ids = np.zeros((len(ROWS), 4), np.int64)
    attn = np.zeros((len(ROWS), 4), bool)
    for i, r in enumerate(ROWS):
        ids[i, : len(r)] = r
        attn[i, : len(r)] = True
    return ids, attn


def test_rows_sort_as_token_strings_and_share_with_the_row_before():
    """r3 (1 2 3) before its extension r0 (1 2 3 4), r0 before its repeat r2 (stable), then r1 (… 5), r4 (7 …).
    Shared with the previous: r3 0; r0 3 (1 2 3); r2 4 (all of it); r1 2 (1 2); r4 0."""
    ids, attn = _rows()
    lengths = attn.sum(1)
    order = lexicographic_order(ids, lengths)
    assert order.tolist() == [3, 0, 2, 1, 4]
    assert shared_with_previous(ids, lengths, order).tolist() == [0, 3, 4, 2, 0]
    # padding is not a token: the pad id 0 sorts below every token, but a 0 inside a row does not end it
    ids2 = np.array([[5, 0, 0], [5, 0, 1]])
    assert lexicographic_order(ids2, np.array([1, 3])).tolist() == [0, 1]
    assert lexicographic_order(ids2, np.array([3, 3])).tolist() == [0, 1]


def test_the_tree_holds_each_prefix_once_at_its_depth():
    """16 row tokens (4 + 3 + 4 + 3 + 2) minus 9 shared (3 + 4 + 2) = 7 nodes: 1 2 3 4 (r3 then r0), 5 (r1, under
    the node of "1 2"), 7 8 (r4, a second root). Positions are depths; padding maps to node 7 (one past the last)."""
    ids, attn = _rows()
    pack = build_pack(ids, attn)
    assert pack.tokens == 7 == packed_tokens(ids, attn.sum(1))
    assert pack.input_ids.tolist() == [1, 2, 3, 4, 5, 7, 8]
    assert pack.position_ids.tolist() == [0, 1, 2, 3, 2, 0, 1]
    assert pack.parent.tolist() == [-1, 0, 1, 2, 1, -1, 5]
    assert pack.scatter.tolist() == [[0, 1, 2, 3], [0, 1, 4, 7], [0, 1, 2, 3], [0, 1, 2, 7], [5, 6, 7, 7]]
    # every row reads its own tokens back
    flat = np.append(pack.input_ids, 0)
    np.testing.assert_array_equal(flat[pack.scatter], ids)


def test_the_mask_lets_a_node_see_itself_and_its_ancestors_only():
    """Node 4 (r1's "5") sees 1 2 and itself, not 3 or 4 (r0's branch, a sibling's); node 5 (r4's "7") only
    itself; a node never sees one after it in its row."""
    ids, attn = _rows()
    mask = build_pack(ids, attn).tree_mask()
    sees = [np.flatnonzero(m).tolist() for m in mask]
    assert sees == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 4], [5], [5, 6]]


def test_a_critic_pass_packs_each_row_only_as_far_as_it_reads():
    """``lengths`` cut the rows first: r0 and r2 to 2 tokens and r1 to 3 leave 1 2 (shared), 5, and r3's 3, r4's
    7 8: 6 nodes."""
    ids, attn = _rows()
    pack = build_pack(ids, attn, np.array([2, 3, 2, 3, 2]))
    assert pack.input_ids.tolist() == [1, 2, 3, 5, 7, 8]
    assert pack.scatter[0].tolist() == [0, 1, 6, 6]


def test_packs_fill_to_the_budget_in_lexicographic_order():
    """New tokens per row in order r3 r0 r2 r1 r4: 3, 1, 0, 1, 2. Budget 4: r3 + r0 + r2 = 4, r1 would make 5, so
    r1 starts a pack (3 tokens, whole), r4 would make 5: a third. 4 + 3 + 2 = 9 of 16 row tokens. Budget 2: r3
    alone is over it and starts a pack, r0 starts the next, r2 (a repeat, no new token) joins it."""
    ids, attn = _rows()
    packs = plan_packs(ids, attn, 4)
    assert [p.tolist() for p in packs] == [[3, 0, 2], [1], [4]]
    assert learner_tokens_ratio(ids, attn, packs) == pytest.approx(9 / 16)
    assert [p.tolist() for p in plan_packs(ids, attn, 2)] == [[3], [0, 2], [1], [4]]
    whole = plan_packs(ids, attn, 100)
    assert [p.tolist() for p in whole] == [[3, 0, 2, 1, 4]]
    assert learner_tokens_ratio(ids, attn, whole) == pytest.approx(7 / 16)
    with pytest.raises(ValueError, match=">= 1"):
        plan_packs(ids, attn, 0)


def test_the_gather_sums_a_shared_nodes_gradient_over_its_rows():
    """Node 0 ("1") is position 0 of r0..r3: its gradient is the sum of their weights, 1 + 2 + 3 + 4 = 10; node 4
    ("5") is r1's position 2 alone: 20; node 3 ("4") is r0's and r2's position 3: 30 + 50 = 80. Padding reads 0."""
    ids, attn = _rows()
    packed = PackedRows.of(build_pack(ids, attn), "cpu")
    hidden = torch.arange(1.0, 8.0).reshape(1, 7, 1).requires_grad_()
    rows = packed.rows(hidden)
    assert rows[..., 0].tolist() == [[1, 2, 3, 4], [1, 2, 5, 0], [1, 2, 3, 4], [1, 2, 3, 0], [6, 7, 0, 0]]
    weight = torch.zeros(5, 4)
    weight[:, 0] = torch.tensor([1.0, 2, 3, 4, 0])
    weight[1, 2], weight[0, 3], weight[2, 3] = 20.0, 30.0, 50.0
    (rows[..., 0] * weight).sum().backward()
    assert hidden.grad is not None
    assert hidden.grad[0, :, 0].tolist() == [10, 0, 0, 80, 20, 0, 0]


def test_the_additive_mask_is_zero_where_the_tree_mask_attends():
    ids, attn = _rows()
    packed = PackedRows.of(build_pack(ids, attn), "cpu")
    add = packed.additive_mask(torch.float32)
    assert add.shape == (1, 1, 7, 7)
    assert torch.equal(add == 0, packed.mask)
    assert float(add.min()) == torch.finfo(torch.float32).min


def test_models_that_cannot_take_a_tree_mask_are_named():
    assert tree_mask_kind(SimpleNamespace(_attn_implementation="sdpa")) == ("bool", "")
    assert tree_mask_kind(SimpleNamespace(_attn_implementation="eager")) == ("additive", "")
    kind, why = tree_mask_kind(SimpleNamespace(_attn_implementation="flash_attention_2"))
    assert kind == "" and "flash_attention_2" in why
    kind, why = tree_mask_kind(SimpleNamespace(_attn_implementation="sdpa", sliding_window=4096))
    assert kind == "" and "sliding" in why
    off = SimpleNamespace(_attn_implementation="sdpa", sliding_window=4096, use_sliding_window=False)
    assert tree_mask_kind(off) == ("bool", "")


class _Decoder(torch.nn.Module):
    """Records what a decoder is called with (the call's arguments are the contract with transformers)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
        self.calls: list[dict] = []

    def forward(self, **kw):
        self.calls.append(kw)
        n = kw["input_ids"].shape[1]
        return SimpleNamespace(last_hidden_state=kw["input_ids"][..., None].float().expand(-1, n, 2))


def test_the_decoder_gets_the_pack_its_positions_and_the_mask_in_its_form():
    ids, attn = _rows()
    packed = PackedRows.of(build_pack(ids, attn), "cpu")
    dec = _Decoder()
    out = decoder_hidden(dec, torch.from_numpy(ids), torch.from_numpy(attn), packed, "bool")
    call = dec.calls[-1]
    assert call["input_ids"].tolist() == [[1, 2, 3, 4, 5, 7, 8]]
    assert call["position_ids"].tolist() == [[0, 1, 2, 3, 2, 0, 1]]
    assert call["attention_mask"].dtype == torch.bool and call["attention_mask"].shape == (1, 1, 7, 7)
    assert out.shape == (5, 4, 2) and out[1, :, 0].tolist() == [1, 2, 5, 0]
    decoder_hidden(dec, torch.from_numpy(ids), torch.from_numpy(attn), packed, "additive")
    assert dec.calls[-1]["attention_mask"].dtype == torch.bfloat16  # the model's own dtype
    decoder_hidden(dec, torch.from_numpy(ids), torch.from_numpy(attn))
    assert "position_ids" not in dec.calls[-1] and dec.calls[-1]["input_ids"].shape == (5, 4)
