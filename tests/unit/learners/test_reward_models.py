"""HISR's reward models on the pure side (``learners.reward_models``): the collection filter, the SPRM's and the
hindsight model's inputs, Eq. 5-8 on turns and the driver's scatter of forward passes back to turns, against
hand-computed values (the arithmetic is in the comments). Each test names the mutation it is there to catch.
"""

import dataclasses
import math

import numpy as np
import pytest

from actors.trajectory import Trajectory
from learners.batch import build_turn_batch
from learners.reward_models import (
    MASK,
    hindsight_prompt,
    hindsight_rows,
    keep_for_reward_models,
    one_outcome_warning,
    outcome,
    segment_turn_rewards,
    sprm_sequences,
    write_segment_rewards,
)
from tests.unit.hisr_turns import make_traj, make_turn

# -- collected-trajectory filter and outcome ---------------------------------------------------------------------


def test_filter_drops_wrong_format_and_triple_repeats():
    ok = make_traj([make_turn([5], action="a"), make_turn([5], action="a"), make_turn([5], action="b")])
    bad_format = make_traj([make_turn([5]), make_turn([5], valid=False)])
    repeats = make_traj([make_turn([5], action="a") for _ in range(3)])
    assert keep_for_reward_models(ok)
    assert not keep_for_reward_models(bad_format)
    assert not keep_for_reward_models(repeats)


def test_outcome_is_success_or_the_webshop_score():
    assert outcome(make_traj([make_turn([5])], won=True)) == 1.0
    shop = Trajectory("w", "g", "t", "webshop", [make_turn([5])], score=0.75)
    assert outcome(shop) == 0.75


# -- SPRM inputs -------------------------------------------------------------------------------------------------


def _three_turns():
    return make_traj([make_turn([5, 6]), make_turn([7]), make_turn([8, 9, 10])], won=True)


def test_sprm_reads_each_segment_at_its_last_response_token():
    # every observation encodes to 2 tokens: [1 2 5 6 | 1 2 7 | 1 2 8 9 10] -> turn ends at 3, 6, 11.
    # segments [0, 0, 1]: segment 0 ends with turn 1 (position 6), segment 1 with turn 2 (position 11).
    # Mutation caught: reading a segment at its first turn's end (3).
    b = sprm_sequences([_three_turns()], [np.array([0, 0, 1])], lambda s: [1, 2], max_len=64, pad_id=0)
    assert b.seqs.input_ids[0].tolist() == [1, 2, 5, 6, 1, 2, 7, 1, 2, 8, 9, 10]
    assert b.seqs.value_pos.tolist() == [[6, 11]]
    assert b.segment_valid.tolist() == [[True, True]]
    assert b.outcome.tolist() == [1.0]


def test_sprm_length_cut_drops_the_oldest_tokens_and_their_segments():
    # max_len 10 cuts 2 tokens: positions 6, 11 -> 4, 9. max_len 5 cuts 7: segment 0 ended at 6 < 7, invalid.
    b = sprm_sequences([_three_turns()], [np.array([0, 0, 1])], lambda s: [1, 2], max_len=10, pad_id=0)
    assert b.seqs.value_pos.tolist() == [[4, 9]]
    b = sprm_sequences([_three_turns()], [np.array([0, 0, 1])], lambda s: [1, 2], max_len=5, pad_id=0)
    assert b.segment_valid.tolist() == [[False, True]] and b.seqs.value_pos[0, 1] == 4


def test_sprm_pads_rows_with_fewer_segments():
    short = make_traj([make_turn([5])])
    b = sprm_sequences(
        [_three_turns(), short], [np.array([0, 1, 2]), np.array([0])], lambda s: [1], max_len=64, pad_id=0
    )
    assert b.segment_valid.tolist() == [[True, True, True], [True, False, False]]
    assert b.seqs.attention_mask[1].sum() == 2 and b.outcome.tolist() == [1.0, 0.0]


# -- hindsight cloze ---------------------------------------------------------------------------------------------


def test_hindsight_prompt_masks_exactly_turn_k_and_states_the_outcome():
    traj = make_traj(
        [
            make_turn([5], obs="o0", text="r0"),
            make_turn([6], obs="o1", text="r1"),
            make_turn([7], obs="o2", text="r2"),
        ],
        won=True,
    )
    text = hindsight_prompt(traj, 1, "INTRO")
    assert text.startswith("INTRO")
    assert (
        f"Agent: {MASK}" in text and "Agent: r0" in text and "Agent: r2" in text and "Agent: r1" not in text
    )
    assert (
        "Your task is to: do it" in text
    )  # the task reaches the model even if the first observation lacks it
    assert "The scalar reward for the above trajectory is: 1.0" in text


def test_hindsight_rows_keep_the_policys_response_tokens():
    traj = make_traj([make_turn([5, 6]), make_turn([]), make_turn([7])])
    rows, index = hindsight_rows([traj], lambda text: [9, len(text) % 5], "I")
    assert index == [(0, 0), (0, 2)]  # the turn without a response has no row
    assert [r.turns[0].response_ids.tolist() for r in rows] == [[5, 6], [7]]
    assert rows[0].turns[0].prompt_ids[0] == 9


# -- Eq. 5-8 -----------------------------------------------------------------------------------------------------

# HISR Table 2 (bowl -> fridge): segments of 1, 2, 2, 2 turns, R_hat = (0.069, 0.118, 0.132, 0.681),
# z_s = (0.127, 0.392, 0.286, 0.195), printed R_him = (0.039, 0.205, 0.167, 0.589).
R_HAT = np.array([0.069, 0.118, 0.132, 0.681])
Z_S = [0.127, 0.392, 0.286, 0.195]
IDS = np.array([0, 1, 1, 2, 2, 3, 3])
BETA = 0.3


def _table2_logprobs():
    """Per turn one token with log r = β ln z_turn, so z(a_k) = exp(log r / β) = z_turn (Eq. 6, |a_k| = 1); a
    two-turn segment's z_s is split in halves (z_s = Σ z(a_k), Sec. 3.2). Policy log-prob 0 per token."""
    z_turn = [Z_S[0], *[Z_S[s] / 2 for s in (1, 1, 2, 2, 3, 3)]]
    hind = [np.array([BETA * math.log(z)]) for z in z_turn]
    pol = [np.zeros(1) for _ in z_turn]
    return hind, pol, z_turn


def test_table2_case_study_golden():
    # products 0.008763, 0.046256, 0.037752, 0.132795; L1 norm 0.225566 -> R_him 0.03885, 0.20507, 0.16737,
    # 0.58872 (the printed values); (1 - 0.3) x R_him is paid on each segment's last turn: turns 0, 2, 4, 6.
    hind, pol, z_turn = _table2_logprobs()
    reward, z = segment_turn_rewards(R_HAT, hind, pol, IDS, beta=BETA, alpha=0.3, keep_sprm_scale=False)
    np.testing.assert_allclose(z, z_turn, rtol=1e-9)
    printed = 0.7 * np.array([0.03885, 0, 0.20507, 0, 0.16737, 0, 0.58872])
    np.testing.assert_allclose(reward, printed, atol=0.7 * 6e-5)


def test_keep_sprm_scale_rescales_by_the_sprms_total():
    # ||R_hat||_1 = 1.000 in Table 2, so both readings print the same; halve R_hat to tell them apart. Eq. 7's
    # normalisation cancels the 0.5: as printed, R_him is Table 2's again; keep_sprm_scale multiplies it by
    # ||0.5 R_hat||_1 = 0.5. Mutation caught: keep_sprm_scale ignored (either way).
    hind, pol, _ = _table2_logprobs()
    printed = 0.7 * np.array([0.03885, 0, 0.20507, 0, 0.16737, 0, 0.58872])
    for keep, scale in ((False, 1.0), (True, 0.5)):
        reward, _ = segment_turn_rewards(
            0.5 * R_HAT, hind, pol, IDS, beta=BETA, alpha=0.3, keep_sprm_scale=keep
        )
        np.testing.assert_allclose(reward, scale * printed, atol=0.7 * 6e-5)


def test_keep_sprm_scale_uses_the_l1_norm_of_mixed_sign_scores():
    # R_hat (0.6, -0.2), z = 1 each (log r = 0): Eq. 7 gives (0.6, -0.2) / (0.6 + 0.2) = (0.75, -0.25); x ||R_hat||_1
    # = 0.8 -> (0.6, -0.2). Mutation caught: the signed sum 0.6 - 0.2 = 0.4 as the scale (would give (0.3, -0.1)).
    args = ([np.zeros(1), np.zeros(1)], [np.zeros(1), np.zeros(1)], np.array([0, 1]))
    kept, _ = segment_turn_rewards(np.array([0.6, -0.2]), *args, beta=0.3, alpha=0.0, keep_sprm_scale=True)
    np.testing.assert_allclose(kept, [0.6, -0.2])


def test_segment_reward_is_paid_on_the_last_turn_of_its_segment():
    # Mutation caught: paying a segment on its first turn (turn 1 instead of 2 for segment 1).
    hind, pol, _ = _table2_logprobs()
    reward, _ = segment_turn_rewards(R_HAT, hind, pol, IDS, beta=BETA, alpha=0.3, keep_sprm_scale=True)
    assert np.flatnonzero(reward).tolist() == [0, 2, 4, 6]


def test_importance_direction_hindsight_over_policy():
    # Two one-turn segments, R_hat (0.5, 0.5). Turn 0: hindsight log-prob -0.1, policy -0.4 -> log r = +0.3,
    # z = exp(0.3 / 0.3) = e; turn 1: log r = 0, z = 1. R_him = (0.5e, 0.5) / (0.5e + 0.5) = (0.7311, 0.2689),
    # x ||R_hat||_1 = 1. Mutation caught: log r = policy - hindsight (would give (0.2689, 0.7311)).
    reward, z = segment_turn_rewards(
        np.array([0.5, 0.5]),
        [np.array([-0.1]), np.array([-0.2])],
        [np.array([-0.4]), np.array([-0.2])],
        np.array([0, 1]),
        beta=0.3,
        alpha=0.0,
        keep_sprm_scale=True,
    )
    np.testing.assert_allclose(z, [math.e, 1.0])
    np.testing.assert_allclose(reward, [math.e / (math.e + 1), 1 / (math.e + 1)])


def test_keep_sprm_scale_keeps_a_failure_small():
    # R_hat (0.02, 0.01), z = 1 each: Eq. 7 as printed gives (2/3, 1/3), total 1 like a success; with the SPRM's
    # scale ||R_hat||_1 = 0.03 -> (0.02, 0.01).
    args = ([np.zeros(1), np.zeros(1)], [np.zeros(1), np.zeros(1)], np.array([0, 1]))
    literal, _ = segment_turn_rewards(
        np.array([0.02, 0.01]), *args, beta=0.3, alpha=0.0, keep_sprm_scale=False
    )
    kept, _ = segment_turn_rewards(np.array([0.02, 0.01]), *args, beta=0.3, alpha=0.0, keep_sprm_scale=True)
    np.testing.assert_allclose(literal, [2 / 3, 1 / 3])
    np.testing.assert_allclose(kept, [0.02, 0.01])


def test_unreadable_segment_pays_nothing():
    reward, _ = segment_turn_rewards(
        np.array([np.nan, 1.0]),
        [np.zeros(1), np.zeros(1)],
        [np.zeros(1), np.zeros(1)],
        np.array([0, 1]),
        beta=0.3,
        alpha=0.0,
        keep_sprm_scale=True,
    )
    assert reward.tolist() == [0.0, 1.0]


def test_misaligned_logprobs_are_refused():
    with pytest.raises(ValueError, match="same response tokens"):
        segment_turn_rewards(
            np.array([1.0]),
            [np.zeros(2)],
            [np.zeros(1)],
            np.array([0]),
            beta=0.3,
            alpha=0.3,
            keep_sprm_scale=True,
        )


# -- the driver's scatter: forward passes -> turns -> shaped rewards ---------------------------------------------


def test_write_segment_rewards_through_the_real_batches():
    """The path ``launch.driver.hisr_rewards.RewardModels.annotate`` takes, with the learner passes replaced by arrays: policy
    rows come from ``build_turn_batch`` of the trajectories, hindsight rows from ``hindsight_rows``; each is
    scattered back by its own index. A: two one-turn segments, R_hat (0.5, 0.5); its turn 0 has hindsight
    log-probs (-0.1, -0.1) vs policy (-0.4, -0.4): log r sums to 0.6 over 2 tokens, z = exp(0.6 / (0.3 * 2)) = e;
    turn 1 z = 1. R_him = (e, 1) / (e + 1) = (0.7311, 0.2689), x (1 - 0.3) = (0.5118, 0.1882). B: one segment,
    R_hat 0.8 (slot 2 NaN), z = 1, R_him = 1 x ||R_hat||_1 = 0.8 -> 0.56.
    Mutations caught: hindsight and policy swapped; rows scattered to the wrong trajectory."""
    a = make_traj([make_turn([5, 6]), make_turn([7])], tid="a")
    b = make_traj([make_turn([8])], tid="b")
    turns = build_turn_batch([a, b], max_len=32, pad_id=0)
    resp = turns.response_mask.numpy()
    policy = np.zeros(resp.shape, np.float32)
    for r, vals in enumerate([[-0.4, -0.4], [-0.2], [-0.3]]):
        policy[r][resp[r]] = vals
    rows, index = hindsight_rows([a, b], lambda text: [9, 9, 9], "I")
    rows, index = rows[::-1], index[::-1]  # any row order: each batch is scattered by its own index
    hturns = build_turn_batch(rows, max_len=32, pad_id=0)
    hresp = hturns.response_mask.numpy()
    hind = np.zeros(hresp.shape, np.float32)
    for r, vals in enumerate([[-0.3], [-0.2], [-0.1, -0.1]]):
        hind[r][hresp[r]] = vals
    hturns = dataclasses.replace(hturns, index=index)

    def score() -> dict[str, float]:
        return write_segment_rewards(
            [a, b],
            [np.array([0, 1]), np.array([0])],
            np.array([[0.5, 0.5], [0.8, np.nan]]),
            policy=(turns, policy),
            hindsight=(hturns, hind),
            beta=0.3,
            alpha=0.3,
            keep_sprm_scale=True,
        )

    stats = score()
    e = math.e
    assert [t.shaped["segment"] for t in a.turns] == pytest.approx(
        [0.7 * e / (e + 1), 0.7 / (e + 1)], rel=1e-6
    )
    assert b.turns[0].shaped["segment"] == pytest.approx(0.56, rel=1e-6)
    assert stats["hisr_segments"] == 1.5 and stats["hisr_sprm_total"] == pytest.approx(0.9)
    assert stats["hisr_sprm_auc"] != stats["hisr_sprm_auc"]  # neither trajectory won: no ranking to measure
    b.won = True  # B's predicted 0.8 against A's 1.0: the SPRM ranks the won one lower
    stats = score()
    assert stats["hisr_sprm_auc"] == 0.0


def test_reward_models_trained_on_one_outcome_are_flagged():
    """hisr_alfworld_cpu kept 1 of 8 π_ref trajectories, none won: the SPRM then learns a constant. Both one-outcome
    cases warn, naming the count; a mix does not."""
    assert one_outcome_warning(0, 1).startswith("all 1 kept trajectories lost")
    assert one_outcome_warning(3, 3).startswith("all 3 kept trajectories won")
    assert one_outcome_warning(1, 3) is None and one_outcome_warning(2, 3) is None
