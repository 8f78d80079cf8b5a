"""The pure half of an update (``learners.prepare``): shaping → padded turns → targets → ``LearnerBatch`` → the
mini-batch weights, fed with stand-in forward-pass outputs (no Ray). Hand-computed values in the comments; the
trajectories and the HiPER reference case are ``tests/unit/glue_turns``' (prompt positions 0-2, response 3-9)."""

import math

import numpy as np
import pytest

from actors.trajectory import Decision
from learners.algos import grpo, hiper, hipif, ppo, rloo, sft
from learners.algos.registry import get_algo
from learners.prepare import learner_batch, minibatch, shaped_turns
from learners.targets import sequences
from tests.unit.glue_turns import (
    A_HIGH,
    A_LOW,
    HIPER_REWARDS,
    HIPER_SWITCHES,
    HIPER_VALUES,
    HIPIF_ADV,
    RESP,
    SW,
    L,
    glue_traj,
    hiper_expected,
)


def _prepare(name, trajs, cfg, *, learner_lp=None, values=None, ref=True, success_reward=1.0, **kw):
    algo = get_algo(name)
    turns = shaped_turns(trajs, cfg, success_reward=success_reward, max_len=64, pad_id=0)
    seqs = sequences(turns, algo.value_slots)
    lp = turns.old_logprobs.numpy() if learner_lp is None else learner_lp
    ref_lp = lp - 0.1 if ref else None
    return turns, learner_batch(algo, cfg, trajs, turns, seqs, lp, ref_lp, values, **kw)


def _hiper_case(**kw):
    traj = glue_traj("a", HIPER_REWARDS, HIPER_SWITCHES)
    # reward_terms=() keeps the rewards of the golden case (no KEEP / format shaping on top); eq10 reads beta; the
    # golden A_low is Eq. 7's segment-end bootstrap (low_bootstrap="v_high")
    cfg = hiper.Config(normalize_advantages=False, reward_terms=(), switch_adv="eq10", low_bootstrap="v_high")
    return _prepare("hiper", [traj], cfg, values=HIPER_VALUES, **kw)


def test_targets_read_the_learners_logprobs_not_the_engines():
    """The engine sampled each <switch> span with P = 0.8; the learner's recomputation says 0.5. beta_t must come
    from the learner's (one set of log-probs per row): beta_1 (KEEP) = 1 - 0.5 = 0.5, beta_2 (SWITCH) = 0.5,
    so A_switch = [0, (0 - 0.5)(0.6 - 0.3), (1 - 0.5)(0.2 - 0.05)] = [0, -0.15, 0.075] (with the engine's it would be
    the reference case's [0, -0.06, 0.03]); A_high and A_low do not depend on beta. The ratio's log π_old is the learner's too."""
    turns, _ = _hiper_case()
    learner_lp = turns.old_logprobs.numpy().copy()
    learner_lp[:, SW] = math.log(0.5) / 2
    _, (batch, _stats) = _hiper_case(learner_lp=learner_lp)
    adv, mask = hiper_expected([0.0, -0.15, 0.075], A_HIGH, A_LOW, [True, False, True])
    np.testing.assert_allclose(batch.token_adv, adv, atol=1e-5)
    assert (batch.loss_mask == mask).all()
    np.testing.assert_array_equal(batch.old_logprobs, learner_lp)


def test_logprob_gap_is_engine_vs_learner_on_response_tokens():
    """Engine: switch tokens log(0.8)/2 = -0.111572, the other five -0.5. Learner: log(0.5)/2 = -0.346574 and -0.7.
    Per row (2 * 0.235002 + 5 * 0.2) / 7 = 0.210000; prompt and padding do not count."""
    turns, _ = _hiper_case()
    learner_lp = turns.old_logprobs.numpy().copy()
    learner_lp[:, SW] = math.log(0.5) / 2
    learner_lp[:, SW.stop : RESP.stop] = -0.7
    learner_lp[:, : RESP.start] = 5.0  # prompt positions: ignored
    _, (_batch, stats) = _hiper_case(learner_lp=learner_lp)
    assert stats["logprob_gap"] == pytest.approx((2 * 0.2350018 + 5 * 0.2) / 7, abs=1e-6)


def test_behaviour_weights_are_the_learners_over_the_engines_on_response_tokens_only():
    """``learner.behaviour_is_cap`` 2: switch tokens engine log(0.8)/2, learner log(0.5)/2 → w = sqrt(0.5 / 0.8) =
    0.7905694 (swapped: 1.2649111); the other five response tokens learner = engine + log 3 → 3, capped to 2;
    prompt and padding 1 (the learner's 5.0 there is ignored). Off (cap 0): no weights."""
    turns, _ = _hiper_case()
    learner_lp = turns.old_logprobs.numpy().copy()
    learner_lp[:, SW] = math.log(0.5) / 2
    learner_lp[:, SW.stop : RESP.stop] += math.log(3.0)
    learner_lp[:, : RESP.start] = 5.0
    _, (batch, stats) = _hiper_case(learner_lp=learner_lp, behaviour_is_cap=2.0)
    expected = np.ones(batch.old_logprobs.shape, np.float32)
    expected[:, SW] = math.sqrt(0.5 / 0.8)
    expected[:, SW.stop : RESP.stop] = 2.0
    np.testing.assert_allclose(batch.behaviour_weight, expected, atol=1e-6)
    assert stats["is_weight_capped"] == pytest.approx(5 / 7, abs=1e-6)
    _, (off, off_stats) = _hiper_case(learner_lp=learner_lp)
    assert off.behaviour_weight is None and "is_weight_mean" not in off_stats


def test_behaviour_cloning_reports_no_gap():
    _, (_batch, stats) = _prepare("sft", [glue_traj("a", [0.0, 1.0])], sft.Config(), ref=False)
    assert "logprob_gap" not in stats


def test_negative_control_flips_every_advantage_and_nothing_else():
    """``learner.advantage_scale=-1``: token_adv → −token_adv; 0: every advantage 0; masks, log-probs and critic
    targets unchanged."""
    _, (pos, _) = _hiper_case()
    _, (neg, _) = _hiper_case(advantage_scale=-1.0)
    _, (zero, _) = _hiper_case(advantage_scale=0.0)
    np.testing.assert_array_equal(neg.token_adv, -pos.token_adv)
    assert not zero.token_adv.any()
    assert pos.token_adv[pos.loss_mask].any()
    for name in ("loss_mask", "old_logprobs", "ref_logprobs", "value_target", "value_valid", "old_values"):
        np.testing.assert_array_equal(getattr(neg, name), getattr(pos, name))
        np.testing.assert_array_equal(getattr(zero, name), getattr(pos, name))


def test_critic_fields_come_from_the_values_and_the_targets():
    """PPO, one trajectory r = [0, 1], V = [0.5, 0.8], terminated, gamma 0.99, lambda 0.95 (no whitening):
    delta_1 = 1 - 0.8 = 0.2, delta_0 = 0.99 * 0.8 - 0.5 = 0.292, A_0 = 0.292 + 0.9405 * 0.2 = 0.4801;
    returns y = A + V = [0.9801, 1.0]. old_values are the values the targets were computed with."""
    values = np.array([[0.5], [0.8]], np.float32)
    cfg = ppo.Config(normalize_advantages=False, reward_terms=())
    _, (batch, _) = _prepare("ppo", [glue_traj("a", [0.0, 1.0])], cfg, values=values)
    np.testing.assert_allclose(batch.value_target[:, 0], [0.9801, 1.0], atol=1e-6)
    np.testing.assert_array_equal(batch.old_values, values)
    assert batch.value_valid.all()
    np.testing.assert_allclose(
        batch.token_adv[:, RESP], np.array([[0.4801], [0.2]]) * np.ones((1, 7)), atol=1e-6
    )
    assert batch.seqs.value_pos[:, 0].tolist() == [2, 2]  # V(s_t) at the last prompt token


def test_shaping_uses_the_algorithms_own_constants():
    """A malformed turn costs ``algo.shaping.format_penalty``: with 0.25, rewards [0 - 0.25, 1] and GRPO's episode
    return 0.75 (against a well-formed sibling's 1.0: A = (0.75 - 0.875) / std, std = 0.1767767 → -0.7071068). Both
    episodes have the same outcome, so GRPO's default would skip the group: ``equal_outcome_groups="keep"``."""
    bad = glue_traj("bad", [0.0, 1.0])
    bad.turns[0].decision = Decision(action="", valid=False)
    good = glue_traj("good", [0.0, 1.0])
    cfg = grpo.Config(
        shaping=grpo.Config().shaping.__class__(format_penalty=0.25), kl_coef=0.0, equal_outcome_groups="keep"
    )
    turns, (batch, _) = _prepare("grpo", [bad, good], cfg, ref=False)
    assert [t.reward for t in bad.turns] == pytest.approx([-0.25, 1.0])
    assert bad.episode_return == pytest.approx(0.75)
    rows = [r for r, (i, _j) in enumerate(turns.index) if i == 0]
    np.testing.assert_allclose(batch.token_adv[rows][:, RESP], -0.7071068, atol=1e-5)


def test_missing_forward_pass_outputs_are_errors():
    algo = get_algo("hiper")
    traj = glue_traj("a", HIPER_REWARDS, HIPER_SWITCHES)
    turns = shaped_turns([traj], hiper.Config(), success_reward=1.0, max_len=64, pad_id=0)
    seqs = sequences(turns, algo.value_slots)
    lp = turns.old_logprobs.numpy()
    with pytest.raises(ValueError, match="reference policy"):
        learner_batch(algo, hiper.Config(), [traj], turns, seqs, lp, None, HIPER_VALUES)
    with pytest.raises(ValueError, match="critic values"):
        learner_batch(algo, hiper.Config(), [traj], turns, seqs, lp, lp, None)
    with pytest.raises(ValueError, match="do not fit"):
        learner_batch(algo, hiper.Config(), [traj], turns, seqs, lp[:, :-1], lp, HIPER_VALUES)
    # no KL term: no reference pass needed
    learner_batch(algo, hiper.Config(kl_coef=0.0), [traj], turns, seqs, lp, None, HIPER_VALUES)


def test_minibatch_weights():
    """Rows 2 and 0 of the HiPER batch: token-mean weight 1 / (loss tokens in the mini-batch) on loss tokens;
    value_weight = valid / count. Row 2 (SWITCH turn) trains 7 tokens, row 0 (turn 0: its switch tokens carry
    A_switch = 0 but are in the loss mask) 7: 14 tokens → 1/14. Valid slots: row 2 [V_high, -, V_low, V_sw] and
    row 0 [V_high, -, V_low, -] → 5 → 0.2 each. value_head is per slot and is not sliced."""
    _, (batch, _) = _hiper_case()
    mb = minibatch(batch, np.array([2, 0]), "token-mean")
    assert len(mb) == 2
    np.testing.assert_array_equal(mb.token_adv, batch.token_adv[[2, 0]])
    np.testing.assert_allclose(mb.loss_weight, mb.loss_mask / 14.0, atol=1e-7)
    np.testing.assert_allclose(mb.value_weight, [[0.2, 0, 0.2, 0.2], [0.2, 0, 0.2, 0]])
    assert mb.seqs.value_head.tolist() == [0, 1, 1, 2]
    assert mb.seqs.input_ids.shape == (2, L)


def test_squared_value_loss_golden():
    """Σ w · ½ (V − y)²: V = [1, 2], y = [0.5, 2.5], w = [0.5, 0.5] → ½ (0.25 · 0.5 + 0.25 · 0.5) = 0.125.
    Clipped (PPO's value_clip 0.2): V = 0.5 from V_old = 0, y = 1 → V_clip = 0.2, max(0.25, 0.64) → ½ · 0.64 = 0.32.
    A NaN target on a slot of weight 0 does not reach the loss."""
    import torch

    from learners.targets import CriticInputs, squared_value_loss

    def inputs(target, old, weight):
        return CriticInputs(torch.tensor([target]), torch.tensor([old]), torch.tensor([weight]))

    loss, m = squared_value_loss(torch.tensor([[1.0, 2.0]]), inputs([0.5, 2.5], [0.0, 0.0], [0.5, 0.5]))
    assert float(loss) == pytest.approx(0.125) and m["value_loss"] == pytest.approx(0.125)
    clipped, _ = squared_value_loss(torch.tensor([[0.5]]), inputs([1.0], [0.0], [1.0]), clip=0.2)
    assert float(clipped) == pytest.approx(0.32)
    assert float(
        ppo.value_loss(torch.tensor([[0.5]]), inputs([1.0], [0.0], [1.0]), ppo.Config())[0]
    ) == pytest.approx(0.32)
    assert float(
        hiper.value_loss(torch.tensor([[0.5]]), inputs([1.0], [0.0], [1.0]), hiper.Config())[0]
    ) == pytest.approx(0.125)
    nan_slot, _ = squared_value_loss(
        torch.tensor([[1.0, 2.0]]), inputs([0.5, float("nan")], [0.0, 0.0], [1.0, 0.0])
    )
    assert float(nan_slot) == pytest.approx(0.125)


def test_hipif_shaping_pass_writes_the_process_rewards_the_advantage_reads():
    """The driver's own shaping pass with HIPIF's default terms (Eq. 7) produces glue_turns' HIPIF case: the winner's
    turn 1 broke the format (r^fmt -0.1), the loser's first subgoal names nothing in its context (r^gr -0.1, "unicorn"
    is in no observation, task or admissible list); every other subgoal names the mug in the observation. Same
    expected advantages as HIPIF_ADV; with the terms dropped the penalised steps score like the others.
    HIPIF pays its outcome at its own scale (``success_reward`` 10, App. B) whatever the env pays, so that is the unit
    of its penalties: 0.01 R = 0.1 in an env paying 1 (VirtualHome) as in one paying 10 (ALFWorld)."""

    def case():
        a = glue_traj("a", [0.0, 0.0, 10.0], gid="g")
        b = glue_traj("b", [0.0, 0.0], gid="g")
        c = glue_traj("c", [10.0], gid="h")
        for traj in (a, b, c):
            traj.won = traj.traj_id in ("a", "c")
            for turn in traj.turns:
                turn.observation = "You see a mug."
                turn.decision = Decision(action="take mug", valid=True, switch=True, subgoal="take the mug")
        a.turns[1].decision = Decision(action="take mug", valid=False, switch=True, subgoal="take the mug")
        b.turns[0].decision = Decision(action="look", valid=True, switch=True, subgoal="find the unicorn")
        return [a, b, c]

    trajs = case()
    _, (batch, _) = _prepare("hipif", trajs, hipif.Config(), success_reward=1.0)
    assert (
        trajs[0].turns[1].shaped["format"] == -0.1 and trajs[1].turns[0].shaped["ungrounded_subgoal"] == -0.1
    )
    assert sum(v for t in trajs for turn in t.turns for v in turn.shaped.values()) == pytest.approx(-0.2)
    np.testing.assert_allclose(batch.token_adv[:, RESP][:, 0], HIPIF_ADV, atol=1e-5)
    _, (plain, _) = _prepare("hipif", case(), hipif.Config(reward_terms=()), success_reward=1.0)
    assert plain.token_adv[1, RESP][0] == pytest.approx(plain.token_adv[0, RESP][0])


def test_micro_batches_group_rows_by_length_and_cut_each_to_its_longest():
    from learners.batch import micro_batches, row_lengths

    # right-padded rows of lengths 3, 5, 1, (none), 4 in a width-6 batch
    attn = np.zeros((5, 6), bool)
    for row, n in enumerate([3, 5, 1, 0, 4]):
        attn[row, :n] = True
    assert row_lengths(attn).tolist() == [
        3,
        5,
        1,
        1,
        4,
    ]  # a row without tokens counts 1 (a forward needs one)
    # longest first (stable among equals): 1 (5), 4 (4), 0 (3), 2 (1), 3 (1); 5 rows in ceil(5/2) = 3 chunks
    got = [(rows.tolist(), width) for rows, width in micro_batches(attn, 2)]
    assert got == [([1, 4], 5), ([0, 2], 3), ([3], 1)]
    assert micro_batches(attn[:0], 2) == []


def test_critic_micro_batches_reach_only_as_far_as_the_value_slots_read():
    from learners.batch import Sequences, micro_batches, value_reach

    # rows of lengths 6, 5, 4, 3; two value slots read at (2, 4), (1, 1), (3, 3), (0, 2)
    attn = np.zeros((4, 6), bool)
    for row, n in enumerate([6, 5, 4, 3]):
        attn[row, :n] = True
    pos = np.array([[2, 4], [1, 1], [3, 3], [0, 2]])
    seqs = Sequences(
        input_ids=np.zeros((4, 6), np.int64),
        attention_mask=attn,
        response_mask=np.zeros((4, 6), bool),
        value_pos=pos,
        value_head=np.array([0, 1]),
    )
    # reach = min(length, max slot + 1): min(6, 5), min(5, 2), min(4, 4), min(3, 3)
    assert value_reach(seqs).tolist() == [5, 2, 4, 3]
    # longest reach first: 0 (5), 2 (4) | 3 (3), 1 (2): the policy's own micro-batches would be [0, 1] (6), [2, 3] (4)
    got = [(rows.tolist(), width) for rows, width in micro_batches(attn, 2, value_reach(seqs))]
    assert got == [([0, 2], 5), ([3, 1], 3)]
    # no value slots (a critic-free algorithm): the rows' own lengths
    none = Sequences(
        seqs.input_ids, attn, seqs.response_mask, np.zeros((4, 0), np.int64), np.zeros(0, np.int64)
    )
    assert value_reach(none).tolist() == [6, 5, 4, 3]


def test_narrowing_a_learner_batch_cuts_every_per_token_field_and_keeps_the_rest():
    from learners.batch import LearnerBatch, Sequences

    rng = np.random.default_rng(0)
    resp = np.zeros((3, 8), bool)
    resp[:, 2:7] = True
    batch = LearnerBatch(
        seqs=Sequences(
            rng.integers(0, 50, (3, 8)), np.ones((3, 8), bool), resp, np.full((3, 2), 1), np.zeros(2)
        ),
        old_logprobs=rng.normal(size=(3, 8)),
        ref_logprobs=None,
        token_adv=rng.normal(size=(3, 8)),
        loss_mask=resp,
        value_target=rng.normal(size=(3, 2)),
        value_valid=np.ones((3, 2), bool),
        old_values=np.zeros((3, 2)),
        behaviour_weight=rng.uniform(0.5, 2.0, size=(3, 8)),
    )
    batch = minibatch(batch, np.arange(3), "token-mean")
    cut = batch.narrow(5)
    for name in ("old_logprobs", "token_adv", "loss_mask", "loss_weight", "behaviour_weight"):
        assert getattr(cut, name).shape == (3, 5)
        assert np.array_equal(getattr(cut, name), getattr(batch, name)[:, :5])
    for name in ("input_ids", "attention_mask", "response_mask"):
        assert np.array_equal(getattr(cut.seqs, name), getattr(batch.seqs, name)[:, :5])
    # positions and per-row fields are untouched
    assert np.array_equal(cut.seqs.value_pos, batch.seqs.value_pos)
    assert np.array_equal(cut.value_weight, batch.value_weight)
    assert np.array_equal(cut.value_target, batch.value_target)


def test_episode_mean_gives_a_long_lost_episode_the_weight_of_a_short_won_one():
    """Episode a: 1 turn (7 response tokens), episode b: 3 turns (21 tokens), one mini-batch of all 4 rows. Under
    token-mean each token weighs 1/28, so b's tokens carry 21/28 = 0.75 of the loss; under episode-mean each
    episode carries 1/2: a's row 1/2 (1/14 a token), b's rows 1/6 each (1/42 a token). Rows from another batch
    order (a mini-batch of b's first two rows only) still sum to 1."""
    trajs = [glue_traj("a", [1.0]), glue_traj("b", [0.0, 0.0, 0.0])]
    cfg = rloo.Config(agg="episode-mean")
    _, (batch, _) = _prepare("rloo", trajs, cfg)
    np.testing.assert_allclose(batch.episode_weight, [1 / 7, 1 / 21, 1 / 21, 1 / 21], rtol=1e-6)
    mb = minibatch(batch, np.arange(4), "episode-mean")
    np.testing.assert_allclose(mb.loss_weight[0].sum(), 0.5, rtol=1e-6)
    np.testing.assert_allclose(mb.loss_weight[1:].sum(), 0.5, rtol=1e-6)
    tm = minibatch(batch, np.arange(4), "token-mean")
    np.testing.assert_allclose(tm.loss_weight[1:].sum(), 0.75, rtol=1e-6)
    part = minibatch(batch, np.array([1, 2]), "episode-mean")
    np.testing.assert_allclose(part.loss_weight.sum(), 1.0, rtol=1e-6)


def test_a_kept_turn_carries_the_advantage_each_token_was_trained_with():
    """``turn_annotations`` (what ``hierarl view`` colours): HiPER's reference case, 3 turns q = [SWITCH, KEEP,
    SWITCH]. Per turn, the 7 response tokens' groups follow the masks (the KEEP turn's subgoal copy is
    ``subgoal_keep``, the EOS ``other``), the advantages are the batch's own on the response (negated under the
    negative control: what was trained, not what was estimated), and the values are the critic's per named slot."""
    from learners.diagnostics import turn_annotations

    slots = [s.name for s in get_algo("hiper").value_slots]
    for scale in (1.0, -1.0):
        turns, (batch, _) = _hiper_case(advantage_scale=scale)
        notes = turn_annotations([glue_traj("a", HIPER_REWARDS, HIPER_SWITCHES)], turns, batch, slots)
        assert sorted(notes) == [(0, 0), (0, 1), (0, 2)]
        for b, key in enumerate(turns.index):
            sub = "subgoal" if HIPER_SWITCHES[key[1]] else "subgoal_keep"
            assert notes[key]["groups"] == ["switch"] * 2 + [sub] * 2 + ["action"] * 2 + ["other"]
            np.testing.assert_allclose(notes[key]["token_adv"], batch.token_adv[b, RESP], atol=1e-5)
            assert notes[key]["in_loss"] == batch.loss_mask[b, RESP].tolist()
            assert notes[key]["values"] == pytest.approx(
                dict(zip(slots, HIPER_VALUES[b].tolist(), strict=True))
            )
    assert notes[(0, 2)]["token_adv"][4] == pytest.approx(-0.9, abs=1e-5)  # −A_low of the last action (0.9)
