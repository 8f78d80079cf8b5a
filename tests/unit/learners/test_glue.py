"""The training glue the driver calls (no Ray): each algorithm's ``compute_targets``, the shared clipped policy loss,
whitening and bootstrapping, against hand-computed values (the arithmetic is in the comments).

Each test names the one-line mutation it is there to catch; they all pass on the real code.

Layout of every turn built here: prompt ``[1, 2, 3]`` (positions 0-2), then 7 response tokens
``[switch switch | subgoal subgoal | action action | eos]`` at positions 3-9 (batch width L = 10).
"""

import math

import numpy as np
import pytest
import torch

from actors.trajectory import Decision, Trajectory, Turn
from learners.algos import gigpo, grpo, hiper, hipif, hipif_gigpo, ppo, rloo
from learners.batch import build_turn_batch
from learners.losses import behaviour_weights
from learners.targets import (
    PolicyInputs,
    bootstrap_value,
    clipped_policy_loss,
    value_positions,
    whiten,
)

P = 3  # prompt length: the response starts at position 3
SW, SG, ACT, EOS = slice(P, P + 2), slice(P + 2, P + 4), slice(P + 4, P + 6), P + 6
RESP = slice(P, P + 7)
L = P + 7
P_SPAN = 0.8  # probability of the sampled <switch> span: its two tokens have logprob log(0.8)/2 each


def _turn(reward=0.0, *, switch=None, last=False, truncated=False, anchor="s0"):
    masks = {
        "switch_mask": np.array([1, 1, 0, 0, 0, 0, 0], bool),
        "subgoal_mask": np.array([0, 0, 1, 1, 0, 0, 0], bool),
        "action_mask": np.array([0, 0, 0, 0, 1, 1, 0], bool),
    }
    half = math.log(P_SPAN) / 2
    return Turn(
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11, 12, 13, 14, 15, 2],
        logprobs=[half, half, -0.5, -0.5, -0.5, -0.5, -0.5],
        masks=masks,
        decision=Decision(action="a", valid=True, switch=switch, subgoal="g"),
        env_reward=reward,
        terminated=last and not truncated,
        truncated=last and truncated,
        anchor_key=anchor,
    )


def _traj(tid, rewards, switches=None, *, gid="g", anchors=None, truncated=False):
    switches = switches or [True] * len(rewards)
    anchors = anchors or [f"s{t}" for t in range(len(rewards))]
    turns = [
        _turn(r, switch=s, last=t == len(rewards) - 1, truncated=truncated, anchor=a)
        for t, (r, s, a) in enumerate(zip(rewards, switches, anchors, strict=True))
    ]
    return Trajectory(
        traj_id=tid, group_id=gid, task_id="t", env_name="synthetic", turns=turns, status="finished"
    )


def _batch(trajs):
    return build_turn_batch(trajs, max_len=64, pad_id=0)


def _rows(per_turn):
    """float32[B, L]: row b holds per_turn[b] on all 7 response tokens, 0 on the prompt."""
    out = np.zeros((len(per_turn), L), np.float32)
    out[:, RESP] = np.asarray(per_turn, np.float32)[:, None]
    return out


# ---------------------------------------------------------------------------------------------------------------
# HiPER reference case: 3 turns, q = [SWITCH, KEEP, SWITCH], terminated, gamma 0.99, lambda 0.95
# ---------------------------------------------------------------------------------------------------------------

HIPER_REWARDS = [0.0, 0.5, 1.0]
HIPER_SWITCHES = [True, False, True]
# value slots per row: [V_high(s_t), V_low(s_t, o_{t-1}), V_low(s_t, o_t), V_sw(s_t, o_{t-1})]
HIPER_VALUES = np.array(
    [[0.5, 0.0, 0.4, 0.9], [0.6, 0.3, 0.7, 0.5], [0.2, 0.05, 0.1, 0.6]],
    np.float32,
)
# Segments [0, 2) and [2, 3); V_high(s_3) = 0 (terminated). beta_1 = 1 - 0.8 = 0.2 (KEEP), beta_2 = 0.8 (SWITCH).
# A_low:  t=1: y = 0.5 + 0.99 V_high(s_2) = 0.5 + 0.198 = 0.698, delta = 0.698 - 0.7 = -0.002, A = -0.002
#         t=0: y = 0 + 0.99 V_low(s_1, o_1) = 0.693, delta = 0.693 - 0.4 = 0.293,
#              A = 0.293 + 0.99*0.95*(-0.002) = 0.293 - 0.001881 = 0.291119
#         t=2: y = 1 + 0.99*0 = 1, delta = 1 - 0.1 = 0.9, A = 0.9
# A_high: seg 1: r~ = 1, y_high = 1, A = 1 - 0.2 = 0.8
#         seg 0: r~ = 0 + 0.99*0.5 = 0.495, gamma~ = 0.99^2 = 0.9801, y_high = 0.495 + 0.9801*0.2 = 0.69102,
#              A = 0.69102 - 0.5 + 0.9801*0.95*0.8 = 0.19102 + 0.744876 = 0.935896
# G-bar (return to the segment end, bootstrapped at the next boundary): t=2: 1; t=1: 0.5 + 0.99*0.2 = 0.698;
#         t=0: 0.99*0.698 = 0.69102
# A_switch, "return" (default): G-bar_t - V_sw(s_t): t=1: 0.698 - 0.5 = 0.198; t=2: 1 - 0.6 = 0.4; t=0: 0
# A_switch, "eq10": (q - beta)(V_high - V_low_prev): t=1: (0 - 0.2)(0.6 - 0.3) = -0.06; t=2: (1 - 0.8)(0.2 - 0.05)
#         = 0.03; t=0: 0
A_LOW = [0.291119, -0.002, 0.9]
A_HIGH = [0.935896, 0.0, 0.8]
A_SWITCH = [0.0, 0.198, 0.4]
A_SWITCH_EQ10 = [0.0, -0.06, 0.03]
# critic targets, "lambda" (default): A + V: y_high = [0.935896 + 0.5, -, 0.8 + 0.2] = [1.435896, -, 1.0];
#         y_low = [0.291119 + 0.4, -0.002 + 0.7, 0.9 + 0.1] = [0.691119, 0.698, 1.0]
# "td0" (Eq. 11, 13): y_high = [0.69102, -, 1.0], y_low = [0.693, 0.698, 1.0]
Y_LOW = [0.691119, 0.698, 1.0]
Y_HIGH = [1.435896, 0.0, 1.0]
Y_LOW_TD0 = [0.693, 0.698, 1.0]
Y_HIGH_TD0 = [0.69102, 0.0, 1.0]
# slot validity: V_high at boundaries (rows 0, 2); V_low(s, o_{t-1}) on KEEP turns (row 1: its target is y_low[1]);
# V_low(s, o_t) everywhere; V_sw on decided turns (rows 1, 2: targets G-bar = 0.698, 1.0)
HIPER_VALID = [[True, False, True, False], [False, True, True, True], [True, False, True, True]]


def _hiper_expected(a_switch, a_high, a_low, boundary):
    """Token advantages and loss mask of the reference layout: a KEEP turn's subgoal tokens are in the mask (the KL
    anchor) with advantage 0."""
    adv = np.zeros((len(a_low), L), np.float32)
    mask = np.zeros((len(a_low), L), bool)
    for b in range(len(a_low)):
        adv[b, SW], mask[b, SW] = a_switch[b], True
        adv[b, SG], mask[b, SG] = (a_high[b] if boundary[b] else 0.0), True
        adv[b, P + 4 : P + 7], mask[b, P + 4 : P + 7] = a_low[b], True  # action tokens + EOS get A_low
    return adv, mask


def _hiper_targets(sign=1.0, values=HIPER_VALUES, **cfg):
    traj = _traj("a", [sign * r for r in HIPER_REWARDS], HIPER_SWITCHES)
    batch = _batch([traj])
    return batch, hiper.compute_targets([traj], batch, sign * values, hiper.Config(**cfg))


@pytest.mark.parametrize("form", ["return", "eq10"])
def test_hiper_golden_advantages_and_critic_targets(form):
    """Catches (d) V_low(s, o_t) / V_low(s, o_{t-1}) swapped when the slots are unpacked (swapped: A_low at t=1
    becomes 0.698 - 0.3 = 0.398, eq10's A_switch at t=1 becomes -0.2*(0.6 - 0.7) = +0.02), (e) V_high regressed onto
    the low-level target (slot 0 of row 0 would be 0.691119, not 1.435896), (g) beta from the sampled span on a KEEP
    turn (beta_1 = 0.8 would give eq10's A_switch = -0.8*0.3 = -0.24, not -0.06), and the return form reading
    V_high or V_low_prev instead of V_sw (t=1: 0.698 - 0.6 = 0.098 or 0.698 - 0.3 = 0.398, not 0.198)."""
    _batch, tg = _hiper_targets(normalize_advantages=False, switch_adv=form)
    a_switch = A_SWITCH if form == "return" else A_SWITCH_EQ10
    adv, mask = _hiper_expected(a_switch, A_HIGH, A_LOW, [True, False, True])
    np.testing.assert_array_equal(tg.loss_mask, mask)
    np.testing.assert_allclose(tg.token_adv, adv, atol=1e-6)
    # critic targets do not depend on the switch form: every slot is trained whichever one reads it
    np.testing.assert_allclose(tg.value_target[:, 0], Y_HIGH, atol=1e-6)
    np.testing.assert_allclose(tg.value_target[:, 1], [0.0, 0.698, 0.0], atol=1e-6)
    np.testing.assert_allclose(tg.value_target[:, 2], Y_LOW, atol=1e-6)
    np.testing.assert_allclose(tg.value_target[:, 3], [0.0, 0.698, 1.0], atol=1e-6)
    assert tg.value_valid.tolist() == HIPER_VALID


def test_hiper_td0_targets_are_the_papers_eq_11_and_13():
    """Catches the λ-return and one-step targets swapped: td0 gives y_high[0] = 0.69102 (Eq. 11), y_low[0] = 0.693
    (Eq. 13); the default λ-returns give 1.435896 and 0.691119. Advantages are the same either way."""
    _batch, td0 = _hiper_targets(normalize_advantages=False, critic_target="td0")
    _batch, lam = _hiper_targets(normalize_advantages=False)
    assert hiper.Config().critic_target == "lambda"
    np.testing.assert_allclose(td0.value_target[:, 0], Y_HIGH_TD0, atol=1e-6)
    np.testing.assert_allclose(td0.value_target[:, 2], Y_LOW_TD0, atol=1e-6)
    np.testing.assert_allclose(td0.token_adv, lam.token_adv, atol=1e-7)
    assert td0.value_valid.tolist() == HIPER_VALID


def test_hiper_value_slots_read_the_right_positions():
    """Catches (d) in VALUE_SLOTS: V_low(s, o_{t-1}) and V_sw are read where the prompt ends (the prompt states
    o_{t-1}), V_low(s, o_t) at the last token of the new subgoal; V_high also at the prompt end; three heads."""
    batch = _batch([_traj("a", HIPER_REWARDS, HIPER_SWITCHES)])
    assert [s.name for s in hiper.VALUE_SLOTS] == ["v_high", "v_low_prev", "v_low", "v_switch"]
    pos, head = value_positions(batch, hiper.VALUE_SLOTS)
    assert head.tolist() == [0, 1, 1, 2]
    # last prompt token = 2; last subgoal token = 3 + 3 = 6
    assert pos.tolist() == [[2, 2, 6, 2]] * 3


def test_switch_probability_of_keep_is_one_minus_span():
    """Catches (g): beta_t = pi(SWITCH | s_t, o_{t-1}); a sampled KEEP span of probability 0.8 means beta = 0.2."""
    lp = np.array([math.log(0.8) / 2] * 2 + [-3.0], np.float32)
    m = np.array([True, True, False])
    assert hiper.switch_probability(lp, m, switched=True) == pytest.approx(0.8, abs=1e-6)
    assert hiper.switch_probability(lp, m, switched=False) == pytest.approx(0.2, abs=1e-6)
    assert hiper.switch_probability(lp, np.zeros(3, bool), switched=False) == 0.5  # no span parsed


# ---------------------------------------------------------------------------------------------------------------
# (a) the KL term of the shared clipped policy loss
# ---------------------------------------------------------------------------------------------------------------

# new logprob -1 on both trained tokens; reference -1.5 (token 1: log r = +0.5) and -0.5 (token 2: log r = -0.5)
# low_var_kl = exp(-log r) + log r - 1, d/dlp = 1 - exp(-log r):
#   token 1: e^-0.5 - 0.5 = 0.6065307 - 0.5 = 0.1065307, grad 1 - 0.6065307 = +0.3934693
#   token 2: e^0.5 - 1.5 = 1.6487213 - 1.5 = 0.1487213, grad 1 - 1.6487213 = -0.6487213
# k1 = log r: 0.5 / -0.5, grad 1 / 1;   k2 = 0.5 (log r)^2: 0.125 / 0.125, grad log r = 0.5 / -0.5
KL_CASES = {
    "low_var_kl": ([0.1065307, 0.1487213], [0.3934693, -0.6487213]),
    "k1": ([0.5, -0.5], [1.0, 1.0]),
    "k2": ([0.125, 0.125], [0.5, -0.5]),
}


@pytest.mark.parametrize("algo", [ppo, grpo, rloo, gigpo, hiper], ids=lambda m: m.__name__.split(".")[-1])
@pytest.mark.parametrize("kind", sorted(KL_CASES))
def test_kl_term_pulls_towards_the_reference(algo, kind):
    """Catches (a): the KL term's sign flipped. With A = 0 the surrogate adds nothing, so the per-token loss is
    kl_coef * KL (coef 0.5) and gradient descent moves each logprob towards the reference's: the token above its
    reference (log r > 0) gets a positive gradient under low_var_kl / k2, the one below a negative one."""
    expected_kl, expected_grad = KL_CASES[kind]
    lp = torch.full((1, 4), -1.0, requires_grad=True)
    micro = PolicyInputs(
        old_logprobs=torch.full((1, 4), -1.0),
        ref_logprobs=torch.tensor([[-7.0, -1.5, -0.5, -7.0]]),
        token_adv=torch.zeros((1, 4)),
        loss_mask=torch.tensor([[False, True, True, False]]),
    )
    loss, metrics = algo.ALGORITHM.policy_loss(lp, micro, algo.Config(kl_coef=0.5, kl_kind=kind))
    np.testing.assert_allclose(
        loss.detach()[0].numpy(), [0.0, *(0.5 * k for k in expected_kl), 0.0], atol=1e-6
    )
    assert metrics["kl"] == pytest.approx(sum(expected_kl) / 2, abs=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(lp.grad[0].numpy(), [0.0, *(0.5 * g for g in expected_grad), 0.0], atol=1e-6)


@pytest.mark.parametrize("weight", [None, 0.25])
def test_kl_term_adds_to_the_surrogate(weight):
    """KL and surrogate add: A = +1 at ratio 1 gives surrogate -1 (grad -1), plus 0.5 * 0.1065307 (grad +0.19673)
    for KL to a reference 0.5 nats below. A behaviour weight w (decoupled PPO) scales the surrogate only: w = 0.25
    gives -0.25 + 0.0532654 (grad -0.25 + 0.1967347)."""
    w = 1.0 if weight is None else weight
    lp = torch.full((1, 1), -1.0, requires_grad=True)
    micro = PolicyInputs(
        old_logprobs=torch.full((1, 1), -1.0),
        ref_logprobs=torch.full((1, 1), -1.5),
        token_adv=torch.ones((1, 1)),
        loss_mask=torch.ones((1, 1), dtype=torch.bool),
        behaviour_weight=None if weight is None else torch.full((1, 1), weight),
    )
    loss, _ = clipped_policy_loss(lp, micro, ppo.Config(kl_coef=0.5))
    assert float(loss.detach()) == pytest.approx(-w + 0.5 * 0.1065307, abs=1e-6)
    loss.sum().backward()
    assert float(lp.grad) == pytest.approx(-w + 0.5 * 0.3934693, abs=1e-6)


def test_behaviour_weights_are_truncated_ratios_of_the_learners_to_the_engines_logprobs():
    """learner [-1, -2, -0.5], engine [-1.5, -1, -0.5], cap 1.5: exp(0.5) = 1.6487213 capped to 1.5, exp(-1) =
    0.3678794, exp(0) = 1; the masked 4th token is 1 whatever its log-probs. Mean before the cap
    (1.6487213 + 0.3678794 + 1) / 3 = 1.0055336; one of three tokens capped. Swapping learner and engine would
    give [0.6065, 1.5, 1]."""
    learner = torch.tensor([[-1.0, -2.0, -0.5, 9.0]])
    engine = torch.tensor([[-1.5, -1.0, -0.5, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    w, m = behaviour_weights(learner, engine, mask, cap=1.5)
    assert w.tolist()[0] == pytest.approx([1.5, 0.3678794, 1.0, 1.0], abs=1e-6)
    assert m["is_weight_mean"] == pytest.approx(1.0055336, abs=1e-6)
    assert m["is_weight_capped"] == pytest.approx(1 / 3, abs=1e-6)


def test_kl_term_gradient_is_finite_under_far_off_padding():
    """Bug fixed: the KL estimator ran on padding positions before they were masked; a padding logprob 200 nats
    below the reference made exp(-log r) = inf there, and torch.where's zero gradient times inf is NaN."""
    lp = torch.tensor([[-1.0, -200.0]], requires_grad=True)
    micro = PolicyInputs(
        old_logprobs=torch.tensor([[-1.0, 0.0]]),
        ref_logprobs=torch.tensor([[-1.5, 0.0]]),
        token_adv=torch.zeros((1, 2)),
        loss_mask=torch.tensor([[True, False]]),
    )
    loss, _ = clipped_policy_loss(lp, micro, ppo.Config(kl_coef=0.5))
    loss.sum().backward()
    assert torch.isfinite(lp.grad).all()
    assert lp.grad.tolist()[0] == pytest.approx([0.5 * 0.3934693, 0.0], abs=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# (b) whitening
# ---------------------------------------------------------------------------------------------------------------


def test_whiten_subtracts_the_mean():
    """Catches (b): [1, 2, 3] on the mask: mean 2, population std sqrt(2/3) = 0.8164966 -> [-1.2247449, 0, 1.2247449];
    without the mean it would be [1.22, 2.45, 3.67]. Masked-out entries (100) stay 0 and do not enter the stats."""
    adv = np.array([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]], np.float32)
    mask = np.array([[True, True, False], [True, False, False]])
    out = whiten(adv, mask)
    np.testing.assert_allclose(out, [[-1.2247449, 0.0, 0.0], [1.2247449, 0.0, 0.0]], atol=1e-6)


def test_ppo_whitened_advantages_golden():
    """Catches (b) through PPO: rewards [0, 1], V = 0, terminated: A_1 = 1, A_0 = 0.99*0.95*1 = 0.9405.
    Both rows have 7 response tokens: mean 0.97025, std |1 - 0.9405| / 2 = 0.02975 -> [-1, +1].
    Without the mean: 0.9405 / 0.02975 = 31.6 and 1 / 0.02975 = 33.6."""
    traj = _traj("a", [0.0, 1.0])
    batch = _batch([traj])
    tg = ppo.compute_targets([traj], batch, np.zeros((2, 1), np.float32), ppo.Config())
    np.testing.assert_allclose(tg.token_adv, _rows([-1.0, 1.0]), atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# (c) terminated episodes do not bootstrap, truncated ones do
# ---------------------------------------------------------------------------------------------------------------


def test_bootstrap_value_terminated_vs_truncated():
    """Catches (c) in ``bootstrap_value``: V(s_T) = 0 after termination, the stand-in value after truncation."""
    assert bootstrap_value(_traj("a", [0.0]), 5.0) == 0.0
    assert bootstrap_value(_traj("a", [0.0], truncated=True), 5.0) == 5.0
    assert bootstrap_value(_traj("a", [0.0], truncated=True), 5.0, "terminal") == 0.0  # the cut as an end


@pytest.mark.parametrize("truncated", [False, True])
def test_ppo_bootstrap(truncated):
    """One turn, r = 0, V(s_0) = 2. Terminated: A = 0 + 0 - 2 = -2, return 0.
    Truncated (V(s_1) ~ V(s_0) = 2): A = 0.99*2 - 2 = -0.02, return 1.98."""
    traj = _traj("a", [0.0], truncated=truncated)
    batch = _batch([traj])
    tg = ppo.compute_targets(
        [traj], batch, np.array([[2.0]], np.float32), ppo.Config(normalize_advantages=False)
    )
    adv, ret = (-0.02, 1.98) if truncated else (-2.0, 0.0)
    np.testing.assert_allclose(tg.token_adv, _rows([adv]), atol=1e-6)
    assert tg.value_target[0, 0] == pytest.approx(ret, abs=1e-6)


def test_a_truncated_episode_bootstraps_from_its_last_state():
    """Three turns, r = 0, V = (2, 1, 4), truncated, γ 0.5, λ 1 (PPO and HISR's turn-level GAE). V(s_3) ~ V(s_2) = 4:
    δ_2 = 0.5 · 4 − 4 = −2, δ_1 = 0.5 · 4 − 1 = 1, δ_0 = 0.5 · 1 − 2 = −1.5; A_2 = −2, A_1 = 1 + 0.5 · (−2) = 0,
    A_0 = −1.5 + 0.5 · 0 = −1.5; returns A + V = (0.5, 1, 2). Catches: the bootstrap read at V(s_0) = 2 (A would be
    (−1.75, −0.5, −3)), which a one-turn trajectory cannot tell apart."""
    from learners.algos import hisr

    traj = _traj("a", [0.0, 0.0, 0.0], truncated=True)
    for t in traj.turns:
        t.shaped = {"segment": 0.0}  # HISR's r_fuse = the shaped terms: 0 here, as PPO's env reward
    values = np.array([[2.0], [1.0], [4.0]], np.float32)
    for algo, cfg in (
        (ppo, ppo.Config(gamma=0.5, lam=1.0, normalize_advantages=False)),
        (hisr, hisr.Config(gamma=0.5, lam=1.0, normalize_advantages=False)),
    ):
        tg = algo.compute_targets([traj], _batch([traj]), values, cfg)
        np.testing.assert_allclose(tg.token_adv, _rows([-1.5, 0.0, -2.0]), atol=1e-6)
        np.testing.assert_allclose(tg.value_target[:, 0], [0.5, 1.0, 2.0], atol=1e-6)


def test_truncation_terminal_ends_a_cut_episode_at_zero():
    """The same three turns with ``truncation="terminal"``: V(s_3) = 0. δ_2 = 0 − 4 = −4, δ_1 = 0.5 · 4 − 1 = 1,
    δ_0 = 0.5 · 1 − 2 = −1.5; A_2 = −4, A_1 = 1 + 0.5 · (−4) = −1, A_0 = −1.5 + 0.5 · (−1) = −2; returns A + V =
    (0, 0, 0), as after a real end with r = 0. Catches: the config field not reaching ``turn_gae_targets`` (PPO,
    HISR) or ``bootstrap_value`` (the bootstrapped figures above)."""
    from learners.algos import hisr

    traj = _traj("a", [0.0, 0.0, 0.0], truncated=True)
    for t in traj.turns:
        t.shaped = {"segment": 0.0}
    values = np.array([[2.0], [1.0], [4.0]], np.float32)
    for algo in (ppo, hisr):
        cfg = algo.Config(gamma=0.5, lam=1.0, normalize_advantages=False, truncation="terminal")
        tg = algo.compute_targets([traj], _batch([traj]), values, cfg)
        np.testing.assert_allclose(tg.token_adv, _rows([-2.0, -1.0, -4.0]), atol=1e-6)
        np.testing.assert_allclose(tg.value_target[:, 0], [0.0, 0.0, 0.0], atol=1e-6)


@pytest.mark.parametrize(
    ("truncated", "truncation"), [(False, "bootstrap"), (True, "bootstrap"), (True, "terminal")]
)
def test_hiper_bootstrap(truncated, truncation):
    """One turn, r = 0, V_high(s_0) = 2, V_low(s_0, o_0) = 1. Terminated: A_high = 0 - 2 = -2, A_low = 0 - 1 = -1.
    Truncated (V_high(s_1) ~ V_high(s_0) = 2): A_high = 0.99*2 - 2 = -0.02, A_low = 1.98 - 1 = 0.98. λ-return
    targets A + V: y_high = -2 + 2 = 0 / 1.98, y_low = -1 + 1 = 0 / 1.98 (no decided turn: slots 1, 3 unused).
    Truncated with ``truncation="terminal"``: as terminated (catches the field not reaching ``bootstrap_value``)."""
    traj = _traj("a", [0.0], truncated=truncated)
    batch = _batch([traj])
    values = np.array([[2.0, 0.0, 1.0, 0.0]], np.float32)
    cfg = hiper.Config(normalize_advantages=False, truncation=truncation)
    tg = hiper.compute_targets([traj], batch, values, cfg)
    bootstraps = truncated and truncation == "bootstrap"
    y, a_high, a_low = (1.98, -0.02, 0.98) if bootstraps else (0.0, -2.0, -1.0)
    np.testing.assert_allclose(tg.value_target[0], [y, 0.0, y, 0.0], atol=1e-6)
    assert tg.value_valid[0].tolist() == [True, False, True, False]
    assert tg.token_adv[0, SG].tolist() == pytest.approx([a_high] * 2, abs=1e-6)
    assert tg.token_adv[0, P + 4 : P + 7].tolist() == pytest.approx([a_low] * 3, abs=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# (f) GiGPO's step-level term
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step_weight", [1.0, 0.5])
def test_gigpo_step_term(step_weight):
    """Catches (f): both episodes return 1 (episode advantage 0, so GRPO would give 0 everywhere), but from the
    shared anchor s0 one step return is 0.95 (r = [0, 1], gamma 0.95) and the other 1 (r = [1, 0]): mean 0.975,
    deviations -/+0.025, unbiased std 0.025*sqrt(2) -> A_step = -/+0.025 / (0.0353553 + 1e-6) = -/+0.7070868.
    s1 and s2 are singleton anchor groups: 0. The step term is scaled by step_weight (0.5 -> -/+0.3535434)."""
    a = _traj("a", [0.0, 1.0], anchors=["s0", "s1"])
    b = _traj("b", [1.0, 0.0], anchors=["s0", "s2"])
    batch = _batch([a, b])
    tg = gigpo.compute_targets([a, b], batch, None, gigpo.Config(step_weight=step_weight))
    s = step_weight * 0.025 / (0.025 * math.sqrt(2) + 1e-6)
    np.testing.assert_allclose(tg.token_adv, _rows([-s, 0.0, s, 0.0]), atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# Every advantage type: the right tokens get it, and it flips with the sign of rewards and values
# ---------------------------------------------------------------------------------------------------------------

# GRPO: returns 1 and 0: mean 0.5, unbiased std sqrt(0.5) -> +/-0.5 / (0.7071068 + 1e-6)
E_GRPO = 0.5 / (math.sqrt(0.5) + 1e-6)
# GiGPO (gamma 0.95): episode term as GRPO (eps 1e-6); anchor s0 step returns 0.95 (winner) and 0 (loser):
# mean 0.475, unbiased std 0.475*sqrt(2) -> +/-0.475 / (0.6717514 + 1e-6); s1 and s2 are singletons
S_GIGPO = 0.475 / (0.475 * math.sqrt(2) + 1e-6)
FLAT_CASES = {
    # per-turn advantage of [win turn 0, win turn 1, lose turn 0, lose turn 1]
    "grpo": (grpo, [E_GRPO, E_GRPO, -E_GRPO, -E_GRPO]),
    "rloo": (rloo, [1.0, 1.0, -1.0, -1.0]),  # R_i - mean of the other: 1 - 0 and 0 - 1
    "gigpo": (gigpo, [E_GRPO + S_GIGPO, E_GRPO, -E_GRPO - S_GIGPO, -E_GRPO]),
}


@pytest.mark.parametrize("name", sorted(FLAT_CASES))
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_group_advantages_route_and_flip(name, sign):
    """Winner r = [0, 1] (anchors s0, s1), loser r = [0, 0] (anchors s0, s2); negating the rewards negates every
    advantage. Every response token of a turn carries its turn's advantage, the prompt nothing."""
    algo, per_turn = FLAT_CASES[name]
    win = _traj("w", [0.0, sign * 1.0], anchors=["s0", "s1"])
    lose = _traj("l", [0.0, 0.0], anchors=["s0", "s2"])
    batch = _batch([win, lose])
    tg = algo.compute_targets([win, lose], batch, None, algo.Config())
    np.testing.assert_allclose(tg.token_adv, sign * _rows(per_turn), atol=1e-5)
    np.testing.assert_array_equal(tg.loss_mask, batch.response_mask.numpy())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_ppo_turn_gae_routes_and_flips(sign):
    """r = [0, 1], V = [0.5, 0.2], terminated: delta_1 = 1 - 0.2 = 0.8, A_1 = 0.8;
    delta_0 = 0 + 0.99*0.2 - 0.5 = -0.302, A_0 = -0.302 + 0.99*0.95*0.8 = 0.4504. Negating r and V negates both."""
    traj = _traj("a", [0.0, sign * 1.0])
    batch = _batch([traj])
    values = sign * np.array([[0.5], [0.2]], np.float32)
    tg = ppo.compute_targets([traj], batch, values, ppo.Config(normalize_advantages=False))
    np.testing.assert_allclose(tg.token_adv, sign * _rows([0.4504, 0.8]), atol=1e-6)
    np.testing.assert_allclose(tg.value_target[:, 0], sign * np.array([0.9504, 1.0]), atol=1e-6)
    # whitening is odd too: whiten(-A) = -whiten(A)
    pos = ppo.compute_targets([traj], batch, values, ppo.Config())
    neg = ppo.compute_targets([_traj("a", [0.0, -sign])], batch, -values, ppo.Config())
    np.testing.assert_allclose(neg.token_adv, -pos.token_adv, atol=1e-6)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("form", ["return", "eq10"])
def test_hiper_advantages_route_and_flip(sign, norm, form):
    """Negating rewards and values negates A_low, A_high (linear in r and V) and A_switch (G-bar - V_sw, or
    (q - beta)(V_high - V_low) with beta unchanged); each lands on its own tokens (the reference case above). The
    last assert holds for either sign, so a switch advantage that ignored the sign would fail it at sign -1."""
    _batch, tg = _hiper_targets(sign, normalize_advantages=norm, switch_adv=form)
    _batch, ref = _hiper_targets(1.0, normalize_advantages=norm, switch_adv=form)
    a_switch = A_SWITCH if form == "return" else A_SWITCH_EQ10
    adv, mask = _hiper_expected(a_switch, A_HIGH, A_LOW, [True, False, True])
    np.testing.assert_array_equal(tg.loss_mask, mask)
    if not norm:
        np.testing.assert_allclose(tg.token_adv, sign * adv, atol=1e-6)
    np.testing.assert_allclose(tg.token_adv, sign * ref.token_adv, atol=1e-6)
    # the switch tokens of turns 1 and 2: return form [0.198, 0.4] (raw, normalised or not: its default
    # switch_norm is "raw"); eq10 [-0.06, 0.03], divided by std(A_low) when normalised
    expect = np.array([1.0, 1.0]) if form == "return" else np.array([-1.0, 1.0])
    assert (np.sign(tg.token_adv[1:, SW]) == sign * expect[:, None]).all()


# ---------------------------------------------------------------------------------------------------------------
# HiPER normalises switch / subgoal / action advantages separately, over turns
# ---------------------------------------------------------------------------------------------------------------


def test_hiper_per_type_normalisation_is_the_default_and_golden():
    """Per type, over the turns that carry it (reference case, return form):
    switch (turns 1-2; turn 0 has no switch decision and stays 0): [0.198, 0.4], mean 0.299, std 0.101 -> [-1, +1];
    subgoal (boundary turns 0, 2): [0.935896, 0.8], mean 0.867948, std 0.067948 -> [+1, -1];
    action + EOS: [0.291119, -0.002, 0.9], mean 0.396373, deviations [-0.105254, -0.398373, 0.503627],
        std sqrt((0.0110784 + 0.1587010 + 0.2536402)/3) = 0.3756859 -> [-0.2801649, -1.0603886, 1.3405535]."""
    cfg = hiper.Config()
    assert (cfg.adv_norm, cfg.switch_adv, cfg.resolved_switch_norm) == ("per_type", "return", "raw")
    assert cfg.normalize_advantages
    _batch, tg = _hiper_targets(switch_norm="own")
    adv, mask = _hiper_expected(
        [0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-0.2801649, -1.0603886, 1.3405535], [1, 0, 1]
    )
    np.testing.assert_array_equal(tg.loss_mask, mask)
    np.testing.assert_allclose(tg.token_adv, adv, atol=1e-5)


def test_hiper_eq10_is_scaled_by_the_action_advantages_and_not_recentred():
    """eq10's default switch_norm is "action": A_switch / std(A_low) = [-0.06, 0.03] / 0.3756859
    = [-0.1597078, 0.0798539], not centred (their mean stays -0.04)."""
    assert hiper.Config(switch_adv="eq10").resolved_switch_norm == "action"
    _batch, tg = _hiper_targets(switch_adv="eq10")
    np.testing.assert_allclose(tg.token_adv[1:, SW], [[-0.1597078] * 2, [0.0798539] * 2], atol=1e-6)
    assert (tg.token_adv[0, SW] == 0).all()


@pytest.mark.parametrize("eps", [0.002, 0.2])
def test_eq10_switch_advantage_keeps_the_scale_of_delta(eps):
    """delta = V_high - V_low_prev = eps on every turn (V_low_prev = V_high - eps; A_low and A_high do not read it):
    A_switch = (q - beta) eps = [-0.2 eps, +0.2 eps]. Scaled by std(A_low) = 0.3756859 it stays proportional to eps
    ([-0.2, 0.2] * eps / 0.3756859), the size of the evidence. Whitened on its own ("own") it is [-1, +1] for every
    eps: a consistent sign of an arbitrarily small delta becomes a unit-strength push (the defect this guards)."""
    values = HIPER_VALUES.copy()
    values[:, 1] = values[:, 0] - eps
    _batch, scaled = _hiper_targets(values=values, switch_adv="eq10")
    _batch, own = _hiper_targets(values=values, switch_adv="eq10", switch_norm="own")
    np.testing.assert_allclose(
        scaled.token_adv[1:, SW], [[-0.2 * eps / 0.3756859] * 2, [0.2 * eps / 0.3756859] * 2], rtol=1e-4
    )
    np.testing.assert_allclose(own.token_adv[1:, SW], [[-1.0] * 2, [1.0] * 2], atol=1e-4)


@pytest.mark.parametrize("scale", [0.01, 1.0])
def test_raw_return_switch_advantage_keeps_its_size_in_units_of_r(scale):
    """switch_norm="raw": the return form's A^switch unnormalised. Reference case: [0.198, 0.4] on turns 1-2 (turn 0
    undecided: 0). Rewards and values scaled by ``scale`` scale it the same ([0.00198, 0.004] at 0.01), while "own"
    whitens both scales to [-1, +1]: near-expert batches, whose A^switch is ~0 with a fitted critic, would otherwise
    get a unit-strength push from noise (measured on the 3-stage replay, docs/results/hiper_replay_3stage.md)."""
    _batch, raw = _hiper_targets(scale)  # the return form's default
    _batch, own = _hiper_targets(scale, switch_norm="own")
    np.testing.assert_allclose(raw.token_adv[1:, SW], [[0.198 * scale] * 2, [0.4 * scale] * 2], rtol=1e-4)
    assert (raw.token_adv[0, SW] == 0).all()
    np.testing.assert_allclose(own.token_adv[1:, SW], [[-1.0] * 2, [1.0] * 2], atol=1e-3)


def test_hiper_joint_whitening_flips_switch_signs_per_type_does_not():
    """Joint whitening over the turns' entries (eq10): switch [-0.06, 0.03] (decided turns), high [0.935896, 0.8]
    (boundaries), low [0.291119, -0.002, 0.9]: sum 2.897015 / 7 = mean 0.413859. The good SWITCH at turn 2
    (A_switch = +0.03) becomes (0.03 - 0.414) / std < 0: trained down. Per type it stays positive, and the bad KEEP
    at turn 1 (A_switch = -0.06) stays negative."""
    _batch, joint = _hiper_targets(adv_norm="joint", switch_adv="eq10")
    _batch, per_type = _hiper_targets(adv_norm="per_type", switch_adv="eq10")
    assert (joint.token_adv[2, SW] < 0).all() and (joint.token_adv[1, SW] < 0).all()  # the flip
    assert (per_type.token_adv[2, SW] > 0).all() and (per_type.token_adv[1, SW] < 0).all()
    np.testing.assert_array_equal(joint.loss_mask, per_type.loss_mask)


@pytest.mark.parametrize(
    "key,value",
    [("adv_norm", "pooled"), ("switch_adv", "eq9"), ("switch_norm", "batch"), ("critic_target", "mc")],
)
def test_hiper_rejects_unknown_choices(key, value):
    with pytest.raises(ValueError, match=key):
        hiper.Config(**{key: value})


# ---------------------------------------------------------------------------------------------------------------
# HIPIF: S_t = R_env + r^proc_t (Eq. 8), normalised over every step of the group (Eq. 9)
# ---------------------------------------------------------------------------------------------------------------


def _hipif_case():
    """Group g: a wins (env [0, 0, 10]) with a format penalty on turn 1; b loses (env [0, 0]) with an ungrounded-
    subgoal penalty on turn 0. Group h: c alone (env [10]), a group of one trajectory but one step too."""
    a = _traj("a", [0.0, 0.0, 10.0], gid="g")
    a.won = True
    a.turns[1].shaped["format"] = -0.1
    b = _traj("b", [0.0, 0.0], gid="g")
    b.turns[0].shaped["ungrounded_subgoal"] = -0.1
    b.turns[1].shaped["ungrounded_subgoal"] = 0.0
    c = _traj("c", [10.0], gid="h")
    c.won = True
    return [a, b, c]


# S_a = [10 + 0, 10 - 0.1, 10 + 0] = [10, 9.9, 10], S_b = [0 - 0.1, 0 + 0] = [-0.1, 0]   (Eq. 8)
# group g pools 5 steps: mean = 29.8 / 5 = 5.96; deviations [4.04, 3.94, 4.04, -6.06, -5.96]
# squares 16.3216 + 15.5236 + 16.3216 + 36.7236 + 35.5216 = 120.412; unbiased var 120.412 / 4 = 30.103
# group h holds one step: 0
HIPIF_STD = math.sqrt(30.103) + 1e-6
HIPIF_ADV = [4.04 / HIPIF_STD, 3.94 / HIPIF_STD, 4.04 / HIPIF_STD, -6.06 / HIPIF_STD, -5.96 / HIPIF_STD, 0.0]


def test_hipif_broadcasts_the_outcome_and_routes_each_penalty_to_its_step():
    """Catches: S_t built from the step's own reward (r_t instead of R_env + r^proc_t: a's first two steps would score
    0 and -0.1), penalties summed per trajectory or shifted by a turn, normalising per trajectory instead of per
    group, the sign of the process reward flipped (a's turn 1 would score above turns 0 and 2), or R_env read from
    the env's reward scale (App. B's outcome is 10/0 whatever the env pays: scaling env rewards by 0.1 changes
    nothing, a success_reward of 1 does)."""
    trajs = _hipif_case()
    tg = hipif.compute_targets(trajs, _batch(trajs), None, hipif.Config())
    np.testing.assert_allclose(tg.token_adv, _rows(HIPIF_ADV), atol=1e-5)
    assert tg.token_adv[1, P] < tg.token_adv[0, P]  # the penalised step of the winner scores lower
    for traj in trajs:
        for turn in traj.turns:
            turn.env_reward *= 0.1
    tg = hipif.compute_targets(trajs, _batch(trajs), None, hipif.Config())
    np.testing.assert_allclose(tg.token_adv, _rows(HIPIF_ADV), atol=1e-5)
    small = hipif.compute_targets(trajs, _batch(trajs), None, hipif.Config(success_reward=1.0))
    assert not np.allclose(small.token_adv, tg.token_adv, atol=1e-3)


def test_hipif_gigpo_adds_the_anchor_term_with_its_weight():
    """hipif_gigpo = HIPIF_ADV + step_weight * GiGPO's anchor term. In _hipif_case every anchor key is s<t>: group g
    has anchor s0 shared by a (step return of r = [0, -0.1, 10] with gamma 0.5: 0 + 0.5*(-0.1) + 0.25*10 = 2.45)
    and b (-0.1 + 0.5*0 = -0.1), and anchor s1 shared by a (-0.1 + 0.5*10 = 4.9) and b (0); s2 and h's s0 are
    singletons (0). Each pair: deviations +/-d/2, unbiased std d/sqrt(2) -> +/-1/sqrt(2) (up to eps)."""
    trajs = _hipif_case()
    batch = _batch(trajs)
    k = 1 / math.sqrt(2)
    for w in (0.0, 0.5):
        tg = hipif_gigpo.compute_targets(trajs, batch, None, hipif_gigpo.Config(gamma=0.5, step_weight=w))
        anchor = [k, k, 0.0, -k, -k, 0.0]
        expected = [h + w * s for h, s in zip(HIPIF_ADV, anchor, strict=True)]
        np.testing.assert_allclose(tg.token_adv, _rows(expected), atol=1e-4)


def test_hipif_gigpo_anchor_term_reads_the_process_rewards():
    """Catches GiGPO's step returns built from the env's rewards (alone or added). a and b both lose from anchors s0,
    s1; a's turn 1 repeats an action (-0.1) and the env pays it a partial score of 1 there (a dense env such as
    ScienceWorld), which HIPIF's binary outcome does not read. HIPIF: S = [0, -0.1, 0, 0], mean -0.025, deviations [0.025, -0.075, 0.025,
    0.025], unbiased var 0.0075 / 3 = 0.0025, std 0.05 -> [0.5, -1.5, 0.5, 0.5]. Anchor term (gamma 0.5): s0 returns
    a 0 + 0.5 * (-0.1) = -0.05 vs b 0, s1 returns a -0.1 vs b 0 -> a -1/sqrt(2), b +1/sqrt(2) at both anchors (with
    the env reward alone every step return is 0 and the term vanishes; with it added, a's returns are the larger)."""
    a = _traj("a", [0.0, 1.0], gid="g")
    a.turns[1].shaped["repeat"] = -0.1
    b = _traj("b", [0.0, 0.0], gid="g")
    k = 1 / math.sqrt(2)
    tg = hipif_gigpo.compute_targets([a, b], _batch([a, b]), None, hipif_gigpo.Config(gamma=0.5))
    np.testing.assert_allclose(tg.token_adv, _rows([0.5 - k, -1.5 - k, 0.5 + k, 0.5 + k]), atol=1e-4)
