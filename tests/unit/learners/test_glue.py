"""The training glue the driver calls (no Ray): each algorithm's ``compute_targets``, the shared clipped policy loss,
whitening and bootstrapping, against hand-computed values (the arithmetic is in the comments). HiPER's own cases
are in ``learners/algos/test_hiper.py``; both build their turns with
``tests/unit/glue_turns.py``.

Each test names the one-line mutation it is there to catch; they all pass on the real code.
"""

import math

import numpy as np
import pytest
import torch

from learners.algos import gigpo, grpo, hiper, hipif, hipif_gigpo, ppo, rloo
from learners.losses import behaviour_weights
from learners.targets import (
    PolicyInputs,
    bootstrap_value,
    clipped_policy_loss,
    whiten,
)
from tests.unit.glue_turns import (
    HIPIF_ADV,
    P,
    glue_batch,
    glue_rows,
    glue_traj,
    hipif_case,
)

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
    traj = glue_traj("a", [0.0, 1.0])
    batch = glue_batch([traj])
    tg = ppo.compute_targets([traj], batch, np.zeros((2, 1), np.float32), ppo.Config())
    np.testing.assert_allclose(tg.token_adv, glue_rows([-1.0, 1.0]), atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# (c) terminated episodes do not bootstrap, truncated ones do
# ---------------------------------------------------------------------------------------------------------------


def test_bootstrap_value_terminated_vs_truncated():
    """Catches (c) in ``bootstrap_value``: V(s_T) = 0 after termination, the stand-in value after truncation."""
    assert bootstrap_value(glue_traj("a", [0.0]), 5.0) == 0.0
    assert bootstrap_value(glue_traj("a", [0.0], truncated=True), 5.0) == 5.0
    assert bootstrap_value(glue_traj("a", [0.0], truncated=True), 5.0, "terminal") == 0.0  # the cut as an end


@pytest.mark.parametrize("truncated", [False, True])
def test_ppo_bootstrap(truncated):
    """One turn, r = 0, V(s_0) = 2. Terminated: A = 0 + 0 - 2 = -2, return 0.
    Truncated (V(s_1) ~ V(s_0) = 2): A = 0.99*2 - 2 = -0.02, return 1.98."""
    traj = glue_traj("a", [0.0], truncated=truncated)
    batch = glue_batch([traj])
    tg = ppo.compute_targets(
        [traj], batch, np.array([[2.0]], np.float32), ppo.Config(normalize_advantages=False)
    )
    adv, ret = (-0.02, 1.98) if truncated else (-2.0, 0.0)
    np.testing.assert_allclose(tg.token_adv, glue_rows([adv]), atol=1e-6)
    assert tg.value_target[0, 0] == pytest.approx(ret, abs=1e-6)


def test_a_truncated_episode_bootstraps_from_its_last_state():
    """Three turns, r = 0, V = (2, 1, 4), truncated, γ 0.5, λ 1 (PPO and HISR's turn-level GAE). V(s_3) ~ V(s_2) = 4:
    δ_2 = 0.5 · 4 − 4 = −2, δ_1 = 0.5 · 4 − 1 = 1, δ_0 = 0.5 · 1 − 2 = −1.5; A_2 = −2, A_1 = 1 + 0.5 · (−2) = 0,
    A_0 = −1.5 + 0.5 · 0 = −1.5; returns A + V = (0.5, 1, 2). Catches: the bootstrap read at V(s_0) = 2 (A would be
    (−1.75, −0.5, −3)), which a one-turn trajectory cannot tell apart."""
    from learners.algos import hisr

    traj = glue_traj("a", [0.0, 0.0, 0.0], truncated=True)
    for t in traj.turns:
        t.shaped = {"segment": 0.0}  # HISR's r_fuse = the shaped terms: 0 here, as PPO's env reward
    values = np.array([[2.0], [1.0], [4.0]], np.float32)
    for algo, cfg in (
        (ppo, ppo.Config(gamma=0.5, lam=1.0, normalize_advantages=False)),
        (hisr, hisr.Config(gamma=0.5, lam=1.0, normalize_advantages=False)),
    ):
        tg = algo.compute_targets([traj], glue_batch([traj]), values, cfg)
        np.testing.assert_allclose(tg.token_adv, glue_rows([-1.5, 0.0, -2.0]), atol=1e-6)
        np.testing.assert_allclose(tg.value_target[:, 0], [0.5, 1.0, 2.0], atol=1e-6)


def test_truncation_terminal_ends_a_cut_episode_at_zero():
    """The same three turns with ``truncation="terminal"``: V(s_3) = 0. δ_2 = 0 − 4 = −4, δ_1 = 0.5 · 4 − 1 = 1,
    δ_0 = 0.5 · 1 − 2 = −1.5; A_2 = −4, A_1 = 1 + 0.5 · (−4) = −1, A_0 = −1.5 + 0.5 · (−1) = −2; returns A + V =
    (0, 0, 0), as after a real end with r = 0. Catches: the config field not reaching ``turn_gae_targets`` (PPO,
    HISR) or ``bootstrap_value`` (the bootstrapped figures above)."""
    from learners.algos import hisr

    traj = glue_traj("a", [0.0, 0.0, 0.0], truncated=True)
    for t in traj.turns:
        t.shaped = {"segment": 0.0}
    values = np.array([[2.0], [1.0], [4.0]], np.float32)
    for algo in (ppo, hisr):
        cfg = algo.Config(gamma=0.5, lam=1.0, normalize_advantages=False, truncation="terminal")
        tg = algo.compute_targets([traj], glue_batch([traj]), values, cfg)
        np.testing.assert_allclose(tg.token_adv, glue_rows([-2.0, -1.0, -4.0]), atol=1e-6)
        np.testing.assert_allclose(tg.value_target[:, 0], [0.0, 0.0, 0.0], atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# (f) GiGPO's step-level term
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step_weight", [1.0, 0.5])
def test_gigpo_step_term(step_weight):
    """Catches (f): both episodes return 1 (episode advantage 0, so GRPO would give 0 everywhere), but from the
    shared anchor s0 one step return is 0.95 (r = [0, 1], gamma 0.95) and the other 1 (r = [1, 0]): mean 0.975,
    deviations -/+0.025, unbiased std 0.025*sqrt(2) -> A_step = -/+0.025 / (0.0353553 + 1e-6) = -/+0.7070868.
    s1 and s2 are singleton anchor groups: 0. The step term is scaled by step_weight (0.5 -> -/+0.3535434)."""
    a = glue_traj("a", [0.0, 1.0], anchors=["s0", "s1"])
    b = glue_traj("b", [1.0, 0.0], anchors=["s0", "s2"])
    batch = glue_batch([a, b])
    tg = gigpo.compute_targets([a, b], batch, None, gigpo.Config(step_weight=step_weight))
    s = step_weight * 0.025 / (0.025 * math.sqrt(2) + 1e-6)
    np.testing.assert_allclose(tg.token_adv, glue_rows([-s, 0.0, s, 0.0]), atol=1e-6)


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
    win = glue_traj("w", [0.0, sign * 1.0], anchors=["s0", "s1"])
    lose = glue_traj("l", [0.0, 0.0], anchors=["s0", "s2"])
    batch = glue_batch([win, lose])
    tg = algo.compute_targets([win, lose], batch, None, algo.Config())
    np.testing.assert_allclose(tg.token_adv, sign * glue_rows(per_turn), atol=1e-5)
    np.testing.assert_array_equal(tg.loss_mask, batch.response_mask.numpy())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_ppo_turn_gae_routes_and_flips(sign):
    """r = [0, 1], V = [0.5, 0.2], terminated: delta_1 = 1 - 0.2 = 0.8, A_1 = 0.8;
    delta_0 = 0 + 0.99*0.2 - 0.5 = -0.302, A_0 = -0.302 + 0.99*0.95*0.8 = 0.4504. Negating r and V negates both."""
    traj = glue_traj("a", [0.0, sign * 1.0])
    batch = glue_batch([traj])
    values = sign * np.array([[0.5], [0.2]], np.float32)
    tg = ppo.compute_targets([traj], batch, values, ppo.Config(normalize_advantages=False))
    np.testing.assert_allclose(tg.token_adv, sign * glue_rows([0.4504, 0.8]), atol=1e-6)
    np.testing.assert_allclose(tg.value_target[:, 0], sign * np.array([0.9504, 1.0]), atol=1e-6)
    # whitening is odd too: whiten(-A) = -whiten(A)
    pos = ppo.compute_targets([traj], batch, values, ppo.Config())
    neg = ppo.compute_targets([glue_traj("a", [0.0, -sign])], batch, -values, ppo.Config())
    np.testing.assert_allclose(neg.token_adv, -pos.token_adv, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# HIPIF: S_t = R_env + r^proc_t (Eq. 8), normalised over every step of the group (Eq. 9)
# ---------------------------------------------------------------------------------------------------------------


def test_hipif_broadcasts_the_outcome_and_routes_each_penalty_to_its_step():
    """Catches: S_t built from the step's own reward (r_t instead of R_env + r^proc_t: a's first two steps would score
    0 and -0.1), penalties summed per trajectory or shifted by a turn, normalising per trajectory instead of per
    group, the sign of the process reward flipped (a's turn 1 would score above turns 0 and 2), or R_env read from
    the env's reward scale (App. B's outcome is 10/0 whatever the env pays: scaling env rewards by 0.1 changes
    nothing, a success_reward of 1 does)."""
    trajs = hipif_case()
    tg = hipif.compute_targets(trajs, glue_batch(trajs), None, hipif.Config())
    np.testing.assert_allclose(tg.token_adv, glue_rows(HIPIF_ADV), atol=1e-5)
    assert tg.token_adv[1, P] < tg.token_adv[0, P]  # the penalised step of the winner scores lower
    for traj in trajs:
        for turn in traj.turns:
            turn.env_reward *= 0.1
    tg = hipif.compute_targets(trajs, glue_batch(trajs), None, hipif.Config())
    np.testing.assert_allclose(tg.token_adv, glue_rows(HIPIF_ADV), atol=1e-5)
    small = hipif.compute_targets(trajs, glue_batch(trajs), None, hipif.Config(success_reward=1.0))
    assert not np.allclose(small.token_adv, tg.token_adv, atol=1e-3)


def test_hipif_gigpo_adds_the_anchor_term_with_its_weight():
    """hipif_gigpo = HIPIF_ADV + step_weight * GiGPO's anchor term. In _hipif_case every anchor key is s<t>: group g
    has anchor s0 shared by a (step return of r = [0, -0.1, 10] with gamma 0.5: 0 + 0.5*(-0.1) + 0.25*10 = 2.45)
    and b (-0.1 + 0.5*0 = -0.1), and anchor s1 shared by a (-0.1 + 0.5*10 = 4.9) and b (0); s2 and h's s0 are
    singletons (0). Each pair: deviations +/-d/2, unbiased std d/sqrt(2) -> +/-1/sqrt(2) (up to eps)."""
    trajs = hipif_case()
    batch = glue_batch(trajs)
    k = 1 / math.sqrt(2)
    for w in (0.0, 0.5):
        tg = hipif_gigpo.compute_targets(trajs, batch, None, hipif_gigpo.Config(gamma=0.5, step_weight=w))
        anchor = [k, k, 0.0, -k, -k, 0.0]
        expected = [h + w * s for h, s in zip(HIPIF_ADV, anchor, strict=True)]
        np.testing.assert_allclose(tg.token_adv, glue_rows(expected), atol=1e-4)


def test_hipif_gigpo_anchor_term_reads_the_process_rewards():
    """Catches GiGPO's step returns built from the env's rewards (alone or added). a and b both lose from anchors s0,
    s1; a's turn 1 repeats an action (-0.1) and the env pays it a partial score of 1 there (a dense env such as
    ScienceWorld), which HIPIF's binary outcome does not read. HIPIF: S = [0, -0.1, 0, 0], mean -0.025, deviations [0.025, -0.075, 0.025,
    0.025], unbiased var 0.0075 / 3 = 0.0025, std 0.05 -> [0.5, -1.5, 0.5, 0.5]. Anchor term (gamma 0.5): s0 returns
    a 0 + 0.5 * (-0.1) = -0.05 vs b 0, s1 returns a -0.1 vs b 0 -> a -1/sqrt(2), b +1/sqrt(2) at both anchors (with
    the env reward alone every step return is 0 and the term vanishes; with it added, a's returns are the larger)."""
    a = glue_traj("a", [0.0, 1.0], gid="g")
    a.turns[1].shaped["repeat"] = -0.1
    b = glue_traj("b", [0.0, 0.0], gid="g")
    k = 1 / math.sqrt(2)
    tg = hipif_gigpo.compute_targets([a, b], glue_batch([a, b]), None, hipif_gigpo.Config(gamma=0.5))
    np.testing.assert_allclose(tg.token_adv, glue_rows([0.5 - k, -1.5 - k, 0.5 + k, 0.5 + k]), atol=1e-4)
