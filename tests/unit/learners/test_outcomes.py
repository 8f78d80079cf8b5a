"""Outcome signal of a batch (``learners.outcomes``) and the rule that keeps the policy still without it
(``learners.prepare.takes_policy_step``), on the glue trajectories of ``tests/unit/glue_turns``."""

import dataclasses

import pytest

from learners.algos import grpo, hiper, hipif, hisr, ppo, rloo, sft
from learners.algos.registry import get_algo
from learners.outcomes import outcome_stats, outcome_varies
from learners.prepare import learner_batch, shaped_turns, takes_policy_step
from learners.targets import sequences
from tests.unit.glue_turns import HIPER_VALUES, glue_traj


def _ep(tid, gid, won, shaping=0.0):
    """A 3-turn episode of group ``gid``; its last env reward is 1 when won, and ``shaping`` (a format penalty)
    sits on turn 0, so two lost episodes can differ in return but not in outcome."""
    t = glue_traj(tid, [0.0, 0.0, 1.0 if won else 0.0], gid=gid)
    t.won = won
    t.turns[0].shaped = {"format": shaping}
    return t


def test_mixed_share_counts_groups_whose_episodes_ended_differently():
    # groups: a = (won, lost) mixed; b = (lost, lost) equal; c = (won, won) equal -> 1 of 3 mixed
    trajs = [_ep("1", "a", True), _ep("2", "a", False), _ep("3", "b", False), _ep("4", "b", False)]
    trajs += [_ep("5", "c", True), _ep("6", "c", True)]
    stats = outcome_stats(trajs)
    assert stats["groups_mixed_outcome"] == pytest.approx(1 / 3)
    assert stats["batch_outcome_varies"] == 1.0


def test_a_batch_of_equal_groups_with_different_outcomes_across_groups_varies():
    # every group equal (b all lost, c all won), but the batch holds both outcomes: a critic's baseline can learn
    trajs = [_ep("3", "b", False), _ep("4", "b", False), _ep("5", "c", True), _ep("6", "c", True)]
    assert outcome_stats(trajs) == {"groups_mixed_outcome": 0.0, "batch_outcome_varies": 1.0}


def test_shaping_alone_is_no_outcome():
    # two lost episodes whose returns differ by a format penalty (-0.01): the same outcome (won 0, env return 0)
    trajs = [_ep("1", "a", False, shaping=-0.01), _ep("2", "a", False)]
    assert trajs[0].episode_return != trajs[1].episode_return  # -0.01 vs 0: the returns do differ
    assert not outcome_varies(trajs)
    assert outcome_stats(trajs)["groups_mixed_outcome"] == 0.0


@pytest.mark.parametrize(
    ("cfg", "steps_on_all_lost"),
    [
        (hiper.Config(), False),
        (ppo.Config(), False),
        (grpo.Config(), False),
        (rloo.Config(), False),
        (hipif.Config(), True),  # its subgoal rewards tell lost episodes apart
        (hisr.Config(), True),  # its learned segment rewards do too
        (sft.Config(), True),  # behaviour cloning: demonstrations are all won by design
    ],
)
def test_which_algorithms_skip_the_policy_step_on_a_batch_without_outcome_signal(cfg, steps_on_all_lost):
    lost = [_ep("1", "a", False), _ep("2", "a", False)]
    mixed = [_ep("1", "a", False), _ep("2", "a", True)]
    algo = get_algo("ppo")
    for trajs, expected in ((lost, steps_on_all_lost), (mixed, True)):
        turns = shaped_turns(trajs, ppo.Config(), success_reward=1.0, max_len=64, pad_id=0)
        seqs = sequences(turns, algo.value_slots)
        lp = turns.old_logprobs.numpy()
        values = HIPER_VALUES[:1, :1].repeat(len(seqs), 0)
        batch, _ = learner_batch(algo, ppo.Config(), trajs, turns, seqs, lp, lp - 0.1, values)
        assert takes_policy_step(cfg, trajs, batch) is expected


def test_no_step_on_a_batch_without_a_loss_token_whatever_the_rule():
    trajs = [_ep("1", "a", False), _ep("2", "a", True)]
    algo = get_algo("ppo")
    turns = shaped_turns(trajs, ppo.Config(), success_reward=1.0, max_len=64, pad_id=0)
    seqs = sequences(turns, algo.value_slots)
    lp = turns.old_logprobs.numpy()
    batch, _ = learner_batch(
        algo, ppo.Config(), trajs, turns, seqs, lp, lp - 0.1, HIPER_VALUES[:1, :1].repeat(6, 0)
    )
    empty = dataclasses.replace(batch, loss_mask=batch.loss_mask & False)
    assert takes_policy_step(sft.Config(), trajs, batch) and not takes_policy_step(sft.Config(), trajs, empty)


def test_the_rule_is_a_checked_config_value():
    with pytest.raises(ValueError, match=r"algo\.no_outcome_batch"):
        hiper.Config(no_outcome_batch="drop")
