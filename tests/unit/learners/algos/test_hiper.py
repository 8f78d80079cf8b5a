"""HiPER's ``compute_targets`` against hand-computed values (the arithmetic is in the comments): the reference
case's advantages and critic targets (HAE, Eq. 8-13), bootstrapping, routing and sign, and the per-type
normalisation. Each test names the one-line mutation it is there to catch; the turns come from
``tests/unit/glue_turns.py``.
"""

import math

import numpy as np
import pytest

from learners.algos import hiper
from learners.targets import value_positions
from tests.unit.glue_turns import (
    A_HIGH,
    A_LOW,
    A_SWITCH,
    A_SWITCH_EQ10,
    HIPER_REWARDS,
    HIPER_SWITCHES,
    HIPER_VALID,
    HIPER_VALUES,
    SG,
    SW,
    Y_HIGH,
    Y_HIGH_TD0,
    Y_LOW,
    Y_LOW_TD0,
    P,
    glue_batch,
    glue_traj,
    hiper_expected,
)


def _hiper_targets(sign=1.0, values=HIPER_VALUES, **cfg):
    """The reference case's targets; its golden values (``tests/unit/glue_turns.py``) are Eq. 7's segment-end
    bootstrap, V_high alone (``low_bootstrap="v_high"``) unless a test asks for the default "lambda"."""
    traj = glue_traj("a", [sign * r for r in HIPER_REWARDS], HIPER_SWITCHES)
    batch = glue_batch([traj])
    cfg = {"low_bootstrap": "v_high", **cfg}
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
    adv, mask = hiper_expected(a_switch, A_HIGH, A_LOW, [True, False, True])
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
    batch = glue_batch([glue_traj("a", HIPER_REWARDS, HIPER_SWITCHES)])
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


@pytest.mark.parametrize(
    ("truncated", "truncation"), [(False, "bootstrap"), (True, "bootstrap"), (True, "terminal")]
)
def test_hiper_bootstrap(truncated, truncation):
    """One turn, r = 0, V_high(s_0) = 2, V_low(s_0, o_0) = 1. Terminated: A_high = 0 - 2 = -2, A_low = 0 - 1 = -1.
    Truncated (V_high(s_1) ~ V_high(s_0) = 2): A_high = 0.99*2 - 2 = -0.02, A_low = 1.98 - 1 = 0.98. λ-return
    targets A + V: y_high = -2 + 2 = 0 / 1.98, y_low = -1 + 1 = 0 / 1.98 (no decided turn: slots 1, 3 unused).
    Truncated with ``truncation="terminal"``: as terminated (catches the field not reaching ``bootstrap_value``)."""
    traj = glue_traj("a", [0.0], truncated=truncated)
    batch = glue_batch([traj])
    values = np.array([[2.0, 0.0, 1.0, 0.0]], np.float32)
    cfg = hiper.Config(normalize_advantages=False, truncation=truncation)
    tg = hiper.compute_targets([traj], batch, values, cfg)
    bootstraps = truncated and truncation == "bootstrap"
    y, a_high, a_low = (1.98, -0.02, 0.98) if bootstraps else (0.0, -2.0, -1.0)
    np.testing.assert_allclose(tg.value_target[0], [y, 0.0, y, 0.0], atol=1e-6)
    assert tg.value_valid[0].tolist() == [True, False, True, False]
    assert tg.token_adv[0, SG].tolist() == pytest.approx([a_high] * 2, abs=1e-6)
    assert tg.token_adv[0, P + 4 : P + 7].tolist() == pytest.approx([a_low] * 3, abs=1e-6)


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
    adv, mask = hiper_expected(a_switch, A_HIGH, A_LOW, [True, False, True])
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
    adv, mask = hiper_expected(
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
    [
        ("adv_norm", "pooled"),
        ("switch_adv", "eq9"),
        ("switch_norm", "batch"),
        ("critic_target", "mc"),
        ("low_bootstrap", "mc"),
    ],
)
def test_hiper_rejects_unknown_choices(key, value):
    with pytest.raises(ValueError, match=key):
        hiper.Config(**{key: value})


def test_a_cut_is_terminal_by_default():
    """HiPER's default ``truncation`` is the authors' terminal cut: one truncated turn, r = 0, V_high(s_0) = 0.5,
    V_low(s_0, o_0) = 0.2: A_low = 0 + 0.99 · 0 − 0.2 = −0.2 (bootstrapped it would read V_high(s_0): 0.99 · 0.5
    − 0.2 = 0.295). Catches the default left at "bootstrap"."""
    assert hiper.Config().truncation == "terminal"
    traj = glue_traj("a", [0.0], truncated=True)
    batch = glue_batch([traj])
    values = np.array([[0.5, 0.0, 0.2, 0.0]], np.float32)
    tg = hiper.compute_targets([traj], batch, values, hiper.Config(normalize_advantages=False))
    assert tg.token_adv[0, P + 4] == pytest.approx(-0.2, abs=1e-6)


@pytest.mark.parametrize("keep_copy_adv", ["low", "none"])
def test_a_keep_turns_copied_subgoal_carries_the_turns_action_advantage(keep_copy_adv):
    """The reference case's KEEP turn (row 1): its copied subgoal's tokens get the turn's A_low = −0.002
    (``keep_copy_adv="low"``, the default) or 0 ("none"), and stay in the loss mask either way (the KL anchor);
    boundary turns' subgoals keep A_high. Catches the copy left without an advantage (the KEEP copies then took
    HiPER's largest update KL)."""
    _batch, tg = _hiper_targets(normalize_advantages=False, keep_copy_adv=keep_copy_adv)
    want = -0.002 if keep_copy_adv == "low" else 0.0
    assert tg.token_adv[1, SG].tolist() == pytest.approx([want] * 2, abs=1e-6)
    assert tg.loss_mask[1, SG].all()
    assert tg.token_adv[0, SG].tolist() == pytest.approx([A_HIGH[0]] * 2, abs=1e-6)
    adv, _mask = hiper_expected(A_SWITCH, A_HIGH, A_LOW, [True, False, True], keep_copy_adv)
    np.testing.assert_allclose(tg.token_adv, adv, atol=1e-6)


def test_low_bootstrap_lambda_reaches_the_segment_end():
    """``low_bootstrap="lambda"``: segment 0's last turn (t=1) bootstraps to the high level's λ-return at b_1 = 2,
    V_high(s_2) + A_high[2] = 0.2 + 0.8 = 1.0, not V_high(s_2) = 0.2:
    t=1: y = 0.5 + 0.99·1.0 = 1.49, A_low = 1.49 − 0.7 = 0.79; t=0: A_low = 0.293 + 0.99·0.95·0.79 = 1.035995;
    t=2 ends the episode (terminal) and keeps 0.9. Catches the field not reaching ``hierarchical_advantages``."""
    assert hiper.Config().low_bootstrap == "lambda"
    _batch, tg = _hiper_targets(normalize_advantages=False, low_bootstrap="lambda")
    adv, _mask = hiper_expected(A_SWITCH, A_HIGH, [1.035995, 0.79, 0.9], [True, False, True])
    np.testing.assert_allclose(tg.token_adv, adv, atol=1e-6)
    np.testing.assert_allclose(tg.value_target[:, 2], [1.035995 + 0.4, 0.79 + 0.7, 1.0], atol=1e-6)
