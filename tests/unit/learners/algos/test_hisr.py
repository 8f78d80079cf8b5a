"""HISR's pure half: segmentation, the reward models' inputs, Eq. 5-8 on turns, the SPRM loss and the GAE targets,
against hand-computed values (the arithmetic is in the comments). Each test names the mutation it is there to catch.
"""

import dataclasses
import math

import numpy as np
import pytest
import torch

from actors.trajectory import Decision, Trajectory, Turn
from learners.algos import hisr
from learners.batch import build_turn_batch
from learners.diagnostics import ranking_auc
from learners.prepare import minibatch
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
from learners.targets import CriticInputs
from reward.segments import (
    boundary_agreement,
    entropy_segments,
    ids_from_starts,
    subgoal_segments,
    turn_entropies,
    turn_segments,
)


def _turn(response, *, obs="o", text="Thought: t\nAction: a", action="a", switch=None, valid=True, **kw):
    return Turn(
        prompt_ids=[1, 2, 3],
        response_ids=response,
        logprobs=[-0.5] * len(response),
        decision=Decision(action=action, valid=valid, switch=switch),
        observation=obs,
        response_text=text,
        **kw,
    )


def _traj(turns, *, won=False, tid="x"):
    return Trajectory(tid, "g", "t", "synthetic", turns, task="do it", status="finished", won=won)


# -- segmentation ------------------------------------------------------------------------------------------------


def test_ids_from_starts_and_turn_segments():
    assert ids_from_starts(np.array([False, False, True, True, False])).tolist() == [0, 0, 1, 2, 2]
    assert turn_segments(3).tolist() == [0, 1, 2]


def test_subgoal_segments_follow_the_switches():
    trajs = _traj([_turn([5], switch=s) for s in (True, False, True, False, False)])
    assert subgoal_segments(trajs).tolist() == [0, 0, 1, 1, 1]


def test_entropy_segments_golden():
    # H = [1.0, 0.2, 0.3, 1.5, 0.4]: mean 0.68, var (0.1024 + 0.2304 + 0.1444 + 0.6724 + 0.0784) / 5 = 0.2456,
    # std 0.4956; jump 0.5 -> threshold 0.2478. Rises: 0.2->0.3 (+0.1, no), 0.3->1.5 (+1.2, yes). Falls never cut.
    # Mutation caught: |diff| instead of the rise (1.0->0.2 and 1.5->0.4 would cut too).
    h = np.array([1.0, 0.2, 0.3, 1.5, 0.4])
    assert entropy_segments(h, 0.5).tolist() == [0, 0, 0, 1, 1]
    assert entropy_segments(h, 3.0).tolist() == [0] * 5  # 1.2 < 3 * 0.4956
    assert entropy_segments(np.ones(4)).tolist() == [0] * 4  # no variation, no cut


def test_turn_entropies_scatter_rows_and_fill_turns_without_one():
    # rows (1, 0), (0, 1), (1, 2) -> traj 0: [nan -> 0.0, 0.5]; traj 1: [0.7, nan -> 0.7, 0.9]
    out = turn_entropies([(1, 0), (0, 1), (1, 2)], np.array([0.7, 0.5, 0.9]), [2, 3])
    assert [h.tolist() for h in out] == [[0.0, 0.5], [0.7, 0.7, 0.9]]


def test_boundary_agreement_counts_boundaries_after_the_first_turn():
    # boundaries (starts after turn 0): predicted {2, 3}, reference {2, 4} -> tp 1, fp 1, fn 1
    a = boundary_agreement([np.array([0, 0, 1, 2, 2])], [np.array([0, 0, 1, 1, 2])])
    assert (a.true_pos, a.false_pos, a.false_neg) == (1, 1, 1)
    assert a.precision == a.recall == a.f1 == 0.5
    with pytest.raises(ValueError, match="cannot be compared"):
        boundary_agreement([np.array([0])], [np.array([0, 1])])


# -- collected-trajectory filter and outcome ---------------------------------------------------------------------


def test_filter_drops_wrong_format_and_triple_repeats():
    ok = _traj([_turn([5], action="a"), _turn([5], action="a"), _turn([5], action="b")])
    bad_format = _traj([_turn([5]), _turn([5], valid=False)])
    repeats = _traj([_turn([5], action="a") for _ in range(3)])
    assert keep_for_reward_models(ok)
    assert not keep_for_reward_models(bad_format)
    assert not keep_for_reward_models(repeats)


def test_outcome_is_success_or_the_webshop_score():
    assert outcome(_traj([_turn([5])], won=True)) == 1.0
    shop = Trajectory("w", "g", "t", "webshop", [_turn([5])], score=0.75)
    assert outcome(shop) == 0.75


# -- SPRM inputs -------------------------------------------------------------------------------------------------


def _three_turns():
    return _traj([_turn([5, 6]), _turn([7]), _turn([8, 9, 10])], won=True)


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
    short = _traj([_turn([5])])
    b = sprm_sequences(
        [_three_turns(), short], [np.array([0, 1, 2]), np.array([0])], lambda s: [1], max_len=64, pad_id=0
    )
    assert b.segment_valid.tolist() == [[True, True, True], [True, False, False]]
    assert b.seqs.attention_mask[1].sum() == 2 and b.outcome.tolist() == [1.0, 0.0]


# -- hindsight cloze ---------------------------------------------------------------------------------------------


def test_hindsight_prompt_masks_exactly_turn_k_and_states_the_outcome():
    traj = _traj(
        [_turn([5], obs="o0", text="r0"), _turn([6], obs="o1", text="r1"), _turn([7], obs="o2", text="r2")],
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
    traj = _traj([_turn([5, 6]), _turn([]), _turn([7])])
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


# -- SPRM loss (Eq. 3) ------------------------------------------------------------------------------------------


def test_sprm_value_loss_golden():
    # row 0: R = 1, segments 0.2 + 0.3 = 0.5 -> (1 - 0.5)^2 = 0.25; row 1: R = 0, segment 0.5 -> 0.25.
    # 3 segments in the mini-batch: (0.25 + 0.25) / 3 = 0.16667. Mutation caught: summing the padded slot (0.4).
    values = torch.tensor([[0.2, 0.3, 0.4], [0.5, 0.4, 0.4]])
    valid = np.array([[True, True, False], [True, False, False]])
    weight = valid / valid.sum()
    inputs = CriticInputs(
        value_target=torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        old_values=torch.zeros(2, 3),
        value_weight=torch.as_tensor(weight, dtype=torch.float32),
    )
    loss, m = hisr.sprm_value_loss(values, inputs, hisr.Config())
    assert loss.item() == pytest.approx(0.5 / 3) and m["sprm_loss"] == pytest.approx(0.5 / 3)


def test_sprm_weights_come_from_minibatch():
    # the driver's SPRM batch goes through learners.prepare.minibatch: value_weight = valid / 3
    from learners.batch import LearnerBatch, Sequences

    valid = np.array([[True, True], [True, False]])
    seqs = Sequences(
        np.zeros((2, 4), np.int64),
        np.ones((2, 4), bool),
        np.zeros((2, 4), bool),
        np.zeros((2, 2), np.int64),
        np.zeros(2, np.int64),
    )
    b = LearnerBatch(
        seqs,
        np.zeros((2, 4), np.float32),
        None,
        np.zeros((2, 4), np.float32),
        np.zeros((2, 4), bool),
        np.ones((2, 2), np.float32),
        valid,
        np.zeros((2, 2), np.float32),
    )
    mb = minibatch(b, np.arange(2), "token-mean")
    np.testing.assert_allclose(mb.value_weight, valid / 3)


def test_value_loss_is_plain_regression_unless_value_clip_is_set():
    """V 0.5 from V_old 0, return 1, weight 1. Default (the paper, no clip): ½ (0.5 − 1)² = 0.125. value_clip 0.2:
    V_clip = 0 + 0.2, max((0.5 − 1)², (0.2 − 1)²) = 0.64 -> 0.32. Catches: the default clipped again, the option
    ignored. PPO keeps its clip (0.2)."""
    from learners.algos import ppo

    inputs = CriticInputs(
        value_target=torch.tensor([[1.0]]), old_values=torch.zeros(1, 1), value_weight=torch.ones(1, 1)
    )
    values = torch.tensor([[0.5]])
    assert hisr.Config().value_clip is None and ppo.Config().value_clip == 0.2
    assert float(hisr.value_loss(values, inputs, hisr.Config())[0]) == pytest.approx(0.125)
    assert float(hisr.value_loss(values, inputs, hisr.Config(value_clip=0.2))[0]) == pytest.approx(0.32)


# -- RL targets --------------------------------------------------------------------------------------------------


def test_fused_rewards_ignore_the_env_reward_and_need_the_segment_term():
    t = _turn([5], env_reward=1.0, shaped={"segment": 0.2, "action_grounding": 0.3})
    assert hisr.fused_rewards(_traj([t])).tolist() == [0.5]
    with pytest.raises(ValueError, match="carry no 'segment' reward"):
        hisr.fused_rewards(_traj([_turn([5], shaped={"action_grounding": 0.3})]))


def test_outcome_coef_adds_c_times_the_outcome_to_the_last_turn_only():
    # Won: r = (0.2 + 0.3, 0.7 + 0.3 + 2 * 1.0) = (0.5, 3.0); lost: outcome 0, r unchanged; the env reward (10)
    # still never enters. Mutations caught: adding to every turn, or reading the env reward instead of R.
    turns = [
        _turn([5], shaped={"segment": 0.2, "action_grounding": 0.3}),
        _turn([6], shaped={"segment": 0.7, "action_grounding": 0.3}, env_reward=10.0, terminated=True),
    ]
    assert hisr.fused_rewards(_traj(turns, won=True), 2.0).tolist() == pytest.approx([0.5, 3.0])
    assert hisr.fused_rewards(_traj(turns, won=False), 2.0).tolist() == pytest.approx([0.5, 1.0])
    assert hisr.fused_rewards(_traj(turns, won=True)).tolist() == pytest.approx([0.5, 1.0])


def test_gae_over_fused_rewards_golden():
    # r = (0.5, 1.0), V = (0.1, 0.2), terminated, gamma 0.99, lambda 0.95:
    # delta_1 = 1.0 - 0.2 = 0.8 (no bootstrap after termination); delta_0 = 0.5 + 0.99 * 0.2 - 0.1 = 0.598;
    # A_1 = 0.8, A_0 = 0.598 + 0.99 * 0.95 * 0.8 = 1.3504; returns A + V = (1.4504, 1.0).
    # Mutation caught: adding the env reward (10 on the last turn) into r.
    turns = [
        _turn([5], shaped={"segment": 0.2, "action_grounding": 0.3}),
        _turn([6], shaped={"segment": 0.7, "action_grounding": 0.3}, env_reward=10.0, terminated=True),
    ]
    traj = _traj(turns)
    batch = build_turn_batch([traj], max_len=16, pad_id=0)
    cfg = hisr.Config(normalize_advantages=False)
    tg = hisr.compute_targets([traj], batch, np.array([[0.1], [0.2]], np.float32), cfg)
    resp = batch.response_mask.numpy()
    assert tg.token_adv[0][resp[0]].tolist() == pytest.approx([1.3504])
    assert tg.token_adv[1][resp[1]].tolist() == pytest.approx([0.8])
    np.testing.assert_allclose(tg.value_target[:, 0], [1.4504, 1.0], rtol=1e-6)
    # The same trajectory won, with outcome_coef 10: r_1 = 1.0 + 10 * 1 = 11.0, delta_1 = 11.0 - 0.2 = 10.8;
    # A_0 = 0.598 + 0.9405 * 10.8 = 10.7554. Mutation caught: compute_targets not passing cfg.outcome_coef.
    won = _traj(turns, won=True)
    cfg = hisr.Config(normalize_advantages=False, outcome_coef=10.0)
    tg = hisr.compute_targets([won], batch, np.array([[0.1], [0.2]], np.float32), cfg)
    assert tg.token_adv[0][resp[0]].tolist() == pytest.approx([10.7554])
    assert tg.token_adv[1][resp[1]].tolist() == pytest.approx([10.8])


# -- the driver's scatter: forward passes -> turns -> shaped rewards ---------------------------------------------


def test_write_segment_rewards_through_the_real_batches():
    """The path ``launch.hisr.RewardModels.annotate`` takes, with the learner passes replaced by arrays: policy
    rows come from ``build_turn_batch`` of the trajectories, hindsight rows from ``hindsight_rows``; each is
    scattered back by its own index. A: two one-turn segments, R_hat (0.5, 0.5); its turn 0 has hindsight
    log-probs (-0.1, -0.1) vs policy (-0.4, -0.4): log r sums to 0.6 over 2 tokens, z = exp(0.6 / (0.3 * 2)) = e;
    turn 1 z = 1. R_him = (e, 1) / (e + 1) = (0.7311, 0.2689), x (1 - 0.3) = (0.5118, 0.1882). B: one segment,
    R_hat 0.8 (slot 2 NaN), z = 1, R_him = 1 x ||R_hat||_1 = 0.8 -> 0.56.
    Mutations caught: hindsight and policy swapped; rows scattered to the wrong trajectory."""
    a = _traj([_turn([5, 6]), _turn([7])], tid="a")
    b = _traj([_turn([8])], tid="b")
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


class _Passes:
    """Stands in for the learner group's forward passes (``launch.hisr`` reads ``learner.logprobs`` and
    ``learner.values``): under the hindsight adapter a response token t has log-prob −0.1 (t − 4) (tokens 5, 6, 7:
    −0.1, −0.2, −0.3), under any other adapter −0.4; the SPRM scores the two segments (0.6, −0.2), any other critic
    5 per slot."""

    def logprobs(self, seqs, *, reference=False, adapter=None):
        from launch.hisr import HINDSIGHT

        lp = (
            -0.1 * (seqs.input_ids - 4.0)
            if adapter == HINDSIGHT and not reference
            else np.full(seqs.input_ids.shape, -0.4)
        )
        return np.where(seqs.response_mask, lp, 0.0).astype(np.float32)

    def values(self, seqs, critic=None):
        from launch.hisr import SPRM

        return np.tile([0.6, -0.2] if critic == SPRM else [5.0, 5.0], (len(seqs), 1)).astype(np.float32)


class _Tok:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3, 3]}

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [9, 9, 9]


def test_annotate_reads_the_hindsight_adapter_the_sprm_and_alpha(tmp_path):
    """``launch.hisr.RewardModels.annotate`` end to end on the pure side, the learner's passes stood in by
    ``_Passes``; one trajectory of two one-turn segments (``segmentation="turn"``), β 0.5 ≠ α 0.2.
    Turn 0 (tokens 5, 6): hindsight (−0.1, −0.2) vs policy (−0.4, −0.4): Σ log r = 0.5, z = exp(0.5 / (0.5 · 2)) =
    e^0.5; turn 1 (token 7): −0.3 vs −0.2: z = exp(−0.1 / 0.5) = e^−0.2. R̂ ⊙ z = (0.6 e^0.5, −0.2 e^−0.2) =
    (0.98923, −0.16375), L1 1.15298 -> R_him (0.85798, −0.14202); x ||R̂||₁ 0.8, x (1 − α) 0.8 -> (0.54911, −0.09089).
    Mutations caught: the cloze rows scored under the policy adapter (z = 1, e^−0.4: (0.52312, −0.11688)), α read
    from β (x 0.5: (0.34319, −0.05681)), R̂ from the PPO critic, keep_sprm_scale's signed sum (x 0.4)."""
    from launch.hisr import RewardModels
    from reward.shaping import ShapingConstants

    acfg = hisr.Config(segmentation="turn", beta=0.5, shaping=ShapingConstants(grounding_alpha=0.2))
    passes = _Passes()
    models = RewardModels(
        acfg,
        tmp_path,
        _Tok(),
        agent="react",
        env_name="synthetic",
        max_seq_len=64,
        pad_id=0,
        seed=0,
        learner=lambda: passes,
        collect=lambda *a, **k: [],
        train_ids=[],
        log=lambda row: None,
    )
    traj = _traj([_turn([5, 6]), _turn([7])])
    turns = build_turn_batch([traj], max_len=32, pad_id=0)
    resp = turns.response_mask.numpy()
    policy = np.zeros(resp.shape, np.float32)
    for r, vals in enumerate([[-0.4, -0.4], [-0.2]]):
        policy[r][resp[r]] = vals
    models.annotate([traj], turns, policy)
    got = [t.shaped["segment"] for t in traj.turns]
    assert got == pytest.approx([0.54911, -0.09089], abs=1e-5)


def test_ranking_auc_counts_pairs_and_half_ties():
    """Won scores (3, 1), lost (2, 1): pairs 3>2, 3>1, 1<2, 1=1 -> (1 + 1 + 0 + 0.5) / 4 = 0.625. Reversing the
    labels gives 1 - 0.625 (ties stay 1/2)."""
    scores = np.array([3.0, 2.0, 1.0, 1.0])
    won = np.array([True, False, True, False])
    assert ranking_auc(scores, won) == 0.625
    assert ranking_auc(scores, ~won) == 0.375
    assert ranking_auc(scores, np.ones(4, bool)) != ranking_auc(scores, np.ones(4, bool))


def test_reward_models_trained_on_one_outcome_are_flagged():
    """hisr_alfworld_cpu kept 1 of 8 π_ref trajectories, none won: the SPRM then learns a constant. Both one-outcome
    cases warn, naming the count; a mix does not."""
    assert one_outcome_warning(0, 1).startswith("all 1 kept trajectories lost")
    assert one_outcome_warning(3, 3).startswith("all 3 kept trajectories won")
    assert one_outcome_warning(1, 3) is None and one_outcome_warning(2, 3) is None
