"""Multi2's pure half: the executor's sub-goal-conditioned transitions, the IQL targets, the per-row weights of the
planner's SFT, the executor's AWR and the policy-anchored term, and the online KL term, against hand-computed
values (the arithmetic is in the comments). Each test names the mutation it is there to catch."""

import math

import numpy as np
import pytest
import torch

from actors.trajectory import Trajectory
from launch.driver.offline_data import anchor_trajectory
from learners.algos import multi2
from learners.algos.registry import get_algo
from learners.batch import build_turn_batch
from learners.prepare import learner_batch
from learners.targets import CriticInputs, PolicyInputs, sequences
from learners.transitions import multi2_transitions, with_truncation
from tests.unit.hrl_turns import turn


def _won(source: str = "expert") -> Trajectory:
    """Two sub-goals: get X (go, take: flagged, the score rises), craft Y (one step that wins)."""
    turns = [
        turn("planner"),  # 0  g_0
        turn("executor", completion=False, score=0.0),  # 1  go to L
        turn("executor", completion=True, score=0.5),  # 2  take X: completes g_0
        turn("planner"),  # 3  g_1
        turn("executor", completion=True, score=1.0, env_reward=10.0, terminated=True),  # 4  craft Y: wins
    ]
    return Trajectory("w", "g", "t", "synthetic", turns, status="finished", won=True, info={"source": source})


def test_executor_transitions_of_a_won_episode():
    """Catches: the sub-goal reward on an unflagged step, the env reward dropped (App. B keeps it), s' across a
    sub-goal boundary, a completed sub-goal bootstrapping."""
    tr = multi2_transitions(_won(), env_reward_scale=0.1)
    # 1: nothing, s' = 2; 2: flagged, score 0 -> 0.5: 1, done; 4: 0.1 · 10 + 1 (won) = 2, done; planners: 0, done
    assert tr.reward.tolist() == [0.0, 0.0, 1.0, 0.0, 2.0]
    assert tr.next_turn.tolist() == [-1, 2, -1, -1, -1]
    assert tr.done.tolist() == [True, False, True, True, True]
    assert tr.subtask.tolist() == [0, 0, 0, 1, 1]


def test_a_false_completion_ends_the_subgoal_unpaid_and_a_cut_one_bootstraps():
    """Catches: the completion flag paid without progress; a truncated step treated as terminal."""
    turns = [
        turn("planner"),
        turn("executor", completion=True, score=0.0),
        turn("planner"),
        turn("executor", completion=False, score=0.0, truncated=True),
    ]
    tr = multi2_transitions(Trajectory("f", "g", "t", "synthetic", turns, status="truncated"))
    assert tr.reward[1] == 0.0 and tr.done[1]
    assert tr.next_turn[3] == -1 and not tr.done[3]
    # truncation="terminal": the cut step is done; every other transition as it was
    cut = with_truncation(tr, "terminal")
    assert cut.done.tolist() == [True, True, True, True] and cut.next_turn.tolist() == tr.next_turn.tolist()
    assert with_truncation(tr, "bootstrap") is tr
    # through compute_targets (values[r, k] = 10 r + k² + 1, slots Q, V, Q_target, V_target), γ 0.5, r = 0:
    # the cut executor row 3 bootstraps from its own V_target = 30 + 9 + 1 = 40 -> Q target 20; terminal -> 0
    traj = Trajectory("f", "g", "t", "synthetic", turns, status="truncated")
    batch = build_turn_batch([traj], max_len=64, pad_id=0)
    for truncation, want in (("bootstrap", 20.0), ("terminal", 0.0)):
        t = multi2.compute_targets([traj], batch, _values(4), multi2.Config(gamma=0.5, truncation=truncation))
        assert t.value_target[3, 0] == want


def test_an_unknown_role_is_refused():
    with pytest.raises(ValueError, match="not a Multi2 role"):
        multi2_transitions(Trajectory("x", "g", "t", "synthetic", [turn("high")]))


def _values(b: int) -> np.ndarray:
    """values[r, k] = 10 r + k² + 1 (slots Q, V, Q_target, V_target)."""
    return np.array([[10 * r + k * k + 1 for k in range(4)] for r in range(b)], dtype=np.float32)


def test_iql_targets_and_row_weights_golden():
    """Catches: V_target(s') read from the critic (or at s), Q and V slots swapped, γ dropped, done ignored, a
    planner row given critic targets, A = V − Q, exp(−A/β), the planner's SFT weight dropped."""
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    cfg = multi2.Config(gamma=0.5, beta=2.0)
    t = multi2.compute_targets([traj], turns, _values(5), cfg)
    y, ok = t.value_target, t.value_valid
    # executor 1: r 0 + 0.5 · V_target(row 2) = 0.5 · (20 + 9 + 1) = 15; V target = Q_target(row 1) = 10 + 4 + 1
    assert y[1, 0] == 15 and y[1, 1] == 15
    # executor 2: r 1, done -> 1; V target 20 + 5 = 25.  executor 4: 10 + 1 (won), done -> 11; V target 45
    assert y[2, 0] == 1 and y[2, 1] == 25 and y[4, 0] == 11 and y[4, 1] == 45
    critic_rows = [False, True, True, False, True]  # the executor rows, on their Q and V slots only
    assert ok.tolist() == [[c, c, False, False] for c in critic_rows]
    # executor A = Q − V = (10 r + 1) − (10 r + 2) = −1 -> w = exp(−1 / 2); planner rows (expert) weight 1
    resp = turns.response_mask.numpy()
    w = math.exp(-0.5)
    for r, want in enumerate([1.0, w, w, 1.0, w]):
        assert t.token_adv[r][resp[r]] == pytest.approx(want) and np.all(t.token_adv[r][~resp[r]] == 0)
    assert t.loss_mask.tolist() == resp.tolist()
    assert t.stats["adv_mean"] == pytest.approx(-1.0) and t.stats["sft_rows"] == 2


def test_the_iql_form_reads_the_advantage_from_the_target_q():
    """``advantage_q="target"``: A = Q_target(s, a) − V(s) = (10 r + 4 + 1) − (10 r + 1 + 1) = 3 on every executor
    row (the online form's −1 above), w = exp(3 / 2); reading Q (slot 0) or V_target (slot 3) instead gives −1 or
    8. The critic's targets do not change."""
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    cfg = multi2.Config(gamma=0.5, beta=2.0, advantage_q="target")
    t = multi2.compute_targets([traj], turns, _values(5), cfg)
    online = multi2.compute_targets([traj], turns, _values(5), multi2.Config(gamma=0.5, beta=2.0))
    resp = turns.response_mask.numpy()
    assert t.stats["adv_mean"] == pytest.approx(3.0) and t.stats["adv_std"] == 0.0
    assert t.stats["adv_pos_share"] == 1.0 and online.stats["adv_pos_share"] == 0.0  # the sign of every A
    assert t.token_adv[2][resp[2]] == pytest.approx(math.exp(1.5))
    assert t.value_target.tolist() == online.value_target.tolist()


def test_whitened_advantages_rank_the_executor_rows_against_each_other():
    """``adv_norm="whiten"``: Q of executor row 2 raised by 3 gives A = Q − V = (−1, 2, −1) on rows 1, 2, 4; mean 0,
    sd √((1 + 4 + 1) / 3) = √2, so Â = (−1/√2, 2/√2, −1/√2) = (−0.7071, 1.4142, −0.7071) and w = exp(Â / 2) =
    (0.7022, 2.0281, 0.7022); the planner's SFT rows keep weight 1; the logged A is the critic's (mean 0, sd √2).
    Catches: whitening skipped, the planner rows whitened with the executor's, the stats read after whitening."""
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    values = _values(5)
    values[2, 0] += 3
    t = multi2.compute_targets([traj], turns, values, multi2.Config(gamma=0.5, beta=2.0, adv_norm="whiten"))
    resp = turns.response_mask.numpy()
    for r, want in enumerate([1.0, 0.70219, 2.02811, 1.0, 0.70219]):
        assert t.token_adv[r][resp[r]] == pytest.approx(want, abs=1e-4), r
    assert t.stats["adv_mean"] == pytest.approx(0.0, abs=1e-6) and t.stats["adv_std"] == pytest.approx(2**0.5)
    plain = multi2.compute_targets([traj], turns, values, multi2.Config(gamma=0.5, beta=2.0))
    assert plain.token_adv[2][resp[2]] == pytest.approx(math.exp(1.0))  # w = exp(2 / 2) without whitening


def test_planner_turns_of_collected_episodes_train_nothing():
    """Catches: SFT on the BC policy's own (partly failed) sub-goals; Eq. 3 clones the expert's."""
    traj = _won(source="collected")
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    t = multi2.compute_targets([traj], turns, _values(5), multi2.Config())
    assert not t.loss_mask[0].any() and not t.loss_mask[3].any() and t.loss_mask[1].any()


def test_anchor_rows_weigh_the_sampled_action_by_the_target_critics_advantage():
    """Catches: the anchor's A from the current Q (the authors' code reads the target critic), its sign flipped,
    anchor rows given critic targets (their action was never taken: no reward to regress on)."""
    from actors.inference import GenerationResult

    data = _won()
    sampled = GenerationResult(response_ids=[7, 8], logprobs=[-1.0, -2.0], text="x", finish_reason="stop")
    anchor = anchor_trajectory(data, data.turns[1], sampled, "anchor-1-0")
    turns = build_turn_batch([data, anchor], max_len=64, pad_id=0)
    values = _values(6)
    values[5] = [1.0, 2.0, 7.0, 0.0]  # the anchor row: Q 1, V 2, Q_target 7
    t = multi2.compute_targets([data, anchor], turns, values, multi2.Config(anchor_coef=0.5))
    # weight = λ (Q_target − V) = 0.5 · (7 − 2) = 2.5 on the anchor's two response tokens
    resp = turns.response_mask.numpy()[5]
    assert t.token_adv[5][resp].tolist() == [2.5, 2.5] and not t.value_valid[5].any()
    assert t.stats["anchor_rows"] == 1 and t.stats["anchor_adv_mean"] == 5.0
    assert anchor.turns[0].prompt_ids.tolist() == data.turns[1].prompt_ids.tolist()


def test_advantage_actor_loss_uses_a_itself():
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    t = multi2.compute_targets([traj], turns, _values(5), multi2.Config(actor_loss="advantage"))
    resp = turns.response_mask.numpy()
    assert np.all(t.token_adv[1][resp[1]] == -1.0)


def test_value_slots_read_q_at_the_action_end_and_v_at_the_state_end():
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    seqs = sequences(turns, multi2.VALUE_SLOTS)
    # prompt 4 tokens (0-3), response 3 (4-6): Q at 6, V at 3; slots 2, 3 read the target copy
    assert seqs.value_pos[0].tolist() == [6, 3, 6, 3]
    assert seqs.value_head.tolist() == [0, 1, 0, 1]
    assert seqs.value_from_target.tolist() == [False, False, True, True]


def test_value_loss_golden():
    """Catches: the expectile on the Q slot, τ read as 1 − τ, the target slots trained."""
    values = torch.tensor([[1.0, 2.0, 5.0, 5.0]])
    target = torch.tensor([[3.0, 1.0, 0.0, 0.0]])
    weight = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    inputs = CriticInputs(value_target=target, old_values=torch.zeros(1, 4), value_weight=weight)
    loss, m = multi2.value_loss(values, inputs, multi2.Config(expectile=0.9))
    # Q: 0.5 · (3 − 1)² = 2;  V: d = 1 − 2 = −1 < 0 -> |0.9 − 1| · 1 · 0.5 = 0.05
    assert float(loss) == pytest.approx(2.05) and m["q_loss"] == pytest.approx(2.0)
    assert m["v_loss"] == pytest.approx(0.05)


def test_policy_loss_golden_offline_and_online():
    """−w log π per token; online adds c · k3(π ‖ π_off). Catches: the KL's sign, KL(π_off ‖ π), c dropped."""
    mask = torch.tensor([[False, True, True]])
    w = torch.tensor([[0.0, 2.0, 2.0]])
    new_lp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)
    inputs = PolicyInputs(old_logprobs=torch.zeros(1, 3), token_adv=w, loss_mask=mask)
    loss, m = multi2.policy_loss(new_lp, inputs, multi2.Config())
    assert loss.tolist()[0] == pytest.approx([0.0, 2.0, 4.0]) and "kl" not in m
    ref = torch.tensor([[0.0, -1.0, -1.0]])
    online = PolicyInputs(old_logprobs=torch.zeros(1, 3), token_adv=w, loss_mask=mask, ref_logprobs=ref)
    loss, m = multi2.policy_loss(new_lp, online, multi2.Config(kl_coef=0.5, kl_kind="k3"))
    # token 2: log r = −2 − (−1) = −1, k3 = e^{1} − 1 − 1 = 0.71828; + 0.5 · 0.71828; token 1: log r = 0, k3 = 0
    assert loss.tolist()[0] == pytest.approx([0.0, 2.0, 4.0 + 0.5 * (math.e - 2)])
    loss.sum().backward()
    # d/dlp [−2 lp + 0.5 (e^{ref − lp} + lp − ref − 1)] = −2 + 0.5 (1 − e^{1}) at token 2
    assert new_lp.grad.tolist()[0] == pytest.approx([0.0, -2.0, -2.0 + 0.5 * (1 - math.e)])


def test_learner_batch_takes_no_reference_offline_and_carries_it_online():
    """Offline iterations have no π_off yet: the glue accepts ref None for an offline algorithm with a KL term
    (an online algorithm with one is refused), and carries π_off's log-probs into the batch online.
    Catches: the offline exemption lost (every offline iteration would fail), the online reference dropped."""
    algo = get_algo("multi2")
    cfg = multi2.Config(online_groups=2)
    assert algo.uses_reference(cfg) and not algo.uses_reference(multi2.Config(online_groups=0))
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    seqs = sequences(turns, algo.value_slots)
    zeros = np.zeros(seqs.input_ids.shape, np.float32)
    offline, _ = learner_batch(algo, cfg, [traj], turns, seqs, zeros, None, _values(5))
    ref = np.full(seqs.input_ids.shape, -0.25, np.float32)
    online, _ = learner_batch(algo, cfg, [traj], turns, seqs, zeros, ref, _values(5))
    np.testing.assert_array_equal(online.ref_logprobs, ref)
    np.testing.assert_array_equal(
        online.token_adv, offline.token_adv
    )  # the KL term is the loss's, not the weights'
    hipif = get_algo("hipif")
    with pytest.raises(ValueError, match="needs the reference"):
        learner_batch(hipif, hipif.Config(), [traj], turns, sequences(turns, ()), zeros, None, None)
    neg, _ = learner_batch(algo, cfg, [traj], turns, seqs, zeros, None, _values(5), advantage_scale=-1.0)
    np.testing.assert_array_equal(neg.token_adv, -offline.token_adv)


def test_awr_weight_is_capped_on_an_executor_row():
    """β 1, max_weight 5 (not the default 100): executor row 1 has A = Q − V = 4 − 1 = 3, exp(3) = 20.09 -> capped at
    5; row 2 A = 2 − 1 = 1 -> e = 2.718 (under the cap); row 4 A = −1 -> exp(−1) = 0.368.
    Catches: the cap removed or not taken from the config (exp(3) = 20.09 < 100 would pass uncapped)."""
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    values = _values(5)
    values[1, :2] = [4.0, 1.0]
    values[2, :2] = [2.0, 1.0]
    t = multi2.compute_targets([traj], turns, values, multi2.Config(beta=1.0, max_weight=5.0))
    resp = turns.response_mask.numpy()
    assert t.token_adv[1][resp[1]].tolist() == pytest.approx([5.0] * 3)
    assert t.token_adv[2][resp[2]].tolist() == pytest.approx([math.e] * 3)
    assert t.token_adv[4][resp[4]].tolist() == pytest.approx([math.exp(-1.0)] * 3)
    assert t.stats["awr_weight"] == pytest.approx((5.0 + math.e + math.exp(-1.0)) / 3)


def test_kl_of_a_masked_far_off_token_leaves_the_gradient_finite():
    """k3 at a masked (padding) position whose log-probs are far apart: log r = −100 − 0 would give
    exp(−log r) = e^100 = inf in float32, and torch.where's zero gradient times inf is NaN. Masked before the
    estimator, the gradient there is 0; the response token keeps d/dlp [−w lp + c k3] = −2 + 0.5 (1 − e^{1})
    (lp −2, ref −1: log r = −1). Catches: the KL estimated before masking."""
    mask = torch.tensor([[False, True]])
    new_lp = torch.tensor([[-100.0, -2.0]], requires_grad=True)
    inputs = PolicyInputs(
        old_logprobs=torch.zeros(1, 2),
        token_adv=torch.tensor([[0.0, 2.0]]),
        loss_mask=mask,
        ref_logprobs=torch.tensor([[0.0, -1.0]]),
    )
    loss, m = multi2.policy_loss(new_lp, inputs, multi2.Config(kl_coef=0.5, kl_kind="k3"))
    loss.sum().backward()
    assert torch.isfinite(new_lp.grad).all()
    assert new_lp.grad.tolist()[0] == pytest.approx([0.0, -2.0 + 0.5 * (1 - math.e)])
    assert m["kl"] == pytest.approx(math.e - 2)


@pytest.mark.parametrize(("direction", "v_loss"), [("iql", 0.05), ("authors", 0.95)])
def test_expectile_direction(direction, v_loss):
    """V 2 above its target 1 (d = Q_target − V = −1 < 0), τ 0.95: IQL weighs it |0.95 − 1| = 0.05 (V tracks the
    upper expectile); the authors' code weighs V − Q_target > 0 by τ = 0.95 (IQL at 1 − τ). Catches: the option
    ignored, or the default flipped to the code's."""
    values = torch.tensor([[0.0, 2.0, 0.0, 0.0]])
    inputs = CriticInputs(
        value_target=torch.tensor([[0.0, 1.0, 0.0, 0.0]]),
        old_values=torch.zeros(1, 4),
        value_weight=torch.tensor([[0.0, 1.0, 0.0, 0.0]]),
    )
    _, m = multi2.value_loss(values, inputs, multi2.Config(expectile_direction=direction))
    assert m["v_loss"] == pytest.approx(v_loss)
    assert multi2.Config().expectile_direction == "iql"
    with pytest.raises(ValueError, match="expectile_direction"):
        multi2.Config(expectile_direction="upper")


def _offline_data(tmp_path, acfg, **parts):
    from launch.driver.offline_data import OfflineData
    from tests.unit.stage_inputs import stage_inputs

    data = OfflineData(stage_inputs(get_algo("multi2"), acfg, tmp_path, **parts))
    data.dataset = [_won()]
    return data


def test_the_online_phase_starts_after_the_offline_iterations(tmp_path):
    """Iterations count from 1: ``offline_iterations`` 2 -> iterations 1 and 2 train on the stored data alone (no
    collection, no π_off), 3 is the first online one: it collects ``online_groups`` groups with the current policy
    and is where the driver freezes π_off. Catches: the online phase starting one iteration early (or late)."""
    calls = []

    def collect(tasks, group_size, seed, *, temperature):
        calls.append((list(tasks), group_size))
        return [_won(source="online") for _ in range(group_size)]

    acfg = multi2.Config(offline_iterations=2, online_groups=1, anchor_fraction=0.0)
    data = _offline_data(tmp_path, acfg, collect=collect, train_ids=["t"])
    assert [data.online(it) for it in (1, 2, 3, 4)] == [False, False, True, True]
    assert data.first_online() == 3
    for it in (1, 2):
        buffer, new = data.iteration_data(it)
        assert len(buffer) == 1 and new == [] and calls == []
    buffer, new = data.iteration_data(3)
    assert calls == [(["t"], 2)] and len(new) == 2 and len(buffer) == 3


def test_warmup_left_counts_the_critic_steps_taken(tmp_path):
    """warmup_steps 20: 20 owed before any step, 20 − 12 = 8 after 12 steps, none after 25. Catches: the warm-up
    counted from the wrong end (the actor would join at once)."""
    data = _offline_data(tmp_path, multi2.Config(warmup_steps=20))
    assert data.warmup_left() == 20
    data.critic_steps = 12
    assert data.warmup_left() == 8
    data.critic_steps = 25
    assert data.warmup_left() == 0


def test_anchors_are_sampled_only_once_the_critic_is_warm(tmp_path):
    """A critic warm-up pass takes no actor step, so it gets no anchor samples (no generation, no wasted rows)."""
    calls = []

    def sample(prompts, role, seed):
        from actors.inference import GenerationResult

        calls.append((len(prompts), role))
        return [GenerationResult([7], [-1.0], "x", "stop") for _ in prompts]

    data = _offline_data(tmp_path, multi2.Config(warmup_steps=5, anchor_fraction=1.0), sample=sample)
    assert data.anchors(1) == [] and calls == []
    data.critic_steps = 5
    assert len(data.anchors(2)) == 3 and calls == [(3, "executor")]  # the three executor states
