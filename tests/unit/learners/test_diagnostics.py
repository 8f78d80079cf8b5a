"""What an update did per token group (``learners.diagnostics``) and the hierarchy's shape per batch
(``launch.evaluation.episode_stats``), on hand-built turns (the layout of ``tests/unit/glue_turns``: prompt 0-2, response 3-9 =
[switch switch | subgoal subgoal | action action | eos])."""

import math

import numpy as np
import pytest

from actors.trajectory import Decision, Trajectory, Turn
from envs import success_reward
from launch.evaluation.episode_stats import expert_switches, hierarchy_stats, segment_lengths
from learners.diagnostics import (
    block_logprobs,
    group_rms,
    outcome_advantage,
    position_advantage,
    probe_deltas,
    probe_splits,
    ranking_auc,
    token_groups,
    update_kl,
)
from tests.unit.glue_turns import HIPER_REWARDS, HIPER_SWITCHES, L, glue_batch, glue_traj


def test_token_groups_split_the_response_by_decision_and_subgoals_by_boundary():
    """q = [SWITCH, KEEP, SWITCH]: a boundary turn's subgoal is a new decision ("subgoal"), the KEEP turn's a copy
    ("subgoal_keep"); the EOS is in no block ("other"). Swapping the boundary test fails here."""
    trajs = [glue_traj("a", HIPER_REWARDS, HIPER_SWITCHES)]
    groups = token_groups(trajs, glue_batch(trajs))
    assert sorted(groups) == ["action", "other", "subgoal", "subgoal_keep", "switch"]
    cols = {g: [np.flatnonzero(m[r]).tolist() for r in range(3)] for g, m in groups.items()}
    assert cols["switch"] == [[3, 4]] * 3 and cols["action"] == [[7, 8]] * 3 and cols["other"] == [[9]] * 3
    assert cols["subgoal"] == [[5, 6], [], [5, 6]] and cols["subgoal_keep"] == [[], [5, 6], []]
    union = sum(m.astype(int) for m in groups.values())
    assert (union[:, 3:10] == 1).all() and (union[:, :3] == 0).all()  # disjoint, the whole response


def test_group_rms_and_update_kl_golden():
    """Advantages 0.3 on switch tokens, -0.4 on action tokens: rms 0.3 and 0.4. Log-probs +0.1 after the update on
    switch tokens, -0.1 on action tokens, unchanged elsewhere: k3 = e^0.1 - 1 - 0.1 = 0.0051709 and
    e^-0.1 - 1 + 0.1 = 0.0048374; over all 21 response tokens (6 + 6 changed): (6 * 0.0051709 + 6 * 0.0048374) / 21
    = 0.0028595. Comparing the wrong arrays (new against new) would give 0."""
    trajs = [glue_traj("a", HIPER_REWARDS, HIPER_SWITCHES)]
    groups = token_groups(trajs, glue_batch(trajs))
    adv = np.zeros((3, L), np.float32)
    adv[groups["switch"]], adv[groups["action"]] = 0.3, -0.4
    rms = group_rms(adv, groups)
    assert rms["adv_rms/switch"] == pytest.approx(0.3) and rms["adv_rms/action"] == pytest.approx(0.4)
    assert rms["adv_rms/other"] == 0.0
    old = np.full((3, L), -1.0, np.float32)
    new = old.copy()
    new[groups["switch"]] += 0.1
    new[groups["action"]] -= 0.1
    kl = update_kl(old, new, groups)
    up, down = math.exp(0.1) - 1.1, math.exp(-0.1) - 0.9
    assert kl["kl_update/switch"] == pytest.approx(up, rel=1e-4)
    assert kl["kl_update/action"] == pytest.approx(down, rel=1e-4)
    assert kl["kl_update/subgoal"] == 0.0
    assert kl["kl_update"] == pytest.approx((6 * up + 6 * down) / 21, rel=1e-4)


def test_outcome_advantage_compares_won_and_lost_episodes_on_trained_tokens_only():
    """Episodes a (won), b and c (lost), three turns each; A = 1 on a's tokens, −0.5 on b's, 2 on c's, except c's
    last turn, −100 and out of the loss mask, and 100 on every prompt token (never trained). Won mean 1; lost mean
    over b's 3 · 7 and c's 2 · 7 trained tokens: (21 · −0.5 + 14 · 2) / 35 = 0.5; per episode 1 / −0.5 / 2, so a
    ranks above b, below c: AUC 1/2. Reading the prompt or the masked turn, or swapping won and lost, fails here."""
    trajs = [glue_traj(t, HIPER_REWARDS, HIPER_SWITCHES) for t in "abc"]
    trajs[0].won = True
    turns = glue_batch(trajs)
    resp = turns.response_mask.numpy().astype(bool)
    adv = np.full(resp.shape, 100.0, np.float32)
    for row, a in enumerate([1.0] * 3 + [-0.5] * 3 + [2.0, 2.0, -100.0]):
        adv[row, resp[row]] = a
    mask = resp.copy()
    mask[8] = False
    out = outcome_advantage(trajs, turns, adv, mask)
    assert out["adv_mean/won"] == pytest.approx(1.0) and out["adv_mean/lost"] == pytest.approx(0.5)
    assert out["adv_auc"] == 0.5
    # last turns: a's 1; b's −0.5 (c's is masked: reading it would give (7 · −0.5 + 7 · −100) / 14 = −50.25)
    assert out["adv_mean/won_last"] == 1.0 and out["adv_mean/lost_last"] == -0.5
    adv[1, resp[1]] = 5.0  # a's middle turn: the won mean moves, its last turn's does not
    moved = outcome_advantage(trajs, turns, adv, mask)
    assert moved["adv_mean/won"] == pytest.approx(7 / 3) and moved["adv_mean/won_last"] == 1.0
    trajs[2].won = True  # a and c won, b lost: both rank above b
    assert outcome_advantage(trajs, turns, adv, mask)["adv_auc"] == 1.0
    trajs[0].won = trajs[2].won = False  # one outcome: no ranking, no won mean
    one = outcome_advantage(trajs, turns, adv, mask)
    assert math.isnan(one["adv_auc"]) and "adv_mean/won" not in one


def test_position_advantage_correlates_a_with_the_turn_index_inside_each_episode():
    """Per-turn A (trained tokens): a [2, 1, 0], b [−0.5] × 3, c [2, 2] with its last turn masked (−100) and 100 on
    every prompt token. Centred per episode: a (1, 0, −1) against turn offsets (−1, 0, 1); b 0 against (−1, 0, 1);
    c 0 against (−0.5, 0.5). Σ a'x' = −2, Σ a'² = 2, Σ x'² = 2 + 2 + 0.5 = 4.5: corr = −2 / √9 = −2/3. Reading the
    masked turn (c's mean −32) or not centring per episode (b's −0.5 at offsets 3-5 of a pooled index) changes it."""
    trajs = [glue_traj(t, HIPER_REWARDS, HIPER_SWITCHES) for t in "abc"]
    turns = glue_batch(trajs)
    resp = turns.response_mask.numpy().astype(bool)
    adv = np.full(resp.shape, 100.0, np.float32)
    for row, a in enumerate([2.0, 1.0, 0.0] + [-0.5] * 3 + [2.0, 2.0, -100.0]):
        adv[row, resp[row]] = a
    mask = resp.copy()
    mask[8] = False
    assert position_advantage(turns, adv, mask)["adv_turn_corr"] == pytest.approx(-2 / 3)
    assert math.isnan(
        position_advantage(turns, np.ones_like(adv), mask)["adv_turn_corr"]
    )  # A flat in every episode


def _episode(switches, done_after):
    turns = [
        Turn(
            prompt_ids=[1],
            response_ids=[2],
            logprobs=[0.0],
            decision=Decision(action="a", switch=s),
            info={"subgoals_done": d},
        )
        for s, d in zip(switches, done_after, strict=True)
    ]
    return Trajectory("t", "g", "task", "synthetic", turns=turns)


def test_expert_switches_follow_the_envs_progress():
    """subgoals_done after each turn [0, 1, 1, 2, 3] -> done before each turn [0, 0, 1, 1, 2]: the expert starts a
    subgoal at turn 0 and after each completion (turns 2 and 4). A turn without the reading gives None."""
    ep = _episode([True, False, True, False, True], [0, 1, 1, 2, 3])
    assert expert_switches(ep).tolist() == [True, False, True, False, True]
    ep.turns[2].info.pop("subgoals_done")
    assert expert_switches(ep) is None


def test_hierarchy_stats_tell_expert_switching_from_switching_every_turn():
    """Both episodes finish 3 subgoals; the expert's switch points are turns 2 and 4 (decided turns 1-4: rate 0.5).
    Agent A switches there (agreement 4/4, segments [2, 2, 1]); agent B every turn (agreement 2/4, segments [1]*5).
    switch_rate counts decided turns only: A 2/4, B 4/4."""
    a = _episode([True, False, True, False, True], [0, 1, 1, 2, 3])
    b = _episode([True] * 5, [0, 1, 1, 2, 3])
    assert segment_lengths(a) == [2, 2, 1] and segment_lengths(b) == [1] * 5
    sa, sb = hierarchy_stats([a]), hierarchy_stats([b])
    assert (sa["switch_rate"], sa["switch_agreement"], sa["expert_switch_rate"]) == (0.5, 1.0, 0.5)
    assert (sb["switch_rate"], sb["switch_agreement"]) == (1.0, 0.5)
    assert sa["seglen_share/1"] == pytest.approx(1 / 3) and sa["seglen_share/2"] == pytest.approx(2 / 3)
    assert sb["seglen_share/1"] == 1.0 and sb["seglen_share/4+"] == 0.0
    assert sa["subgoals_done"] == 3.0 and sa["segment_len"] == pytest.approx(5 / 3)
    both = hierarchy_stats([a, b])
    assert both["switch_agreement"] == pytest.approx(6 / 8)


def test_success_rewards_of_the_envs():
    """R, the unit of every shaping amount: ALFWorld 10 (an option can set another), ScienceWorld's score 100, the
    rest 1."""
    assert success_reward("alfworld") == 10.0 and success_reward("alfworld", {"success_reward": 1.0}) == 1.0
    assert success_reward("scienceworld") == 100.0
    for name in ("synthetic", "textcraft", "virtualhome", "webshop"):
        assert success_reward(name) == 1.0


def test_the_probe_reads_each_expert_decision_and_averages_its_change_per_split():
    """Two expert episodes, q = [S, K, S] and [S, K]: decisions turn0, keep, switch | turn0, keep; final segments:
    turns 2 | 0-1. Log-probs per token: before -1, after -1 + 0.1 on switch tokens and + 0.2 on action tokens, so
    per turn the switch block (2 tokens) gains 0.2 and the action block (2 tokens) 0.4, the subgoal 0. The subgoal
    counts only where the expert writes a new one (turn 0 and SWITCH): 3 of the 5 states."""
    trajs = [glue_traj("a", HIPER_REWARDS, HIPER_SWITCHES), glue_traj("b", [0.0, 1.0], [True, False])]
    splits = probe_splits(trajs)
    assert [s["kind"] for s in splits] == ["turn0", "keep", "switch", "turn0", "keep"]
    assert [s["final_segment"] for s in splits] == [False, False, True, True, True]
    turns = glue_batch(trajs)
    before = np.full((5, L), -1.0)
    after = before.copy()
    groups = token_groups(trajs, turns)
    after[groups["switch"]] += 0.1
    after[groups["action"]] += 0.2
    b, a = block_logprobs(turns, before), block_logprobs(turns, after)
    assert b["switch"].tolist() == [-2.0] * 5 and b["action"].tolist() == [-2.0] * 5
    d = probe_deltas(splits, b, a)
    assert d["switch/all"] == pytest.approx(0.2) and d["action/keep"] == pytest.approx(0.4)
    assert d["subgoal/all"] == 0.0 and "subgoal/keep" not in d
    assert set(d) >= {"action/final", "action/nonfinal", "switch/switch", "switch/keep"}


def _role_turn(role, block, *, switch=None):
    """A 3-token response whose first two tokens are ``block`` (a STEP-HRL call writes one block per role)."""
    return Turn(
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11, 2],
        logprobs=[-1.0, -1.0, -1.0],
        masks={f"{block}_mask": np.array([1, 1, 0], bool)},
        decision=Decision(action="a" if block == "action" else "", valid=True, switch=switch),
        role=role,
    )


def test_the_probe_splits_by_role_and_skips_rows_without_a_block():
    """A STEP-HRL-shaped episode: high (subgoal), low (action), low (action), high (subgoal), low (action). After
    the update the subgoal tokens gain 0.1 each (+0.2 per high call) and the action tokens lose 0.05 (-0.1 per low
    call). A row without a block is left out of that block's mean (NaN), not counted as 0: action/all = -0.1 (the
    3 low calls), not 3 * -0.1 / 5 = -0.06; per role: high.subgoal/all = +0.2, low.action/all = -0.1, and the whole
    response moves +0.2 on high calls and -0.1 on low ones (high.response/all, low.response/all)."""
    turns = [
        _role_turn("high", "subgoal", switch=True),
        _role_turn("low", "action"),
        _role_turn("low", "action"),
        _role_turn("high", "subgoal", switch=True),
        _role_turn("low", "action"),
    ]
    traj = Trajectory(
        traj_id="x", group_id="g", task_id="t", env_name="synthetic", turns=turns, status="finished"
    )
    splits = probe_splits([traj])
    assert [s["role"] for s in splits] == ["high", "low", "low", "high", "low"]
    batch = glue_batch([traj])
    resp = batch.response_mask.numpy().astype(bool)
    before = np.where(resp, -1.0, 0.0)
    after = before.copy()
    sub, act = (
        batch.masks["subgoal_mask"].numpy().astype(bool),
        batch.masks["action_mask"].numpy().astype(bool),
    )
    after[sub & resp] += 0.1
    after[act & resp] -= 0.05
    b, a = block_logprobs(batch, before), block_logprobs(batch, after)
    assert np.isnan(b["action"][[0, 3]]).all() and b["action"][1] == pytest.approx(-2.0)
    d = probe_deltas(splits, b, a)
    assert d["action/all"] == pytest.approx(-0.1) and d["subgoal/all"] == pytest.approx(0.2)
    assert d["high.subgoal/all"] == pytest.approx(0.2) and d["low.action/all"] == pytest.approx(-0.1)
    assert d["high.response/all"] == pytest.approx(0.2) and d["low.response/all"] == pytest.approx(-0.1)
    assert "low.subgoal/all" not in d and "high.action/all" not in d


def test_ranking_auc_counts_pairs_and_half_ties():
    """Won scores (3, 1), lost (2, 1): pairs 3>2, 3>1, 1<2, 1=1 -> (1 + 1 + 0 + 0.5) / 4 = 0.625. Reversing the
    labels gives 1 - 0.625 (ties stay 1/2)."""
    scores = np.array([3.0, 2.0, 1.0, 1.0])
    won = np.array([True, False, True, False])
    assert ranking_auc(scores, won) == 0.625
    assert ranking_auc(scores, ~won) == 0.375
    assert ranking_auc(scores, np.ones(4, bool)) != ranking_auc(scores, np.ones(4, bool))
