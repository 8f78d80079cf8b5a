"""Algorithm files: advantages land on the right tokens with the right sign."""

import numpy as np
import pytest
import torch

from actors.trajectory import Decision, Trajectory, Turn
from launch.algos import ALGOS, get_algo
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
    # KEEP turn (row 1): its copied subgoal is not a decision -> advantage 0, but it stays under the KL anchor
    assert (tg.token_adv[1, sg] == 0).all() and tg.loss_mask[:, sg].all()
    # switch and action tokens (and the EOS, which shares the low-level advantage) are always trained
    assert tg.loss_mask[:, sw].all() and tg.loss_mask[:, act].all() and tg.loss_mask[:, eos].all()
    # V = 0 everywhere: A_low = discounted reward-to-go inside the segment; A_high = segment return
    assert tg.token_adv[2, act][0] == pytest.approx(1.0)
    assert tg.token_adv[2, sg][0] == pytest.approx(1.0)
    assert tg.token_adv[0, act][0] == pytest.approx(0.0)
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
