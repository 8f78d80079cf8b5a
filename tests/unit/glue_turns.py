"""The turns, and the HiPER and HIPIF reference cases, that the glue tests share (``learners/test_glue.py``,
``learners/algos/test_hiper.py``, ``learners/test_prepare.py``, ``learners/test_diagnostics.py``).

Layout of every turn: prompt ``[1, 2, 3]`` (positions 0-2), then 7 response tokens
``[switch switch | subgoal subgoal | action action | eos]`` at positions 3-9 (batch width L = 10).
"""

import math

import numpy as np

from actors.trajectory import Decision, Trajectory, Turn
from learners.batch import build_turn_batch

P = 3  # prompt length: the response starts at position 3
SW, SG, ACT, EOS = slice(P, P + 2), slice(P + 2, P + 4), slice(P + 4, P + 6), P + 6
RESP = slice(P, P + 7)
L = P + 7
P_SPAN = 0.8  # probability of the sampled <switch> span: its two tokens have logprob log(0.8)/2 each


def glue_turn(reward=0.0, *, switch=None, last=False, truncated=False, anchor="s0"):
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


def glue_traj(tid, rewards, switches=None, *, gid="g", anchors=None, truncated=False):
    switches = switches or [True] * len(rewards)
    anchors = anchors or [f"s{t}" for t in range(len(rewards))]
    turns = [
        glue_turn(r, switch=s, last=t == len(rewards) - 1, truncated=truncated, anchor=a)
        for t, (r, s, a) in enumerate(zip(rewards, switches, anchors, strict=True))
    ]
    return Trajectory(
        traj_id=tid, group_id=gid, task_id="t", env_name="synthetic", turns=turns, status="finished"
    )


def glue_batch(trajs):
    return build_turn_batch(trajs, max_len=64, pad_id=0)


def glue_rows(per_turn):
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


def hiper_expected(a_switch, a_high, a_low, boundary, keep_copy_adv="low"):
    """Token advantages and loss mask of the reference layout: a KEEP turn's subgoal tokens are in the mask with
    the turn's A_low (``keep_copy_adv="low"``, the default) or advantage 0 (``"none"``: the KL anchor alone)."""
    adv = np.zeros((len(a_low), L), np.float32)
    mask = np.zeros((len(a_low), L), bool)
    for b in range(len(a_low)):
        copy = a_low[b] if keep_copy_adv == "low" else 0.0
        adv[b, SW], mask[b, SW] = a_switch[b], True
        adv[b, SG], mask[b, SG] = (a_high[b] if boundary[b] else copy), True
        adv[b, P + 4 : P + 7], mask[b, P + 4 : P + 7] = a_low[b], True  # action tokens + EOS get A_low
    return adv, mask


def hipif_case():
    """Group g: a wins (env [0, 0, 10]) with a format penalty on turn 1; b loses (env [0, 0]) with an ungrounded-
    subgoal penalty on turn 0. Group h: c alone (env [10]), a group of one trajectory but one step too."""
    a = glue_traj("a", [0.0, 0.0, 10.0], gid="g")
    a.won = True
    a.turns[1].shaped["format"] = -0.1
    b = glue_traj("b", [0.0, 0.0], gid="g")
    b.turns[0].shaped["ungrounded_subgoal"] = -0.1
    b.turns[1].shaped["ungrounded_subgoal"] = 0.0
    c = glue_traj("c", [10.0], gid="h")
    c.won = True
    return [a, b, c]


# S_a = [10 + 0, 10 - 0.1, 10 + 0] = [10, 9.9, 10], S_b = [0 - 0.1, 0 + 0] = [-0.1, 0]   (Eq. 8)
# group g pools 5 steps: mean = 29.8 / 5 = 5.96; deviations [4.04, 3.94, 4.04, -6.06, -5.96]
# squares 16.3216 + 15.5236 + 16.3216 + 36.7236 + 35.5216 = 120.412; unbiased var 120.412 / 4 = 30.103
# group h holds one step: 0
HIPIF_STD = math.sqrt(30.103) + 1e-6
HIPIF_ADV = [4.04 / HIPIF_STD, 3.94 / HIPIF_STD, 4.04 / HIPIF_STD, -6.06 / HIPIF_STD, -5.96 / HIPIF_STD, 0.0]
