"""STEP-HRL's pure half: step-level transitions per role, IQL targets and the AWR / critic losses, against
hand-computed values (the arithmetic is in the comments). Each test names the mutation it is there to catch."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from actors.trajectory import Trajectory
from learners.algos import step_hrl
from learners.algos.registry import get_algo
from learners.batch import build_turn_batch
from learners.diagnostics import position_advantage
from learners.prepare import learner_batch
from learners.targets import CriticInputs, PolicyInputs, sequences
from learners.transitions import step_hrl_transitions
from tests.unit.hrl_turns import turn


def _won() -> Trajectory:
    """Two subtasks: get X (go, take: flagged, the score rises), craft Y (one step that wins)."""
    turns = [
        turn("high"),  # 0  g_0
        turn("low", completion=False, score=0.0),  # 1  go to L
        turn("progress"),  # 2  p after 1, read by 3
        turn("low", completion=True, score=0.5),  # 3  take X: ends g_0, score 0 -> 0.5
        turn("progress"),  # 4  p̂_0, read by the high level
        turn("high"),  # 5  g_1
        turn("low", completion=True, score=1.0, env_reward=10.0, terminated=True),  # 6  craft Y: wins
    ]
    return Trajectory("w", "g", "t", "synthetic", turns, status="finished", won=True)


def test_transitions_of_a_won_episode():
    """Catches: r̂ paid on an unflagged step (turn 1), the high level's R_k summed over the wrong subtask, the
    progress turn credited with the wrong low step, p̂_k not terminal, the last high turn bootstrapping."""
    tr = step_hrl_transitions(_won())
    # low 1: not flagged -> r̂ 0, s' = low 3; low 3: flagged and the score rose -> r̂ 1, done; low 6: won -> 1, done
    # progress 2: read by low 3 -> r = r̂_3 = 1, done because low 3 ends the subtask; progress 4: p̂_0 -> 0, done
    # high 0: R_0 = env reward of lows 1, 3 = 0, s' = high 5; high 5: R_1 = 10, terminated -> done
    assert tr.reward.tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 10.0, 1.0]
    assert tr.next_turn.tolist() == [5, 3, -1, -1, -1, -1, -1]
    assert tr.done.tolist() == [False, False, True, True, True, True, True]
    assert tr.subtask.tolist() == [0, 0, 0, 0, 0, 1, 1]


def test_a_false_completion_flag_ends_the_subtask_unpaid():
    """Catches: r̂ from the completion flag alone (a policy declaring completion would be paid for nothing)."""
    turns = [turn("high"), turn("low", completion=True, score=0.0), turn("progress"), turn("high")]
    turns[-1].truncated = True
    tr = step_hrl_transitions(Trajectory("f", "g", "t", "synthetic", turns, status="truncated"))
    assert tr.reward[1] == 0.0 and tr.done[1]  # flagged, the score did not rise: the subtask ends, r̂ = 0
    assert tr.reward[2] == 0.0 and tr.done[2]  # p̂_0


def test_a_truncated_subtask_bootstraps():
    """Catches: a cut episode treated as terminal (V(s') = 0) instead of bootstrapped (next_turn −1, not done)."""
    turns = [turn("high"), turn("low", completion=False, score=0.0, truncated=True)]
    tr = step_hrl_transitions(Trajectory("c", "g", "t", "synthetic", turns, status="truncated"))
    assert tr.next_turn.tolist() == [-1, -1] and tr.done.tolist() == [False, False]


def test_shaping_terms_add_to_each_roles_reward():
    traj = _won()
    traj.turns[1].shaped = {"format": -0.1}
    traj.turns[5].shaped = {"format": -0.1}
    tr = step_hrl_transitions(traj)
    assert tr.reward[1] == pytest.approx(-0.1) and tr.reward[5] == pytest.approx(9.9)


def test_an_unknown_role_is_refused():
    with pytest.raises(ValueError, match="not a STEP-HRL role"):
        step_hrl_transitions(Trajectory("x", "g", "t", "synthetic", [turn("agent")]))


def _values(b: int) -> np.ndarray:
    """values[r, k] = 10 r + k² (slots 0..5 the critic's Q/V per role, 6..11 the target's)."""
    return np.array([[10 * r + k * k for k in range(12)] for r in range(b)], dtype=np.float32)


def test_iql_targets_golden():
    """Catches: V_target(s') read from the critic instead of the target (or from s instead of s'), Q and V slots
    swapped, γ dropped, done ignored, A = V − Q, a role's targets written into another role's slots."""
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    t = step_hrl.compute_targets([traj], turns, _values(7), step_hrl.Config())
    y, ok = t.value_target, t.value_valid
    # row r = turn r. high: Q slot 0, V slot 1; low: 2, 3; progress: 4, 5; target slot = 6 + slot
    # high 0: r 0 + 0.99 · V_target_high(s' = row 5) = 0.99 · values[5, 7] = 0.99 · (50 + 49) = 98.01
    #         V target = Q_target_high(row 0) = values[0, 6] = 36
    assert y[0, 0] == pytest.approx(98.01) and y[0, 1] == 36
    # low 1: 0 + 0.99 · values[3, 9] = 0.99 · (30 + 81) = 109.89; V target = values[1, 8] = 10 + 64 = 74
    assert y[1, 2] == pytest.approx(109.89) and y[1, 3] == 74
    # progress 2: r = 1, done -> 1; V target = values[2, 10] = 20 + 100 = 120
    assert y[2, 4] == 1 and y[2, 5] == 120
    # low 3: r̂ 1, done -> 1; V target values[3, 8] = 94.  progress 4: 0, done; values[4, 10] = 140
    assert y[3, 2] == 1 and y[3, 3] == 94 and y[4, 4] == 0 and y[4, 5] == 140
    # high 5: R_1 = 10, done -> 10; V target values[5, 6] = 86.  low 6: 1; values[6, 8] = 124
    assert y[5, 0] == 10 and y[5, 1] == 86 and y[6, 2] == 1 and y[6, 3] == 124
    roles = ["high", "low", "progress", "low", "progress", "high", "low"]
    for r, role in enumerate(roles):
        want = {step_hrl.q_slot(role), step_hrl.v_slot(role)}
        assert set(np.flatnonzero(ok[r])) == want, r
    # A = Q − V of the critic: high 0 − 1 = −1, low 4 − 9 = −5, progress 16 − 25 = −9 (the 10 r cancels)
    adv = {"high": -1.0, "low": -5.0, "progress": -9.0}
    resp = turns.response_mask.numpy()
    for r, role in enumerate(roles):
        assert np.all(t.token_adv[r][resp[r]] == adv[role]) and np.all(t.token_adv[r][~resp[r]] == 0)
    assert t.stats["transitions_low"] == 3 and t.stats["transitions_high"] == 2


def test_the_iql_form_reads_the_advantage_from_the_target_q():
    """``advantage_q="target"``: A = Q_target(s, u) − V(s) = values[r, 6 + q] − values[r, v]: high (6² − 1²) = 35,
    low (8² − 3²) = 55, progress (10² − 5²) = 75 (the 10 r cancels); the online form gives −1, −5, −9 above."""
    from launch.config import ConfigError, resolve_algo_config

    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    t = step_hrl.compute_targets([traj], turns, _values(7), step_hrl.Config(advantage_q="target"))
    resp = turns.response_mask.numpy()
    adv = {"high": 35.0, "low": 55.0, "progress": 75.0}
    roles = ["high", "low", "progress", "low", "progress", "high", "low"]
    for r, role in enumerate(roles):
        assert np.all(t.token_adv[r][resp[r]] == adv[role]), r
    # sign and spread over the 7 rows: all > 0; 35 (x2), 55 (x3), 75 (x2): mean 385 / 7 = 55, deviations ±20 on
    # four rows, std = sqrt(4 * 400 / 7) = 15.119
    assert t.stats["adv_pos_share"] == 1.0 and t.stats["adv_std"] == pytest.approx(15.119, abs=1e-3)
    with pytest.raises(ConfigError, match=r"^algo.advantage_q: unknown value 'q'; allowed: online, target$"):
        resolve_algo_config(step_hrl.Config, {"advantage_q": "q"})


def test_whitened_advantages_are_whitened_per_role():
    """``adv_norm="whiten"``: Q_low of row 3 raised by 6 gives the low rows 1, 3, 6 A = (−5, 1, −5): mean −3, sd
    √((4 + 16 + 4) / 3) = √8, Â = (−2, 4, −2) / √8 = (−0.7071, 1.4142, −0.7071); the high rows (−1, −1) and the
    progress rows (−9, −9) have no spread, so Â = 0. Whitening the seven rows together would give the low row 3
    (1 + 29/7) / 3.44 instead. The logged A is the critic's: mean (−1 − 5 − 9 + 1 − 9 − 1 − 5) / 7 = −29/7."""
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    values = _values(7)
    values[3, step_hrl.q_slot("low")] += 6
    t = step_hrl.compute_targets([traj], turns, values, step_hrl.Config(adv_norm="whiten"))
    resp = turns.response_mask.numpy()
    want = [0.0, -0.70711, 0.0, 1.41421, 0.0, 0.0, -0.70711]
    for r, a in enumerate(want):
        assert t.token_adv[r][resp[r]] == pytest.approx(a, abs=1e-4), r
    assert t.stats["adv_mean"] == pytest.approx(-29 / 7)


def test_truncated_row_bootstraps_from_its_own_target_value():
    turns_ = [turn("high"), turn("low", completion=False, score=0.0, truncated=True)]
    traj = Trajectory("c", "g", "t", "synthetic", turns_, status="truncated")
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    t = step_hrl.compute_targets([traj], turns, _values(2), step_hrl.Config(gamma=0.5))
    # low row 1: 0 + 0.5 · V_target_low(row 1) = 0.5 · values[1, 9] = 0.5 · (10 + 81) = 45.5
    # high row 0: R_0 = 0, no next high, not terminated: 0.5 · values[0, 7] = 0.5 · 49 = 24.5
    assert t.value_target[1, 2] == pytest.approx(45.5) and t.value_target[0, 0] == pytest.approx(24.5)
    # truncation="terminal": both cut transitions are done, Q targets r = 0
    t = step_hrl.compute_targets([traj], turns, _values(2), step_hrl.Config(gamma=0.5, truncation="terminal"))
    assert t.value_target[1, 2] == 0.0 and t.value_target[0, 0] == 0.0


def test_value_slots_read_q_at_the_action_end_and_v_at_the_state_end():
    """Catches: Q read at the state (it would not see the action), target slots not flagged for the target copy."""
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    seqs = sequences(turns, step_hrl.VALUE_SLOTS)
    # every row: prompt 4 tokens (positions 0-3), response 3 (4-6): V at 3, Q at 6
    assert seqs.value_pos[0].tolist() == [6, 3] * 6
    assert seqs.value_head.tolist() == [0, 1, 2, 3, 4, 5] * 2
    assert seqs.value_from_target.tolist() == [False] * 6 + [True] * 6


def test_value_loss_golden():
    """Catches: the expectile applied to the Q slots (or the squared loss to V), τ₂ read as 1 − τ₂."""
    values = torch.zeros(1, 12)
    values[0, 2], values[0, 3] = 1.0, 2.0  # Q_low = 1, V_low = 2
    target = torch.zeros(1, 12)
    target[0, 2], target[0, 3] = 3.0, 1.0
    weight = torch.zeros(1, 12)
    weight[0, 2] = weight[0, 3] = 0.5
    inputs = CriticInputs(value_target=target, old_values=torch.zeros(1, 12), value_weight=weight)
    loss, m = step_hrl.value_loss(values, inputs, step_hrl.Config(expectile=0.95))
    # Q: 0.5 · (3 − 1)² = 2;  V: d = 1 − 2 = −1 < 0 -> |0.95 − 1| · 1 = 0.05, · 0.5 = 0.025
    assert float(loss) == pytest.approx(2.025) and m["q_loss"] == pytest.approx(2.0)
    target[0, 3] = 4.0  # d = 2 > 0: 0.95 · 4 · 0.5 = 1.9
    loss, _ = step_hrl.value_loss(values, inputs, step_hrl.Config(expectile=0.95))
    assert float(loss) == pytest.approx(3.9)


@pytest.mark.parametrize(("actor_loss", "weight"), [("awr", 2.0), ("advantage", 0.95 * math.log(2))])
def test_policy_loss_golden(actor_loss, weight):
    """A = 0.95 ln 2 -> w = exp(A / 0.95) = 2 (Eq. 13), or A itself. Catches: exp(−A/β), β multiplied in."""
    mask = torch.tensor([[False, True, True]])
    adv = torch.full((1, 3), 0.95 * math.log(2)) * mask
    new_lp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)
    inputs = PolicyInputs(old_logprobs=torch.zeros(1, 3), token_adv=adv, loss_mask=mask)
    loss, m = step_hrl.policy_loss(new_lp, inputs, step_hrl.Config(actor_loss=actor_loss))
    # −w · log π per token: w · 1, w · 2 on the response, 0 on the prompt
    assert loss.tolist()[0] == pytest.approx([0.0, weight, 2 * weight])
    assert m["awr_weight"] == pytest.approx(weight)
    loss.sum().backward()
    assert new_lp.grad.tolist()[0] == pytest.approx([0.0, -weight, -weight])  # raises log π of the action


def test_awr_weights_are_capped():
    mask = torch.tensor([[True]])
    inputs = PolicyInputs(old_logprobs=torch.zeros(1, 1), token_adv=torch.tensor([[50.0]]), loss_mask=mask)
    loss, _ = step_hrl.policy_loss(torch.tensor([[-1.0]]), inputs, step_hrl.Config(max_weight=100.0))
    assert float(loss) == pytest.approx(100.0)  # exp(50 / 0.95) capped at 100


def test_learner_batch_carries_the_iql_targets_and_flips_the_advantage_sign():
    """The driver's pure glue (``learners.prepare.learner_batch``) with STEP-HRL, against the hand values of
    ``test_iql_targets_golden``: targets and valid slots on their role's slots, the values the targets were computed
    from as ``old_values``, A = Q − V on every response token, no π_old pass (no ``logprob_gap`` although the
    learner's log-probs (0) differ from the engine's (−0.5)), and the negative control flips every A.
    Catches: targets or A not reaching the batch, slots shifted, ``old_values`` not the values the targets used."""
    algo = get_algo("step_hrl")
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    seqs = sequences(turns, algo.value_slots)
    zeros = np.zeros(seqs.input_ids.shape, np.float32)
    cfg = step_hrl.Config()
    batch, stats = learner_batch(algo, cfg, [traj], turns, seqs, zeros, None, _values(7))
    # high row 0: Q slot 0 ← 0.99 · values[5, 7] = 98.01, V slot 1 ← values[0, 6] = 36; low row 1: Q slot 2 ←
    # 0.99 · values[3, 9] = 109.89, V slot 3 ← values[1, 8] = 74; progress row 2: slot 4 ← 1, slot 5 ← 120
    assert batch.value_target[0, :2].tolist() == pytest.approx([98.01, 36.0])
    assert batch.value_target[1, 2:4].tolist() == pytest.approx([109.89, 74.0])
    assert batch.value_target[2, 4:6].tolist() == pytest.approx([1.0, 120.0])
    assert np.flatnonzero(batch.value_valid[1]).tolist() == [2, 3]
    np.testing.assert_array_equal(batch.old_values, _values(7))
    resp = turns.response_mask.numpy()
    # A = Q − V: high −1, low −5, progress −9 on the response tokens, 0 elsewhere
    adv = {"high": -1.0, "low": -5.0, "progress": -9.0}
    want = np.stack([np.where(resp[r], adv[t.role], 0.0) for r, t in enumerate(traj.turns)])
    np.testing.assert_array_equal(batch.token_adv, want)
    np.testing.assert_array_equal(batch.loss_mask, resp)
    assert "logprob_gap" not in stats and batch.ref_logprobs is None
    assert stats["adv_mean/won"] == pytest.approx(want[resp.astype(bool)].mean())  # the one episode won
    assert stats["adv_mean/won_last"] == -5.0  # its last turn: the winning low step, A = −5
    neg, neg_stats = learner_batch(
        algo, cfg, [traj], turns, seqs, zeros, None, _values(7), advantage_scale=-1.0
    )
    np.testing.assert_array_equal(neg.token_adv, -want)
    # the diagnostic reads the advantages the loss trains on: the control's are negated
    assert neg_stats["adv_mean/won"] == pytest.approx(-stats["adv_mean/won"]) and stats["adv_mean/won"] < 0
    assert stats["adv_turn_corr"] == pytest.approx(position_advantage(turns, want, resp)["adv_turn_corr"])
    assert (
        neg_stats["adv_turn_corr"] == pytest.approx(-stats["adv_turn_corr"]) and stats["adv_turn_corr"] != 0
    )


def test_polyak_update_moves_the_target_a_tau_step_towards_the_critic():
    """θ̄ ← (1 − τ) θ̄ + τ θ: target 10, critic 0, τ 0.2 -> 0.8 · 10 + 0.2 · 0 = 8; target 0, critic 5 -> 1.
    Catches: the update the wrong way round ((τ θ̄ + (1 − τ) θ) would give 2 and 4), the critic changed."""
    from learners.value_model import polyak_update_

    target = [torch.tensor([10.0, 0.0])]
    critic = [torch.tensor([0.0, 5.0], requires_grad=True)]
    polyak_update_(target, critic, 0.2)
    assert target[0].tolist() == pytest.approx([8.0, 1.0])
    assert critic[0].tolist() == [0.0, 5.0]


def test_the_driver_passes_target_tau_and_the_warm_up_to_the_learner():
    """The learner group's ``update`` arguments of a STEP-HRL update (``launch.driver.update_plan.update_arguments``):
    the config's τ₁ (0.3, not the default 0.2), and the whole update critic-only while warm-up steps are owed.
    Catches: ``target_tau`` never reaching the learner (the target critic would never move), the critic warm-up
    skipped, a target τ sent for an algorithm without a target critic."""
    from launch.config import TrainConfig
    from launch.driver.update_plan import ALL_STEPS, UpdatePlan, update_arguments

    algo, cfg = get_algo("step_hrl"), step_hrl.Config(target_tau=0.3)
    run = TrainConfig(algo="step_hrl").learner
    warm = update_arguments(algo, cfg, run, UpdatePlan(seed=7, warmup_left=5))
    assert warm["target_tau"] == 0.3 and warm["critic_only_steps"] == ALL_STEPS
    assert warm["loss_cfg"] is cfg and warm["agg"] == "seq-mean-token-sum" and warm["seed"] == 7
    assert warm["mini_batch_size"] == run.mini_batch_size
    warmed = update_arguments(algo, cfg, run, UpdatePlan(seed=7, mini_batch_size=4))
    assert warmed["critic_only_steps"] == 0 and warmed["target_tau"] == 0.3 and warmed["mini_batch_size"] == 4
    assert warm["epochs"] == run.ppo_epochs
    two = dataclasses.replace(run, ppo_epochs=2)
    assert update_arguments(algo, cfg, two, UpdatePlan(seed=7))["epochs"] == 2
    assert update_arguments(algo, cfg, two, UpdatePlan(seed=7, epochs=1))["epochs"] == 1
    from learners.algos import ppo

    assert update_arguments(get_algo("ppo"), ppo.Config(), run, UpdatePlan(seed=0))["target_tau"] == 0.0


def test_a_critic_warm_up_pass_moves_the_target_copy():
    """``learner.critic_warmup_passes``' arguments (``launch.driver.update_plan.warmup_arguments``): one critic epoch with the
    config's τ₁ (0.3). Catches the warm-up leaving the target copy at its zero start (V's targets then all 0: V never
    fitted), and a target τ sent for an algorithm without a target critic."""
    from launch.config import TrainConfig
    from launch.driver.update_plan import warmup_arguments
    from learners.algos import ppo

    algo, cfg = get_algo("step_hrl"), step_hrl.Config(target_tau=0.3)
    run = TrainConfig(algo="step_hrl").learner
    w = warmup_arguments(algo, cfg, run, seed=11)
    assert w["target_tau"] == 0.3 and w["epochs"] == 1 and w["seed"] == 11 and w["critic_only_steps"] == 0
    assert w["loss_cfg"] is cfg and w["mini_batch_size"] == run.mini_batch_size
    assert warmup_arguments(get_algo("ppo"), ppo.Config(), run, seed=0)["target_tau"] == 0.0


def test_env_reward_scale_applies_to_the_high_levels_return_only():
    """ScienceWorld: the paper's 0-1 reward from the adapter's 0-100 increments (R_1 = 0.01 · 10 = 0.1)."""
    tr = step_hrl_transitions(_won(), env_reward_scale=0.01)
    assert tr.reward[5] == pytest.approx(0.1) and tr.reward[6] == 1.0  # r̂ stays 1


def test_expert_local_progress_accumulates_within_a_subtask_and_restarts_with_the_next():
    """The deterministic stand-in for the paper's LLM-written local progress (STEP-HRL Eq. 3, Fig. 5)."""
    from actors.demos import expert_text, flatten_plan

    steps = flatten_plan([("get the X", ["go to L", "take X"]), ("craft Y", ["craft Y"])])
    texts = [expert_text("step_hrl", "progress", s) for s in steps]
    assert "done: go to L<" in texts[0] and "done: go to L; take X<" in texts[1]
    assert "done: craft Y<" in texts[2]


@pytest.mark.parametrize(("direction", "v_loss"), [("iql", 0.05), ("authors", 0.95)])
def test_expectile_direction(direction, v_loss):
    """V_low 2 above its target 1 (d = −1 < 0), τ₂ 0.95: Eq. 12 weighs it |0.95 − 1| = 0.05; the authors' code
    weighs V − Q_target > 0 by τ₂ = 0.95. Catches: the option ignored; a bad value accepted (one line, exit 2)."""
    from launch.config import ConfigError, resolve_algo_config

    values = torch.zeros(1, 12)
    values[0, 3] = 2.0
    target = torch.zeros(1, 12)
    target[0, 3] = 1.0
    weight = torch.zeros(1, 12)
    weight[0, 3] = 1.0
    inputs = CriticInputs(value_target=target, old_values=torch.zeros(1, 12), value_weight=weight)
    _, m = step_hrl.value_loss(values, inputs, step_hrl.Config(expectile_direction=direction))
    assert m["v_loss"] == pytest.approx(v_loss)
    with pytest.raises(
        ConfigError, match=r"^algo.expectile_direction: unknown value 'upper'; allowed: iql, authors$"
    ):
        resolve_algo_config(step_hrl.Config, {"expectile_direction": "upper"})


class _CriticLearner:
    """Stands in for the learner group in ``Updater.warm_up_critic``: each pass reads its values (the critic as the
    previous pass left it: 10 r + k² + 100 · passes so far) and records the ``update`` call."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def values(self, seqs):
        return _values(len(seqs.input_ids)) + 100.0 * len(self.calls)

    def update(self, batch, **kw):
        self.calls.append({"batch": batch, **kw})
        return {"value_loss": 5.0 - len(self.calls)}


def test_the_updaters_critic_warm_up_sends_each_pass_the_polyak_rate_and_fresh_targets():
    """``Updater.warm_up_critic``, the call site of ``warmup_arguments``: every pass trains the critic alone (no
    policy loss) for one epoch with the config's τ (0.3), a seed per pass, on targets recomputed from the values
    the previous pass left. Catches the warm-up sending the RL update's arguments (τ 0 for a target critic read
    from the wrong place, the run's epochs), reusing one pass's targets, or one seed for every pass."""
    from launch.config import TrainConfig
    from launch.driver.update_plan import UpdateInputs, UpdaterSettings
    from launch.driver.updater import Updater

    algo, cfg = get_algo("step_hrl"), step_hrl.Config(target_tau=0.3)
    run = dataclasses.replace(TrainConfig(algo="step_hrl").learner, ppo_epochs=2)  # a pass is 1 epoch, not 2
    learner = _CriticLearner()
    up = Updater(learner, algo, cfg, UpdaterSettings(run, pad_id=0, success_reward=10.0))
    traj = _won()
    turns = build_turn_batch([traj], max_len=64, pad_id=0)
    seqs = sequences(turns, algo.value_slots)
    zeros = np.zeros(seqs.input_ids.shape, np.float32)
    inputs = UpdateInputs([traj], turns, seqs, up.adapter_rows([traj], turns))
    out = up.warm_up_critic(inputs, (zeros, None), 2, 3)
    assert out == {"critic_warmup_loss_first": 4.0, "critic_warmup_loss_last": 3.0}
    first, second = learner.calls
    for k, call in enumerate(learner.calls):
        assert call["policy_loss"] is None and call["value_loss"] is algo.value_loss
        assert call["target_tau"] == 0.3 and call["epochs"] == 1 and call["critic_only_steps"] == 0
        assert call["seed"] == 3 + 7919 * (k + 1) and call["loss_cfg"] is cfg
    # high row 0's V slot 1 ← Q_target of row 0 = values[0, 6]: 36 in pass 1, 136 after one pass (+100)
    assert first["batch"].value_target[0, 1] == pytest.approx(36.0)
    assert second["batch"].value_target[0, 1] == pytest.approx(136.0)
