"""HISR's learner side (``learners.algos.hisr``): the SPRM loss, the critic's loss, r_fuse and the GAE targets over
it, and ``launch.driver.hisr_rewards``'s annotation with the learner's passes stood in, against hand-computed values (the
arithmetic is in the comments). Each test names the mutation it is there to catch. The reward models' inputs and
Eq. 5-8: tests/unit/learners/test_reward_models.py; segmentation: tests/unit/reward/test_segments.py.
"""

import numpy as np
import pytest
import torch

from learners.algos import hisr
from learners.batch import build_turn_batch
from learners.prepare import minibatch
from learners.targets import CriticInputs
from tests.unit.hisr_turns import make_traj, make_turn

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
    t = make_turn([5], env_reward=1.0, shaped={"segment": 0.2, "action_grounding": 0.3})
    assert hisr.fused_rewards(make_traj([t])).tolist() == [0.5]
    with pytest.raises(ValueError, match="carry no 'segment' reward"):
        hisr.fused_rewards(make_traj([make_turn([5], shaped={"action_grounding": 0.3})]))


def test_outcome_coef_adds_c_times_the_outcome_to_the_last_turn_only():
    # Won: r = (0.2 + 0.3, 0.7 + 0.3 + 2 * 1.0) = (0.5, 3.0); lost: outcome 0, r unchanged; the env reward (10)
    # still never enters. Mutations caught: adding to every turn, or reading the env reward instead of R.
    turns = [
        make_turn([5], shaped={"segment": 0.2, "action_grounding": 0.3}),
        make_turn([6], shaped={"segment": 0.7, "action_grounding": 0.3}, env_reward=10.0, terminated=True),
    ]
    assert hisr.fused_rewards(make_traj(turns, won=True), 2.0).tolist() == pytest.approx([0.5, 3.0])
    assert hisr.fused_rewards(make_traj(turns, won=False), 2.0).tolist() == pytest.approx([0.5, 1.0])
    assert hisr.fused_rewards(make_traj(turns, won=True)).tolist() == pytest.approx([0.5, 1.0])


def test_gae_over_fused_rewards_golden():
    # r = (0.5, 1.0), V = (0.1, 0.2), terminated, gamma 0.99, lambda 0.95:
    # delta_1 = 1.0 - 0.2 = 0.8 (no bootstrap after termination); delta_0 = 0.5 + 0.99 * 0.2 - 0.1 = 0.598;
    # A_1 = 0.8, A_0 = 0.598 + 0.99 * 0.95 * 0.8 = 1.3504; returns A + V = (1.4504, 1.0).
    # Mutation caught: adding the env reward (10 on the last turn) into r.
    turns = [
        make_turn([5], shaped={"segment": 0.2, "action_grounding": 0.3}),
        make_turn([6], shaped={"segment": 0.7, "action_grounding": 0.3}, env_reward=10.0, terminated=True),
    ]
    traj = make_traj(turns)
    batch = build_turn_batch([traj], max_len=16, pad_id=0)
    cfg = hisr.Config(normalize_advantages=False)
    tg = hisr.compute_targets([traj], batch, np.array([[0.1], [0.2]], np.float32), cfg)
    resp = batch.response_mask.numpy()
    assert tg.token_adv[0][resp[0]].tolist() == pytest.approx([1.3504])
    assert tg.token_adv[1][resp[1]].tolist() == pytest.approx([0.8])
    np.testing.assert_allclose(tg.value_target[:, 0], [1.4504, 1.0], rtol=1e-6)
    # The same trajectory won, with outcome_coef 10: r_1 = 1.0 + 10 * 1 = 11.0, delta_1 = 11.0 - 0.2 = 10.8;
    # A_0 = 0.598 + 0.9405 * 10.8 = 10.7554. Mutation caught: compute_targets not passing cfg.outcome_coef.
    won = make_traj(turns, won=True)
    cfg = hisr.Config(normalize_advantages=False, outcome_coef=10.0)
    tg = hisr.compute_targets([won], batch, np.array([[0.1], [0.2]], np.float32), cfg)
    assert tg.token_adv[0][resp[0]].tolist() == pytest.approx([10.7554])
    assert tg.token_adv[1][resp[1]].tolist() == pytest.approx([10.8])


class _Passes:
    """Stands in for the learner group's forward passes (``launch.driver.hisr_rewards`` reads ``learner.logprobs`` and
    ``learner.values``): under the hindsight adapter a response token t has log-prob −0.1 (t − 4) (tokens 5, 6, 7:
    −0.1, −0.2, −0.3), under any other adapter −0.4; the SPRM scores the two segments (0.6, −0.2), any other critic
    5 per slot."""

    def logprobs(self, seqs, *, reference=False, adapter=None):
        from launch.driver.hisr_rewards import HINDSIGHT

        lp = (
            -0.1 * (seqs.input_ids - 4.0)
            if adapter == HINDSIGHT and not reference
            else np.full(seqs.input_ids.shape, -0.4)
        )
        return np.where(seqs.response_mask, lp, 0.0).astype(np.float32)

    def values(self, seqs, critic=None):
        from launch.driver.hisr_rewards import SPRM

        return np.tile([0.6, -0.2] if critic == SPRM else [5.0, 5.0], (len(seqs), 1)).astype(np.float32)


class _Tok:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [3, 3]}

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [9, 9, 9]


def test_annotate_reads_the_hindsight_adapter_the_sprm_and_alpha(tmp_path):
    """``launch.driver.hisr_rewards.RewardModels.annotate`` end to end on the pure side, the learner's passes stood in by
    ``_Passes``; one trajectory of two one-turn segments (``segmentation="turn"``), β 0.5 ≠ α 0.2.
    Turn 0 (tokens 5, 6): hindsight (−0.1, −0.2) vs policy (−0.4, −0.4): Σ log r = 0.5, z = exp(0.5 / (0.5 · 2)) =
    e^0.5; turn 1 (token 7): −0.3 vs −0.2: z = exp(−0.1 / 0.5) = e^−0.2. R̂ ⊙ z = (0.6 e^0.5, −0.2 e^−0.2) =
    (0.98923, −0.16375), L1 1.15298 -> R_him (0.85798, −0.14202); x ||R̂||₁ 0.8, x (1 − α) 0.8 -> (0.54911, −0.09089).
    Mutations caught: the cloze rows scored under the policy adapter (z = 1, e^−0.4: (0.52312, −0.11688)), α read
    from β (x 0.5: (0.34319, −0.05681)), R̂ from the PPO critic, keep_sprm_scale's signed sum (x 0.4)."""
    from launch.driver.hisr_rewards import RewardModels
    from learners.algos.registry import get_algo
    from reward.shaping import ShapingConstants
    from tests.unit.stage_inputs import stage_inputs

    acfg = hisr.Config(segmentation="turn", beta=0.5, shaping=ShapingConstants(grounding_alpha=0.2))
    passes = _Passes()
    models = RewardModels(stage_inputs(get_algo("hisr"), acfg, tmp_path, tokenizer=_Tok(), learner=passes))
    traj = make_traj([make_turn([5, 6]), make_turn([7])])
    turns = build_turn_batch([traj], max_len=32, pad_id=0)
    resp = turns.response_mask.numpy()
    policy = np.zeros(resp.shape, np.float32)
    for r, vals in enumerate([[-0.4, -0.4], [-0.2]]):
        policy[r][resp[r]] = vals
    models.annotate([traj], turns, policy)
    got = [t.shaped["segment"] for t in traj.turns]
    assert got == pytest.approx([0.54911, -0.09089], abs=1e-5)
