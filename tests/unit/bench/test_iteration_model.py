"""The iteration benchmark's arithmetic (``bench/iteration_model.py``) on a toy decoder, by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from iteration_model import (
    Shape,
    group_pass_micro,
    pack_flops,
    packed_pass_cost,
    pass_cost,
    rollout_floor_s,
    rollout_rounds,
    shared_prefix_tokens,
    sorted_micro_batches,
    static_batch_work,
)

# hidden 4, MLP 8, 2 layers, 2 query heads of 2 and 1 kv head; LoRA rank 1 on q and v
TOY = Shape(
    hidden=4,
    intermediate=8,
    layers=2,
    heads=2,
    kv_heads=1,
    head_dim=2,
    vocab=10,
    lora_rank=1,
    lora_targets=("q_proj", "v_proj"),
)


def test_weights_and_a_forward_pass_are_counted_by_hand():
    # per layer q 4×4, k 4×2, v 4×2, o 4×4, gate 4×8, up 4×8, down 8×4 = 16+8+8+16+32+32+32 = 144; × 2 layers
    assert TOY.matmul_weights == 288
    # LoRA rank 1: q (4 + 4) + v (4 + 2) = 14 per layer
    assert TOY.lora_weights == 28
    assert TOY.weight_bytes_fp32 == 4 * (288 + 4 * 10)
    # 2 rows × 3 columns: per token 2 × (288 + 28) = 632, attention 2·2·2 heads·2 dims·(3 + 1)/2 · 2 layers = 64;
    # the output layer at 4 positions: 4 · 2 · 4 · 10 = 320
    assert TOY.forward_flops(2, 3, 4) == pytest.approx(6 * (632 + 64) + 320)


def test_a_pass_counts_its_micro_batches_padding_and_a_critics_reach():
    lengths, logits = np.array([5, 3, 4]), np.array([2, 1, 1])
    micro = sorted_micro_batches(lengths, 2)  # longest first: [0 (5), 2 (4)], [1 (3)]
    assert [m.tolist() for m in micro] == [[0, 2], [1]]
    useful, computed, flops = pass_cost(TOY, lengths, logits, micro, train=True)
    # [0, 2] at width 5: 10 × (632 + 16·6) + 3 · 80 = 7520; [1] at width 3: 3 × (632 + 16·4) + 80 = 2168
    assert (useful, computed) == (12, 2 * 5 + 3)
    assert flops == pytest.approx(2 * (7520 + 2168))  # a training pass: 2 forwards
    reach = np.array([4, 2, 4])
    useful, computed, _ = pass_cost(TOY, lengths, 0 * logits, sorted_micro_batches(reach, 2), widths=reach)
    assert (useful, computed) == (10, 2 * 4 + 2)
    # the group's chunks of 4 (longest first: [0, 2, 1], [4, 3]) cut again into micro-batches of 2
    got = group_pass_micro(np.array([5, 3, 4, 1, 2]), 2, 4)
    assert [m.tolist() for m in got] == [[0, 2], [1], [4, 3]]


def test_rollout_rounds_refill_slots_and_the_floor_takes_the_larger_bound_per_step():
    # episodes (prompt, response) per call: A two calls, B one, C one; 2 slots: C takes B's slot in round 2
    rounds = rollout_rounds([[(5, 2), (6, 3)], [(4, 1)], [(7, 2)]], slots=2)
    assert [(r.prompts, r.responses) for r in rounds] == [((5, 4), (2, 1)), ((6, 7), (3, 2))]
    assert [r.active() for r in rounds] == [[2, 1], [2, 2, 1]]
    # prefill slots 2·5 + 2·7 (left-padded to the longest); decode slot-steps 2·2 + 2·3 (to the longest response)
    assert static_batch_work(rounds) == {
        "prompt_tokens": 22,
        "prefill_slots": 24,
        "response_tokens": 8,
        "decode_slot_steps": 10,
    }
    # peak 1000 FLOP/s, the weights read in 1 s. A decode step: 2 · 288 + attention 32 + output layer 80 = 688 FLOP,
    # so steps with 2 rows are compute-bound (1.376 s), with 1 row read-bound (1 s): 3 × 1.376 + 2 × 1
    # prefill, p × (576 + 16 (p + 1)) per prompt: 3360 + 2624 + 4128 + 4928 = 15040 FLOP
    floor = rollout_floor_s(rounds, TOY, 1000.0, float(TOY.weight_bytes_fp32))
    assert floor["decode_s"] == pytest.approx(3 * 1.376 + 2)
    assert floor["prefill_s"] == pytest.approx(15.04)


def test_shared_prefix_is_each_prompts_longest_match_with_an_earlier_one():
    prompts = [np.array(p) for p in ([1, 2, 3], [1, 2, 4], [1, 2, 3, 5], [9])]
    assert shared_prefix_tokens(prompts) == 0 + 2 + 3 + 0


def test_a_packed_pass_counts_its_tree_tokens_and_dense_attention():
    # a pack of 5 tree tokens: 5 × (632 + 2·2·2 heads·2 dims·5 · 2 layers = 160) + 3 logits · 80 = 4200
    assert pack_flops(TOY, 5, 3) == pytest.approx(5 * (632 + 160) + 240)
    lengths, logits = np.array([5, 3, 4]), np.array([2, 1, 1])
    # rows 0 and 2 in one pack of 6 tree tokens (3 shared), row 1 alone (3)
    packs = [(np.array([0, 2]), 6), (np.array([1]), 3)]
    useful, computed, flops = packed_pass_cost(TOY, lengths, logits, packs, train=True)
    assert (useful, computed) == (12, 9)
    # attention 32 per token pair (2·2·2 heads·2 dims·2 layers), every pair of the pack (padded rows: the causal
    # half): 6 × (632 + 32·6) + 3 · 80 = 5184; 3 × (632 + 32·3) + 80 = 2264; a training pass: 2 forwards
    assert flops == pytest.approx(2 * (5184 + 2264))
