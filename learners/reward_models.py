"""HISR's two reward models: what they read and the turn rewards they produce (pure: numpy + torch only).

The segment process reward model (SPRM, HISR Eq. 2–3) reads a whole trajectory as one sequence and scores each
segment at its last token; the hindsight model (Eq. 4, prompts of Tables 9–10) re-predicts one masked turn from the
whole trajectory and its outcome. The driver (``launch.driver.hisr_rewards``) runs both through a learner group; everything that
decides their inputs and how their outputs become rewards is here, unit-tested without Ray:

    keep_for_reward_models(traj)                        App. B: drop wrong-format and repetitive trajectories
    sprm_sequences(trajs, segment_ids, encode, ...)     one row per trajectory, value slot k = segment k's last token
    hindsight_rows(trajs, render, intro)                one single-turn row per (trajectory, turn): Table 9 cloze
    segment_turn_rewards(R̂, log π_hind, log π, ids)    Eq. 5–8's segment reward, paid on each segment's last turn
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.trajectory import Trajectory, Turn
from learners.batch import Sequences, TurnBatch
from learners.diagnostics import ranking_auc
from learners.hindsight import (
    hindsight_importance,
    hindsight_modulated_rewards,
    segment_sum,
    segment_to_turn_rewards,
)

HOUSEHOLD_INTRO = (
    "Imagine you are a trajectory expert of household agents. You are given a completed exploration trajectory of a "
    "household agent in the environment for a certain task, but one of the interactive turns of the household agent "
    "is lost (represented by the underline '___'). Your goal is to predict the lost interactive turn, like the task "
    "of cloze. At the begining of the given trajectory, you can see a detailed description of the environment in "
    "which the household agent is located and the task to be accomplished. Then you can see all interactive turns "
    "except for the lost one. Each interative turn contains the 'Observation' returned by the environment (Note: if "
    "the envrionment outputs \"Nothing happened\", it means the previous action is invalid), the 'Thought' and "
    "'Action' output by the household agent. At the end, you can see the scalar reward for the given trajectory, "
    "which reflects how well the trajectory accomplishes the task ('0.00' and '1.00' represent complete failure and "
    "success of the task, respectively). When predicting the lost interactive turn, you should comprehensively "
    "consider the visible context before and after the lost interactive turn as well as the final scalar reward. "
    "You are only required to output the lost 'Thought' and 'Action'."
)
"""HISR Table 9 (ALFWorld & VirtualHome), verbatim up to the output format, which is the agent's own (the masked
turn is re-predicted in the policy's format, token for token)."""

WEB_INTRO = (
    "Imagine you are a trajectory expert of webshop agents. You are given a completed exploration trajectory of "
    "webshop agent in the web for a certain task, but one of the interactive turns of the webshop agent is lost "
    '(represented by the underline "___"). Your goal is to predict the lost interactive turn, like the task of '
    "cloze. At the beginning of the given trajectory, you can see a detailed description of the task that the "
    "webshop agent has to accomplish. Then you can see all interactive turns except for the lost one. Each "
    'interative turn contains the "Observation" returned by the web, the "Thought" and "Action" output by the '
    "webshop agent. At the end, you can see the scalar reward for the given trajectory, which reflects how well the "
    'trajectory accomplishes the task ("0.00" and "1.00" represent complete failure and success of the task, '
    "respectively). When predicting the lost interactive turn, you should comprehensively consider the visible "
    "context before and after the lost interactive turn, as well as the final scalar reward."
)
"""HISR Table 10 (WebShop), verbatim up to the output format."""

CLOZE_QUESTION = "Predict the lost interactive turn, like the task of cloze"
MASK = "___"


def hindsight_intro(env_name: str) -> str:
    return WEB_INTRO if env_name == "webshop" else HOUSEHOLD_INTRO


def outcome(traj: Trajectory) -> float:
    """The trajectory outcome R in [0, 1] the SPRM regresses on and the hindsight prompt states (HISR App. A: 1/0
    success on ALFWorld and VirtualHome, WebShop's score in [0, 1])."""
    if traj.env_name == "webshop":
        return float(min(1.0, max(0.0, traj.score)))
    return float(traj.won)


def keep_for_reward_models(traj: Trajectory, max_repeats: int = 3) -> bool:
    """HISR App. B filters collected trajectories "with wrong format and repetition": every turn parsed, and no
    action sent ``max_repeats`` or more times in a row."""
    if not traj.turns or not all(t.decision.valid for t in traj.turns):
        return False
    run, prev = 0, None
    for t in traj.turns:
        a = t.decision.action
        run = run + 1 if a and a == prev else 1
        prev = a
        if a and run >= max_repeats:
            return False
    return True


def one_outcome_warning(won: int, kept: int) -> str | None:
    """What to tell the user when the SPRM's training trajectories (trained to predict each one's outcome, HISR Eq. 3) all share
    one outcome: it then learns a constant and its segment rewards carry no signal."""
    if 0 < won < kept:
        return None
    which = "lost" if won == 0 else "won"
    return (
        f"all {kept} kept trajectories {which}, so the SPRM has no outcome to tell apart and its segment rewards "
        "carry no signal; collect more (algo.collect_tasks, algo.collect_per_task) or warm-start a stronger π_ref"
    )


def _observation_text(traj: Trajectory, k: int) -> str:
    obs = traj.turns[k].observation
    if k == 0 and traj.task and traj.task not in obs:
        obs = f"{obs}\nYour task is to: {traj.task}".strip()
    return obs


# ---------------------------------------------------------------------------------------------------------------
# SPRM (HISR Eq. 2-3)
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SprmBatch:
    """One row per trajectory (B rows, S = most segments of a row)::

    seqs            Sequences   value_pos int64[B, S]: the last token of segment k's last response; value_head 0
    segment_valid   bool[B, S]  segment k exists in row b and its last token survived the length cut
    outcome         float32[B]  R of Eq. 3
    """

    seqs: Sequences
    segment_valid: np.ndarray
    outcome: np.ndarray


def sprm_sequences(
    trajectories: Sequence[Trajectory],
    segment_ids: Sequence[np.ndarray],
    encode: Callable[[str], Sequence[int]],
    *,
    max_len: int,
    pad_id: int,
) -> SprmBatch:
    """Each trajectory as ``Observation: o_1 \\n a_1 Observation: o_2 \\n a_2 ...``: observations encoded from text,
    responses as the policy's own token ids. Segment k is read at its last turn's last response token (Eq. 2:
    "the hidden state of the last token in i-th segment"). Longer than ``max_len``: the oldest tokens go, and a
    segment that ended before the cut is invalid (it scores nothing and is left out of Eq. 3's sum)."""
    rows, ends = [], []
    for traj, ids in zip(trajectories, segment_ids, strict=True):
        if len(ids) != len(traj.turns):
            raise ValueError(f"{len(ids)} segment ids for {len(traj.turns)} turns of {traj.traj_id}")
        tokens: list[int] = []
        seg_end: dict[int, int] = {}
        for k, turn in enumerate(traj.turns):
            tokens += list(encode(f"Observation: {_observation_text(traj, k)}\n"))
            tokens += turn.response_ids.tolist()
            if turn.response_ids.size:
                seg_end[int(ids[k])] = len(tokens) - 1
        cut = max(0, len(tokens) - max_len)
        rows.append(np.asarray(tokens[cut:], dtype=np.int64))
        n_seg = int(ids[-1]) + 1 if len(ids) else 0
        ends.append([seg_end.get(s, -1) - cut for s in range(n_seg)])
    b = len(rows)
    width = max((r.size for r in rows), default=0)
    n_slots = max((len(e) for e in ends), default=0)
    input_ids = np.full((b, width), pad_id, dtype=np.int64)
    attention = np.zeros((b, width), dtype=bool)
    pos = np.zeros((b, n_slots), dtype=np.int64)
    valid = np.zeros((b, n_slots), dtype=bool)
    for r, (row, e) in enumerate(zip(rows, ends, strict=True)):
        input_ids[r, : row.size] = row
        attention[r, : row.size] = True
        for s, p in enumerate(e):
            if p >= 0:
                pos[r, s], valid[r, s] = p, True
    seqs = Sequences(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=np.zeros((b, width), dtype=bool),
        value_pos=pos,
        value_head=np.zeros(n_slots, dtype=np.int64),
    )
    return SprmBatch(seqs, valid, np.array([outcome(t) for t in trajectories], dtype=np.float32))


# ---------------------------------------------------------------------------------------------------------------
# Hindsight model (HISR Eq. 4, Tables 9-10)
# ---------------------------------------------------------------------------------------------------------------


def hindsight_prompt(traj: Trajectory, k: int, intro: str) -> str:
    """Table 9/10's cloze for turn ``k``: the whole trajectory with turn k's response replaced by ``___``, then the
    trajectory's outcome. The paper writes it as a Human/GPT dialogue; here it is one user message (the model
    re-predicts the masked turn in the agent's own format, so its tokens can be compared with the policy's)."""
    lines = [intro, ""]
    for j, turn in enumerate(traj.turns):
        lines.append(f"Observation: {_observation_text(traj, j)}")
        lines.append(f"Agent: {MASK if j == k else turn.response_text.strip()}")
    lines += ["", f"The scalar reward for the above trajectory is: {outcome(traj):.1f}", CLOZE_QUESTION]
    return "\n".join(lines)


def hindsight_rows(
    trajectories: Sequence[Trajectory], render: Callable[[str], Sequence[int]], intro: str
) -> tuple[list[Trajectory], list[tuple[int, int]]]:
    """One single-turn trajectory per (trajectory i, turn k) with a response: prompt = ``render`` (chat template +
    generation prompt) of the cloze, response = turn k's own token ids. Returns the rows and their (i, k); the rows
    are what ``learners.prepare`` batches for the hindsight model's training (Eq. 4 is the SFT loss on them) and for
    scoring log π_hind(a_k | o, a_<k, a_>k)."""
    rows, index = [], []
    for i, traj in enumerate(trajectories):
        for k, turn in enumerate(traj.turns):
            if not turn.response_ids.size:
                continue
            prompt = np.asarray(render(hindsight_prompt(traj, k, intro)), dtype=np.int64)
            cloze = Turn(prompt, turn.response_ids, np.zeros(turn.response_ids.size, np.float32))
            rows.append(
                Trajectory(f"{traj.traj_id}/hind{k}", traj.group_id, traj.task_id, traj.env_name, [cloze])
            )
            index.append((i, k))
    return rows, index


# ---------------------------------------------------------------------------------------------------------------
# Eq. 5-8: hindsight-modulated segment rewards on turns
# ---------------------------------------------------------------------------------------------------------------


SEGMENT_TERM = "segment"
"""The ``Turn.shaped`` entry holding (1 − α) · r^him, written by ``write_segment_rewards``."""


def per_turn_rows(
    index: Sequence[tuple[int, int]], values: np.ndarray, mask: np.ndarray, turns_per_traj: Sequence[int]
) -> list[list[np.ndarray]]:
    """Scatter a forward pass back to turns: row r of ``values`` float[B, L] (its ``mask`` bool[B, L] positions,
    in order) belongs to (trajectory i, turn k) = ``index[r]``; a turn without a row gets an empty array."""
    out = [[np.zeros(0, np.float32) for _ in range(n)] for n in turns_per_traj]
    for r, (i, k) in enumerate(index):
        out[i][k] = values[r][mask[r]]
    return out


def write_segment_rewards(
    trajectories: Sequence[Trajectory],
    segment_ids: Sequence[np.ndarray],
    sprm_scores: np.ndarray,
    policy: tuple[TurnBatch, np.ndarray],
    hindsight: tuple[TurnBatch, np.ndarray],
    *,
    beta: float,
    alpha: float,
    keep_sprm_scale: bool,
) -> dict[str, float]:
    """Write ``segment_turn_rewards`` into every turn's ``shaped[SEGMENT_TERM]`` (in place).

    ``sprm_scores`` float[B, S] (NaN: no such segment); ``policy`` = (the trajectories' turn batch, its
    log-probs float[B, L] under the policy); ``hindsight`` = (the batch of ``hindsight_rows``, with ``index``
    set to their (trajectory, turn), and its log-probs under the hindsight model). Returns the batch's
    diagnostics: segments per trajectory, the SPRM's predicted outcome, the segment reward per trajectory and the
    mean importance z."""
    lengths = [len(t.turns) for t in trajectories]
    pol = per_turn_rows(policy[0].index, policy[1], policy[0].response_mask.numpy(), lengths)
    hind = per_turn_rows(hindsight[0].index, hindsight[1], hindsight[0].response_mask.numpy(), lengths)
    totals, zs = [], []
    for i, traj in enumerate(trajectories):
        n_seg = int(segment_ids[i][-1]) + 1
        reward, z = segment_turn_rewards(
            sprm_scores[i, :n_seg],
            hind[i],
            pol[i],
            segment_ids[i],
            beta=beta,
            alpha=alpha,
            keep_sprm_scale=keep_sprm_scale,
        )
        for turn, v in zip(traj.turns, reward, strict=True):
            turn.shaped[SEGMENT_TERM] = float(v)
        totals.append(float(reward.sum()))
        zs.append(z)
    predicted = np.nansum(sprm_scores, axis=1)
    won = np.array([t.won for t in trajectories], bool)
    return {
        "hisr_segments": float(np.mean([s[-1] + 1 for s in segment_ids])),
        "hisr_sprm_total": float(np.nanmean(predicted)),
        "hisr_segment_reward": float(np.mean(totals)),
        "hisr_importance": float(np.mean(np.concatenate(zs))),
        # HISR's RL reward is r_fuse alone (Eq. 8), no outcome: it teaches only as far as the SPRM ranks won
        # trajectories above lost ones
        "hisr_sprm_auc": ranking_auc(predicted, won),
    }


def _pad(rows: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max((r.size for r in rows), default=0)
    out = torch.zeros(len(rows), width, dtype=torch.float64)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, : r.size] = torch.from_numpy(np.asarray(r, dtype=np.float64))
        mask[i, : r.size] = True
    return out, mask


def segment_turn_rewards(
    segment_rewards: np.ndarray,
    hind_logprobs: Sequence[np.ndarray],
    policy_logprobs: Sequence[np.ndarray],
    segment_ids: np.ndarray,
    *,
    beta: float,
    alpha: float,
    keep_sprm_scale: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """float64[T] (1 − α) · r^him paid on each segment's last turn (the first summand of Eq. 8; α · r^g is the
    ``action_grounding`` shaping term), and float64[T] the turn importances z(a_k).

    ``segment_rewards`` float[S]: the SPRM's R̂ (NaN for a segment it could not read: 0 reward);
    ``hind_logprobs`` / ``policy_logprobs``: per turn, float[|a_k|] log-probs of the response tokens under the
    hindsight model and the policy (empty for a turn without a response: z = 1);
    ``segment_ids`` int[T]. z(a_k) = exp(Σ_j log r(a_k^j) / (β|a_k|)) (Eq. 5–6), z_s = Σ_{k∈s} z(a_k) (Sec. 3.2),
    R_him = R̂ ⊙ z_s / ‖R̂ ⊙ z_s‖₁ (Eq. 7). ``keep_sprm_scale`` (our reading, default): R_him × ‖R̂‖₁, so the
    modulation redistributes the SPRM's predicted total instead of giving every trajectory total reward 1 — a
    failed trajectory (R̂ ≈ 0) would otherwise earn as much as a won one. Where ‖R̂‖₁ = 1, as in every case study
    of Tables 2 and 4–5, both readings give the printed R_him."""
    ids = torch.as_tensor(np.asarray(segment_ids, dtype=np.int64))[None]
    if len(hind_logprobs) != ids.shape[1] or len(policy_logprobs) != ids.shape[1]:
        raise ValueError("one log-prob row per turn is needed for the hindsight and the policy")
    r_hat = torch.as_tensor(np.asarray(segment_rewards, dtype=np.float64))[None]
    seg_valid = torch.isfinite(r_hat)
    hind, mask = _pad(hind_logprobs)
    pol, pmask = _pad(policy_logprobs)
    if not torch.equal(mask, pmask):
        raise ValueError("hindsight and policy log-probs must cover the same response tokens")
    z = hindsight_importance(hind, pol, mask, beta=beta)  # [T]
    z_s = segment_sum(z[None], ids, r_hat.shape[1])
    r_him = hindsight_modulated_rewards(r_hat, z_s, seg_valid)
    if keep_sprm_scale:
        r_him = r_him * torch.where(seg_valid, r_hat, 0.0).abs().sum()
    turn = segment_to_turn_rewards(r_him, ids)[0]
    return ((1.0 - alpha) * turn).numpy(), z.numpy()
