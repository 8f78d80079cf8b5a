"""Episode agents + rollout loop driven by FakeEngine (scripted replies) on the synthetic env, real SmolLM2 tokenizer.

What must hold for every protocol: turns carry the engine's exact token ids, masks cover exactly the tagged spans
(the masked tokens decode to text containing the block, and dropping either end token loses it), HiPER's KEEP
keeps the subgoal, segment indexes count boundaries, garbage becomes an invalid turn (never an exception), and
STEP-HRL / Multi2 emit their roles in the papers' order with the right adapters.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from actors.agents.parsing import TAG_TO_MASK
from actors.episodes import EpisodeRequest, response_pieces
from actors.inference import SamplingParams
from actors.protocols import AgentFactory, make_agent
from actors.trajectory import Trajectory, Turn
from envs.synthetic import SyntheticHierEnv, parse_task_id
from tests.unit.scripted_engine import run_episodes, scripted

PARAMS = SamplingParams(temperature=1.0, max_tokens=256)


def play(engine, protocol: str, task: str, *, max_steps: int = 10, adapters=None, envs=None) -> Trajectory:
    envs = envs or [SyntheticHierEnv()]
    (traj,) = run_episodes(
        engine,
        envs,
        [EpisodeRequest(task, 0, "g", "g/0")],
        agent=AgentFactory(protocol, "synthetic", adapters=adapters),
        params=PARAMS,
        max_steps=max_steps,
    )
    return traj


def check_tokens_and_masks(tok, traj: Trajectory) -> None:
    """Every turn: ids decode to the prompt/response, logprobs sized, masks cover exactly their tagged spans."""
    for turn in traj.turns:
        assert turn.prompt_ids.dtype == np.int64 and turn.response_ids.dtype == np.int64
        assert tok.decode(turn.response_ids.tolist(), skip_special_tokens=True) == turn.response_text
        assert turn.observation in tok.decode(turn.prompt_ids.tolist()) or turn.role == "planner"
        assert turn.logprobs.shape == turn.response_ids.shape and np.all(turn.logprobs == -1.0)
        assert turn.info["prompt_tokens"] == turn.prompt_ids.size
        assert turn.info["response_tokens"] == turn.response_ids.size
        for tag, mask_name in TAG_TO_MASK.items():
            if mask_name not in turn.masks:
                continue
            mask = turn.masks[mask_name]
            assert mask.shape == turn.response_ids.shape
            block = re.search(rf"<{tag}>.*?</{tag}>", turn.response_text, re.S)
            if f"<{tag}>" not in turn.response_text:
                assert not mask.any(), mask_name
                continue
            # a closed block, or an unclosed one that runs to the end of the text
            expected = block.group(0) if block else turn.response_text[turn.response_text.index(f"<{tag}>") :]
            idx = np.flatnonzero(mask)
            assert idx.size and np.all(np.diff(idx) == 1), f"{mask_name} not contiguous"
            ids = turn.response_ids[idx].tolist()
            assert expected in tok.decode(ids), mask_name
            assert expected not in tok.decode(ids[1:]), f"{mask_name} has an extra leading token"
            assert expected not in tok.decode(ids[:-1]), f"{mask_name} has an extra trailing token"


def expert_actions(task: str) -> list[str]:
    env = SyntheticHierEnv()
    env.reset(task_id=task)
    return [a for _, acts in env.expert_plan() for a in acts]


def acting_replies(acts: list[str], completions: list[str]) -> list[str]:
    """An acting role's replies: each expert action with the completion flag it reports (written as the model would)."""
    return [
        f"<action>{a}</action><completion>{c}</completion>" for a, c in zip(acts, completions, strict=True)
    ]


def test_react_expert_episode_fills_every_turn(tok):
    task = "stages3-acts2-dist1-seed4"
    acts = expert_actions(task)
    engine, _ = scripted(
        tok, [f"<think>step {i}: I should {a}.</think>\n<action>{a}</action>" for i, a in enumerate(acts)]
    )
    traj = play(engine, "react", task)
    assert traj.status == "finished" and traj.won and traj.score == 1.0
    assert [t.decision.action for t in traj.turns] == acts
    assert [t.terminated for t in traj.turns] == [False] * (len(acts) - 1) + [True]
    assert not any(t.truncated for t in traj.turns)
    assert [t.env_reward for t in traj.turns] == [0.0] * (len(acts) - 1) + [1.0]
    assert all(t.decision.valid and t.info["valid_action"] for t in traj.turns)
    assert all(t.role == "agent" and t.adapter == "policy" and t.segment_index == 0 for t in traj.turns)
    for a, b in zip(traj.turns, traj.turns[1:], strict=False):
        assert (
            b.observation == a.info["next_observation"]
        )  # each decision is made from the previous step's result
    assert traj.turns[0].anchor_key == " ".join(traj.turns[0].observation.split())
    assert traj.turns[0].info["num_admissible"] > 0
    assert set(traj.turns[0].masks) == {"think_mask", "action_mask"}
    check_tokens_and_masks(tok, traj)
    # the recent-history window is bounded: step 4's prompt shows steps 2-3 only
    prompt4 = tok.decode(traj.turns[3].prompt_ids.tolist())
    assert "Action 2:" in prompt4 and "Action 3:" in prompt4 and "Action 1:" not in prompt4


def test_garbage_becomes_invalid_turns_and_truncates(tok):
    engine, _ = scripted(
        tok, ["no tags at all", "<think>unclosed", "<action>go to mars</action><think>x</think>"]
    )
    traj = play(engine, "react", "stages2-acts2-dist0-seed1", max_steps=3)
    assert traj.status == "truncated" and not traj.won
    assert [t.decision.valid for t in traj.turns] == [False, False, False]
    assert [t.decision.action for t in traj.turns] == [
        "",
        "",
        "go to mars",
    ]  # fallback: <action> content or ""
    assert [t.info["valid_action"] for t in traj.turns] == [False, False, False]
    assert traj.turns[-1].truncated and not traj.turns[-1].terminated
    assert not traj.turns[0].masks["action_mask"].any() and not traj.turns[0].masks["think_mask"].any()
    # unclosed <think>: its span runs to the end of the text
    assert traj.turns[1].masks["think_mask"].all()
    check_tokens_and_masks(tok, traj)


def test_plan_execute_keep_copies_subgoal_and_switch_opens_segments(tok):
    task = "stages2-acts2-dist0-seed3"
    spec = parse_task_id(task)
    item, home = spec.needed[0], {"wood": "shelf"}.get(spec.needed[0])
    acts = expert_actions(task)  # go to <home>, take <item>, go to workbench, craft <goal>
    replies = [
        f"<switch>SWITCH</switch><subgoal>get the {item}</subgoal><action>{acts[0]}</action>",
        f"<switch>KEEP</switch><subgoal>something else entirely</subgoal><action>{acts[1]}</action>",
        f"<switch>switch</switch><subgoal>craft the {spec.goal}</subgoal><action>{acts[2]}</action>",
        f"<switch>KEEP</switch><subgoal>craft the {spec.goal}</subgoal><action>{acts[3]}</action>",
    ]
    engine, _ = scripted(tok, replies)
    traj = play(engine, "plan_execute", task)
    assert traj.status == "finished" and traj.won, home
    assert [t.decision.switch for t in traj.turns] == [True, False, True, False]
    assert [t.decision.subgoal for t in traj.turns] == [f"get the {item}"] * 2 + [
        f"craft the {spec.goal}"
    ] * 2
    assert traj.turns[1].decision.extra.get("keep_changed_subgoal") is True
    assert [t.segment_index for t in traj.turns] == [0, 0, 1, 1]
    assert f"Your current subgoal is: get the {item}." in tok.decode(traj.turns[2].prompt_ids.tolist())
    assert set(traj.turns[0].masks) == {"switch_mask", "subgoal_mask", "action_mask"}
    check_tokens_and_masks(tok, traj)


def test_hipif_folds_finished_subgoals(tok):
    task = "stages2-acts2-dist0-seed3"
    spec = parse_task_id(task)
    acts = expert_actions(task)
    replies = [
        f"<reflection>No subgoal yet.</reflection><subgoal>get the {spec.needed[0]}</subgoal> <action>{acts[0]}</action>",
        f"<reflection>Not completed.</reflection><action>{acts[1]}</action>",
        f"<reflection>Completed; now craft.</reflection><subgoal>craft it</subgoal> <action>{acts[2]}</action>",
        "<reflection>Not completed.</reflection>",  # no action: invalid, fallback ""
        f"<reflection>Not completed.</reflection><action>{acts[3]}</action>",
    ]
    engine, _ = scripted(tok, replies)
    traj = play(engine, "hipif", task)
    assert traj.won and len(traj.turns) == 5
    assert [t.decision.switch for t in traj.turns] == [True, False, True, False, False]
    assert [t.segment_index for t in traj.turns] == [0, 0, 1, 1, 1]
    assert [t.decision.valid for t in traj.turns] == [True, True, True, False, True]
    p3 = tok.decode(traj.turns[3].prompt_ids.tolist())
    assert f"(history_subgoal 1: get the {spec.needed[0]})" in p3  # folded record [g_k, o_k^end]
    assert "(current_subgoal: craft it)" in p3
    assert f"pre_action: {acts[0]}," not in p3  # the folded subgoal keeps only its last action
    check_tokens_and_masks(tok, traj)


def test_step_hrl_roles_adapters_and_progress(tok):
    task = "stages2-acts2-dist0-seed3"
    acts = expert_actions(task)
    replies = {
        "high": ["<subgoal>get the item</subgoal>", "<subgoal>craft the goal</subgoal>"],
        "low": acting_replies(acts, ["False", "True", "False", "True"]),
        "progress": [
            "<progress>at the home</progress>",
            "<progress>item taken</progress>",
            "<progress>at the workbench</progress>",
        ],
    }
    engine, seen = scripted(tok, replies)
    adapters = {"high": "hi", "low": "lo", "progress": "pr"}
    traj = play(engine, "step_hrl", task, adapters=adapters)
    roles = [t.role for t in traj.turns]
    assert roles == ["high", "low", "progress", "low", "progress", "high", "low", "progress", "low"]
    assert roles == seen
    assert [t.adapter for t in traj.turns] == [adapters[r] for r in roles]
    assert [t.segment_index for t in traj.turns] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert traj.won and traj.info["env_steps"] == 4
    acting = [t for t in traj.turns if t.role == "low"]
    assert all(t.anchor_key for t in acting) and not any(t.anchor_key for t in traj.turns if t.role != "low")
    assert [t.decision.extra["completion"] for t in acting] == [False, True, False, True]
    # high call 2 sees G_k and p̂_k; the low prompt sees only its subtask, observation and local progress
    high2 = tok.decode(traj.turns[5].prompt_ids.tolist())
    assert "Historical subtasks: 1. get the item" in high2 and "Last subtask progress: item taken" in high2
    low2 = tok.decode(traj.turns[3].prompt_ids.tolist())
    assert "Local progress: at the home" in low2 and acts[0] not in low2.split("Admissible")[0].replace(
        traj.turns[3].observation, ""
    )
    assert tok.decode(traj.turns[6].prompt_ids.tolist()).count("Local progress: None") == 1  # p_0^k reset
    assert traj.turns[-1].terminated
    check_tokens_and_masks(tok, traj)


def test_multi2_planner_executor_handoff(tok):
    task = "stages2-acts2-dist0-seed3"
    acts = expert_actions(task)
    replies = {
        "planner": ["<subgoal>retrieve the item</subgoal>", "garbage planner reply"],
        "executor": acting_replies(acts, ["False", "True", "False", "false"]),
    }
    engine, _ = scripted(tok, replies)
    traj = play(engine, "multi2", task, adapters={"planner": "planner", "executor": "executor"})
    roles = [t.role for t in traj.turns]
    assert roles == ["planner", "executor", "executor", "planner", "executor", "executor"]
    assert [t.adapter for t in traj.turns] == roles
    assert [t.segment_index for t in traj.turns] == [0, 0, 0, 1, 1, 1]
    planner2 = traj.turns[3]
    assert not planner2.decision.valid and planner2.decision.subgoal == "garbage planner reply"
    assert f"Executed actions: {acts[0]}; {acts[1]}" in tok.decode(planner2.prompt_ids.tolist())
    assert traj.won
    check_tokens_and_masks(tok, traj)


def test_response_pieces_multibyte_and_eos(tok):
    text = "<think>café 日本語 🙂</think><action>take wood</action>"
    ids = [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
    decoded, pieces = response_pieces(tok, ids)
    assert decoded == text and "".join(pieces) == text and len(pieces) == len(ids)
    assert pieces[-1] == ""  # EOS is a special token: zero width


def test_unknown_protocol_raises():
    with pytest.raises(ValueError, match="unknown agent protocol"):
        make_agent("nope", env_name="synthetic")


def test_turn_records_are_valid_turns(tok):
    engine, _ = scripted(tok, ["<think>t</think><action>take wood</action>"])
    traj = play(engine, "react", "stages2-acts1-dist0-seed3", max_steps=1)
    assert isinstance(traj.turns[0], Turn) and traj.turns[0].policy_version == 0
