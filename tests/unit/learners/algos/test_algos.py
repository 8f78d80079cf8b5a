"""Algorithm files: advantages land on the right tokens with the right sign."""

import numpy as np
import pytest
import torch

from actors.trajectory import Decision, Trajectory, Turn
from learners.algos.registry import ALGOS, get_algo
from learners.batch import build_turn_batch
from learners.targets import PolicyInputs, value_positions


def _turn(reward=0.0, *, switch=None, valid=True, last=False, anchor="s0"):
    # response tokens: [switch switch | subgoal subgoal | action action | eos]
    masks = {
        "switch_mask": np.array([1, 1, 0, 0, 0, 0, 0], bool),
        "subgoal_mask": np.array([0, 0, 1, 1, 0, 0, 0], bool),
        "action_mask": np.array([0, 0, 0, 0, 1, 1, 0], bool),
    }
    return Turn(
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11, 12, 13, 14, 15, 2],
        logprobs=[-0.5] * 7,
        masks=masks,
        decision=Decision(action="a", valid=valid, switch=switch, subgoal="g"),
        env_reward=reward,
        terminated=last,
        anchor_key=anchor,
    )


def _traj(tid, gid, rewards, switches):
    turns = [
        _turn(r, switch=s, last=i == len(rewards) - 1)
        for i, (r, s) in enumerate(zip(rewards, switches, strict=True))
    ]
    return Trajectory(
        traj_id=tid, group_id=gid, task_id="t", env_name="synthetic", turns=turns, status="finished"
    )


def _targets(name, trajs, values=None):
    algo = get_algo(name)
    batch = build_turn_batch(trajs, max_len=64, pad_id=0)
    if algo.value_slots and values is None:
        values = np.zeros((len(batch), len(algo.value_slots)), np.float32)
    cfg = algo.Config(
        **(
            {"normalize_advantages": False}
            if "normalize_advantages" in algo.Config.__dataclass_fields__
            else {}
        )
    )
    return batch, algo.compute_targets(trajs, batch, values, cfg)


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo"])
def test_group_methods_reward_the_winner(name):
    win = _traj("w", "g", [0.0, 1.0], [True, False])
    lose = _traj("l", "g", [0.0, 0.0], [True, False])
    batch, tg = _targets(name, [win, lose])
    resp = batch.response_mask.numpy()
    win_rows = [r for r, (i, _) in enumerate(batch.index) if i == 0]
    lose_rows = [r for r, (i, _) in enumerate(batch.index) if i == 1]
    assert (tg.token_adv[win_rows][resp[win_rows]] > 0).all()  # sign flip fails here
    assert (tg.token_adv[lose_rows][resp[lose_rows]] < 0).all()
    assert (tg.token_adv[~resp] == 0).all() and (tg.loss_mask == resp).all()


def test_grpo_golden():
    # returns 1 and 0 in one group: mean 0.5, unbiased std sqrt(0.5) -> A = ±0.5/(0.70711 + 1e-6) = ±0.707106
    _batch, tg = _targets("grpo", [_traj("w", "g", [1.0], [True]), _traj("l", "g", [0.0], [True])])
    assert tg.token_adv[0, 3] == pytest.approx(0.5 / (np.sqrt(0.5) + 1e-6), abs=1e-6)
    assert tg.token_adv[1, 3] == pytest.approx(-0.5 / (np.sqrt(0.5) + 1e-6), abs=1e-6)


def _episode(tid, gid, env_reward, *, won, format_penalty=0.0):
    """Two turns: env reward on the last; a format penalty (as ``reward.shaping`` writes it) on the first."""
    first, last = _turn(0.0, switch=True), _turn(env_reward, switch=False, last=True)
    if format_penalty:
        first.decision.valid = False
        first.shaped = {"format": -format_penalty}
    traj = Trajectory(
        traj_id=tid,
        group_id=gid,
        task_id="t",
        env_name="synthetic",
        turns=[first, last],
        status="finished",
        won=won,
    )
    return traj


def _grpo_rows(trajs, name="grpo", **cfg):
    """Per-trajectory advantage (every response token of both turns carries it) and the stats."""
    batch = build_turn_batch(trajs, max_len=64, pad_id=0)
    tg = get_algo(name).compute_targets(trajs, batch, None, get_algo(name).Config(**cfg))
    resp = batch.response_mask.numpy()
    per_traj = []
    for i in range(len(trajs)):
        rows = [r for r, (k, _) in enumerate(batch.index) if k == i]
        values = tg.token_adv[rows][resp[rows]]
        assert np.all(values == values[0])
        per_traj.append(float(values[0]))
    return np.array(per_traj), tg.stats


# Group "lost": four lost episodes, one with a format penalty: returns [0, -0.01, 0, 0], mean -0.0025, deviations
# [0.0025, -0.0075, 0.0025, 0.0025], unbiased var 7.5e-5 / 3 = 2.5e-5, std 0.005:
# A = dev / (0.005 + 1e-6) = [0.4999000, -1.4997001, 0.4999000, 0.4999000] (format noise at full strength).
LOST_KEEP = [0.0025 / 0.005001, -0.0075 / 0.005001, 0.0025 / 0.005001, 0.0025 / 0.005001]
# Group "mixed": one win (R = 1) and the same three losses: returns [1, -0.01, 0, 0], mean 0.2475, deviations
# [0.7525, -0.2575, -0.2475, -0.2475], unbiased var 0.755075 / 3 = 0.25169167, std 0.50168881:
# A = [1.4999308, -0.5132654, -0.4933327, -0.4933327].
MIXED_STD = 0.755075**0.5 / 3**0.5
MIXED = [d / (MIXED_STD + 1e-6) for d in (0.7525, -0.2575, -0.2475, -0.2475)]


def _lost_and_mixed():
    lost = [
        _episode("l0", "lost", 0.0, won=False),
        _episode("l1", "lost", 0.0, won=False, format_penalty=0.01),
        _episode("l2", "lost", 0.0, won=False),
        _episode("l3", "lost", 0.0, won=False),
    ]
    mixed = [
        _episode("m0", "mixed", 1.0, won=True),
        _episode("m1", "mixed", 0.0, won=False, format_penalty=0.01),
        _episode("m2", "mixed", 0.0, won=False),
        _episode("m3", "mixed", 0.0, won=False),
    ]
    return lost + mixed


def test_grpo_skips_groups_whose_outcomes_are_all_equal():
    """Default ``equal_outcome_groups="skip"``: the all-lost group's format noise gets 0 (it would be ±0.5..1.5
    advantages under the std division), the mixed group keeps GRPO's values; half of the groups were equal."""
    adv, stats = _grpo_rows(_lost_and_mixed())
    np.testing.assert_allclose(adv[:4], [0.0] * 4, atol=1e-6)
    np.testing.assert_allclose(adv[4:], MIXED, atol=1e-5)
    assert stats["groups_equal_outcome"] == 0.5
    keep, keep_stats = _grpo_rows(_lost_and_mixed(), equal_outcome_groups="keep")
    np.testing.assert_allclose(keep[:4], LOST_KEEP, atol=1e-5)
    np.testing.assert_allclose(keep[4:], MIXED, atol=1e-5)
    assert keep_stats["groups_equal_outcome"] == 0.5  # reported either way


def test_gigpo_skips_the_episode_term_of_groups_whose_outcomes_are_all_equal():
    """GiGPO's episode term is GRPO's advantage of the return (step level off here, ``step_weight=0``): by default
    the all-lost group's format noise gets 0 and the mixed group keeps GRPO's values; with "keep" the all-lost group
    gets the noise at full strength. Catches the skip not reaching ``gigpo_advantages`` (or applied to the wrong
    group)."""
    adv, stats = _grpo_rows(_lost_and_mixed(), "gigpo", step_weight=0.0)
    np.testing.assert_allclose(adv[:4], [0.0] * 4, atol=1e-6)
    np.testing.assert_allclose(adv[4:], MIXED, atol=1e-5)
    assert stats["groups_equal_outcome"] == 0.5
    keep, _ = _grpo_rows(_lost_and_mixed(), "gigpo", step_weight=0.0, equal_outcome_groups="keep")
    np.testing.assert_allclose(keep[:4], LOST_KEEP, atol=1e-5)
    np.testing.assert_allclose(keep[4:], MIXED, atol=1e-5)


def test_grpo_equal_outcome_reads_won_and_the_env_return():
    """All won (R = 1, one with a format penalty): equal, skipped. All lost but with different env returns (partial
    credit 0.5 vs 0): not equal, kept: returns [0.5, 0], mean 0.25, std sqrt(0.125) -> ±0.25 / (0.3535534 + 1e-6).
    Equal env returns (0) but one won: not equal, kept: returns [0, -0.01], mean -0.005, std 0.0070711 ->
    ±0.005 / (0.0070711 + 1e-6). One group of three of the batch's three groups was equal: 1/3 (3/7 of the
    trajectories)."""
    won = [
        _episode("w0", "won", 1.0, won=True),
        _episode("w1", "won", 1.0, won=True, format_penalty=0.01),
        _episode("w2", "won", 1.0, won=True),
    ]
    partial = [_episode("p0", "partial", 0.5, won=False), _episode("p1", "partial", 0.0, won=False)]
    flag = [
        _episode("f0", "flag", 0.0, won=True),
        _episode("f1", "flag", 0.0, won=False, format_penalty=0.01),
    ]
    adv, stats = _grpo_rows(won + partial + flag)
    e = 0.25 / (0.125**0.5 + 1e-6)
    f = 0.005 / (0.00005**0.5 + 1e-6)
    np.testing.assert_allclose(adv, [0.0, 0.0, 0.0, e, -e, f, -f], atol=1e-5)
    assert stats["groups_equal_outcome"] == pytest.approx(1 / 3)


def test_grpo_scale_none_is_dr_grpo():
    """``scale="none"``: A = R − mean, no std division: the mixed group [1, -0.01, 0, 0] (mean 0.2475) gets
    [0.7525, -0.2575, -0.2475, -0.2475]; the all-lost group is still skipped, or with "keep" gets its deviations
    [0.0025, -0.0075, 0.0025, 0.0025] (format noise at its own, small, size)."""
    adv, _ = _grpo_rows(_lost_and_mixed(), scale="none")
    np.testing.assert_allclose(adv, [0.0] * 4 + [0.7525, -0.2575, -0.2475, -0.2475], atol=1e-6)
    keep, _ = _grpo_rows(_lost_and_mixed(), scale="none", equal_outcome_groups="keep")
    np.testing.assert_allclose(keep[:4], [0.0025, -0.0075, 0.0025, 0.0025], atol=1e-6)


@pytest.mark.parametrize(
    ("field", "value"), [("equal_outcome_groups", "drop"), ("scale", "mad")], ids=["groups", "scale"]
)
def test_grpo_options_are_checked(field, value):
    with pytest.raises(ValueError, match=f"algo.{field}: unknown value"):
        get_algo("grpo").Config(**{field: value})


def test_ppo_reward_raise_raises_advantage():
    base = _traj("a", "g", [0.0, 0.0, 0.0], [True, False, False])
    more = _traj("b", "g", [0.0, 1.0, 0.0], [True, False, False])
    _, t0 = _targets("ppo", [base])
    _, t1 = _targets("ppo", [more])
    # with zero values, turn 1's advantage is its discounted return; the raise shows on turns 0 and 1, not 2
    assert t1.token_adv[1, 3] > t0.token_adv[1, 3] and t1.token_adv[0, 3] > t0.token_adv[0, 3]
    assert t1.token_adv[2, 3] == pytest.approx(t0.token_adv[2, 3])
    # lambda-returns with V = 0: G_0 = delta_0 + gamma*lam*delta_1 = 0 + 0.99*0.95*1 = 0.9405
    np.testing.assert_allclose(t1.value_target[:, 0], [0.9405, 1.0, 0.0], atol=1e-6)


def test_hiper_routes_each_advantage_to_its_decision_tokens():
    # 3 turns: SWITCH, KEEP, SWITCH; success reward on the last turn; zero critic
    traj = _traj("a", "g", [0.0, 0.0, 1.0], [True, False, True])
    batch, tg = _targets("hiper", [traj])
    p = 3  # prompt length: response tokens start at position 3
    sw, sg, act, eos = slice(p, p + 2), slice(p + 2, p + 4), slice(p + 4, p + 6), p + 6
    # V = 0 everywhere: A_high = segment return; segment 1 (turn 2) A_low = 1.0; segment 0 (turns 0, 1) bootstraps
    # to the high level's lambda-return at b_1 = 2 (low_bootstrap="lambda"): V_high(s_2) + A_high[2] = 0 + 1 = 1,
    # so A_low[1] = 0.99 * 1 = 0.99 and A_low[0] = 0 + 0.99 * 0.95 * 0.99 = 0.931095
    assert tg.token_adv[2, act][0] == pytest.approx(1.0)
    assert tg.token_adv[2, sg][0] == pytest.approx(1.0)
    assert tg.token_adv[1, act][0] == pytest.approx(0.99)
    assert tg.token_adv[0, act][0] == pytest.approx(0.931095)
    # KEEP turn (row 1): its copied subgoal is no decision of its own: it carries the turn's A_low, in the loss mask
    assert tg.token_adv[1, sg] == pytest.approx(0.99) and tg.loss_mask[:, sg].all()
    # switch and action tokens (and the EOS, which shares the low-level advantage) are always trained
    assert tg.loss_mask[:, sw].all() and tg.loss_mask[:, act].all() and tg.loss_mask[:, eos].all()
    # critic targets: V_high at boundaries (turns 0, 2), V_low(s, o_{t-1}) on the KEEP turn, V_low everywhere,
    # V_sw on decided turns (1, 2)
    assert tg.value_valid.tolist() == [
        [True, False, True, False],
        [False, True, True, True],
        [True, False, True, True],
    ]
    pos, head = value_positions(batch, get_algo("hiper").value_slots)
    assert head.tolist() == [0, 1, 1, 2]
    assert pos[0].tolist() == [p - 1, p - 1, p + 3, p - 1]  # last prompt token; last subgoal token


def test_hiper_eq10_switch_advantage_sign():
    # V_high(s_1) > V_low(s_1, o_0): switching at turn 1 was good; SWITCH gets positive A_switch, KEEP negative
    traj = _traj("a", "g", [0.0, 0.0], [True, True])
    batch = build_turn_batch([traj], max_len=64, pad_id=0)
    values = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 0.2, 0.0, 0.0]], np.float32)
    algo = get_algo("hiper")
    cfg = algo.Config(normalize_advantages=False, switch_adv="eq10")
    tg = algo.compute_targets([traj], batch, values, cfg)
    assert tg.token_adv[1, 3] > 0
    traj.turns[1].decision.switch = False
    tg = algo.compute_targets([traj], batch, values, cfg)
    assert tg.token_adv[1, 3] < 0


@pytest.mark.parametrize("switch", [True, False])
def test_hiper_return_switch_advantage_sign(switch):
    # V_sw(s_1, o_0) = 0.5: the decision at turn 1 (either one) led to G-bar_1 = 1 (win) -> +0.5, or 0 -> -0.5
    algo = get_algo("hiper")
    values = np.array([[0.0] * 4, [0.0, 0.0, 0.0, 0.5]], np.float32)
    for reward, sign in ((1.0, 1), (0.0, -1)):
        traj = _traj("a", "g", [0.0, reward], [True, switch])
        batch = build_turn_batch([traj], max_len=64, pad_id=0)
        tg = algo.compute_targets([traj], batch, values, algo.Config(normalize_advantages=False))
        assert tg.token_adv[1, 3] == pytest.approx(0.5 * sign)


def test_sft_trains_every_response_token():
    batch, tg = _targets("sft", [_traj("a", "g", [0.0], [True])])
    assert (tg.loss_mask == batch.response_mask.numpy()).all()


def test_rft_clones_the_won_episodes_turns_only():
    """Rejection-sampling fine-tuning: the won episode's 2 turns carry the loss on all 7 response tokens, the lost
    one's none; with no win in the batch nothing is under the loss (so no step, ``takes_policy_step``)."""
    win, lose = _traj("w", "g", [0.0, 1.0], [True, False]), _traj("l", "g", [0.0, 0.0], [True, False])
    win.won = True
    batch, tg = _targets("rft", [win, lose])
    resp = batch.response_mask.numpy()
    won_rows = np.array([i == 0 for i, _ in batch.index])
    assert (tg.loss_mask[won_rows] == resp[won_rows]).all() and tg.loss_mask[won_rows].sum() == 2 * 7
    assert not tg.loss_mask[~won_rows].any() and tg.stats["rft_rows"] == 2
    _, none_won = _targets("rft", [lose])
    assert not none_won.loss_mask.any()


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_policy_loss_descends_towards_positive_advantage(name):
    """A gradient step on the per-token loss raises the logprob of a token with positive advantage."""
    algo = get_algo(name)
    lp = torch.full((1, 4), -1.0, requires_grad=True)
    micro = PolicyInputs(
        old_logprobs=torch.full((1, 4), -1.0),
        ref_logprobs=torch.full((1, 4), -1.0),
        token_adv=torch.tensor([[0.0, 1.0, 1.0, 0.0]]),
        loss_mask=torch.tensor([[False, True, True, False]]),
    )
    loss, _ = algo.policy_loss(lp, micro, algo.Config())
    loss.sum().backward()
    assert (lp.grad[0, 1:3] < 0).all()  # descent increases these logprobs
    assert (lp.grad[0, [0, 3]] == 0).all()  # masked tokens get no gradient
