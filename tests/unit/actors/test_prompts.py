"""Prompt builders of every agent protocol: inputs present, history bounds, paper wording, ``render_prompt``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from actors.agents import hipif, multi2, plan_execute, react, step_hrl
from actors.agents.parsing import render_prompt
from actors.protocols import make_agent

TASK = "put a cool tomato in microwave"
OBS = "You arrive at fridge 1. The fridge 1 is closed."
ADMISSIBLE = ["open fridge 1", "go to microwave 1", "inventory"]
# observation/action words that occur nowhere else, so a window check cannot be fooled by substrings
HISTORY = [(f"obsword{w}", f"actword{w}") for w in ("alpha", "bravo", "charlie", "delta", "echo")]


def _content(messages) -> str:
    assert isinstance(messages, list) and messages
    for m in messages:
        assert set(m) == {"role", "content"} and m["role"] in ("system", "user", "assistant")
        assert isinstance(m["content"], str)
    return "\n".join(m["content"] for m in messages)


def _in_window(text: str, window: int) -> None:
    for i, (obs, act) in enumerate(HISTORY):
        shown = i >= len(HISTORY) - window
        assert (obs in text) is shown and (act in text) is shown


# ---------------------------------------------------------------------------------------------------------------
# ReAct / HiPER
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [0, 1, 2, 3, 10])
def test_react_prompt_inputs_and_window(window):
    text = _content(react.build_react_messages(TASK, OBS, ADMISSIBLE, HISTORY, history_window=window))
    assert TASK in text and OBS in text
    assert "['open fridge 1', 'go to microwave 1', 'inventory']" in text
    _in_window(text, window)
    assert "You are now at step 6" in text
    if window:
        assert f"Below are the most recent {min(window, 5)} observations" in text
        assert "you have already taken 5 step(s)" in text
        assert "[Observation 5: 'obswordecho', Action 5: 'actwordecho']" in text


def test_react_prompt_paper_wording_and_first_step():
    text = _content(react.build_react_messages(TASK, OBS, ADMISSIBLE, env="alfworld"))
    assert text.startswith("You are an expert agent operating in the ALFRED embodied Environment.")
    assert "Prior to this step" not in text and "You are now at step 1 " in text
    assert "This reasoning process MUST be enclosed within <think> </think> tags." in text
    assert "present it within <action> </action> tags." in text
    web = _content(
        react.build_react_messages(
            "buy a shirt", "WebShop [SEP] Search", ["search[<content>]"], env="webshop"
        )
    )
    assert "You are an expert autonomous agent operating in the WebShop e-commerce environment." in web
    no_list = _content(react.build_react_messages(TASK, OBS, None, env="scienceworld"))
    assert "admissible actions of the current situation" not in no_list and "ScienceWorld" in no_list


@pytest.mark.parametrize("env", ["alfworld", "webshop", "textcraft"])
def test_plan_execute_prompt_inputs_wording_and_window(env):
    text = _content(
        plan_execute.build_plan_execute_messages(TASK, OBS, ADMISSIBLE, HISTORY, "find a tomato", env=env)
    )
    assert TASK in text and OBS in text and "Your current subgoal is: find a tomato." in text
    assert "Your admissible actions are: ['open fridge 1', 'go to microwave 1', 'inventory']." in text
    _in_window(text, 2)
    for wording in (
        "You will complete the task by maintaining a SHORT-TERM subgoal at each step.",
        "A subgoal is NOT the full task and NOT a low-level action.",
        "You MUST output EXACTLY THREE blocks, in the order shown below:",
        "1) A <switch>...</switch> block (KEEP or SWITCH);",
        '- <switch> MUST contain only "KEEP" or "SWITCH".',
        "If you KEEP, copy the exact current subgoal into <subgoal>.",
        "- <action> MUST contain exactly action verbatim copied as is from the admissible actions list.",
    ):
        assert wording in text
    if env == "alfworld":
        assert text.startswith("You are an expert agent operating in the ALFRED Embodied Environment.")


def test_plan_execute_first_step():
    text = _content(plan_execute.build_plan_execute_messages(TASK, OBS, ADMISSIBLE))
    assert "You have already taken 0 step(s)." in text and "most recent" not in text
    assert "Your current subgoal is: None." in text


# ---------------------------------------------------------------------------------------------------------------
# HIPIF
# ---------------------------------------------------------------------------------------------------------------


def _hipif_history() -> hipif.FoldedHistory:
    h = hipif.FoldedHistory(origin_observation="You are in the middle of a room.")
    h.switch_to("find a tomato")
    h.record("go to countertop 1", "obswordalpha")
    h.record("go to countertop 2", "obswordbravo")
    h.switch_to("cool the tomato")
    h.record("go to fridge 1", "obswordcharlie")
    h.record("open fridge 1", "obsworddelta")
    return h


@pytest.mark.parametrize("env", ["alfworld", "scienceworld", "virtualhome", "webshop"])
def test_hipif_prompt_inputs_and_folding(env):
    h = _hipif_history()
    text = _content(hipif.build_hipif_messages(TASK, OBS, h, env=env, admissible_actions=ADMISSIBLE))
    assert TASK in text and OBS in text
    assert (
        "Your current subgoal is: cool the tomato." in text and "Your last action is: open fridge 1." in text
    )
    assert (
        "(history_subgoal 1: find a tomato),(pre_action: go to countertop 2, pre_observation: obswordbravo)"
        in text
    )
    assert "obswordalpha" not in text  # the completed subgoal keeps only its final pair
    assert "obswordcharlie" in text and "obsworddelta" in text  # the current subgoal keeps all its pairs
    assert "EXECUTION HISTORY:\nSubgoals are essential milestones on the path to the final task." in text
    assert "<reflection>the reflection process</reflection>" in text
    assert "<subgoal>your subgoal</subgoal> <action>your action</action>" in text
    listed = "Your admissible actions are: ['open fridge 1', 'go to microwave 1', 'inventory']." in text
    assert listed is (env == "webshop")  # App. E: paper envs show action templates, not the grounded list


def test_hipif_env_specific_wording_and_options():
    h = _hipif_history()
    alf = _content(hipif.build_hipif_messages(TASK, OBS, h, env="alfworld"))
    assert "- 'take {obj} from {recep}'" in alf and 'The current observation "Nothing happens." means' in alf
    sci = _content(hipif.build_hipif_messages("Your task is to boil water.", OBS, h, env="scienceworld"))
    assert sci.startswith("You are a helpful assistant to do some scientific experiment in an environment.")
    assert (
        "You can teleport to any room in one step." in sci
        and "whether the current subgoal, NOT the task," in sci
    )
    vh = _content(hipif.build_hipif_messages(TASK, OBS, h, env="virtualhome"))
    assert "- put {obj} in {recep}\n" in vh and "completed in Part1:" in vh
    listed = _content(
        hipif.build_hipif_messages(TASK, OBS, h, admissible_actions=ADMISSIBLE, list_admissible=True)
    )
    assert "'go to microwave 1'" in listed
    windowed = _content(hipif.build_hipif_messages(TASK, OBS, h, current_window=1))
    assert "obsworddelta" in windowed and "obswordcharlie" not in windowed


def test_hipif_compact_prompt_keeps_the_folded_history():
    """compact: minimal wording, but the same fields (task, folded history, observation, subgoal, actions) and both
    branches of the answer format; the agent passes the option through (it was silently ignored before)."""
    h = _hipif_history()
    full = _content(hipif.build_hipif_messages(TASK, OBS, h, admissible_actions=ADMISSIBLE))
    text = _content(hipif.build_hipif_messages(TASK, OBS, h, admissible_actions=ADMISSIBLE, compact=True))
    assert TASK in text and OBS in text and "Subgoal: cool the tomato" in text
    assert h.render() in text and "obswordalpha" not in text
    assert "Actions: open fridge 1, go to microwave 1, inventory" in text
    assert "<reflection>" in text and "<subgoal>" in text and "<action>" in text
    assert len(text) < len(full) / 2
    agent = make_agent("hipif", env_name="alfworld", compact=True)
    agent.start(OBS, {"task": TASK, "admissible_actions": ADMISSIBLE})
    assert _content(agent.next_call().messages).startswith(f"Task: {TASK}")


def test_hipif_first_step_prompt():
    h = hipif.FoldedHistory(origin_observation=OBS)
    text = _content(hipif.build_hipif_messages(TASK, OBS, h))
    assert "Your current subgoal is: None." in text and "Your last action is: None." in text
    assert "[(current_subgoal: None)]\n[(origin_observation: " in text


# ---------------------------------------------------------------------------------------------------------------
# STEP-HRL / Multi2
# ---------------------------------------------------------------------------------------------------------------


def test_step_hrl_prompts_inputs_and_no_history():
    high = step_hrl.build_high_messages(TASK, OBS, ["find a tomato", "cool the tomato"], "Tomato cooled.")
    assert high[0] == {"role": "system", "content": step_hrl.HIGH_SYSTEM}
    assert step_hrl.HIGH_SYSTEM.startswith(
        "You are a high-level planner. Based on the state (task description,"
    )
    text = _content(high)
    assert (
        TASK in text
        and OBS in text
        and "1. find a tomato; 2. cool the tomato" in text
        and "Tomato cooled." in text
    )

    low = step_hrl.build_low_messages("cool the tomato", OBS, "Fridge reached.", ADMISSIBLE)
    assert low[0]["content"] == step_hrl.LOW_SYSTEM and "(True/False)" in step_hrl.LOW_SYSTEM
    text = _content(low)
    assert (
        "cool the tomato" in text
        and OBS in text
        and "Fridge reached." in text
        and "'go to microwave 1'" in text
    )
    assert "Admissible" not in _content(step_hrl.build_low_messages("g", OBS))

    prog = step_hrl.build_progress_messages("cool the tomato", "open fridge 1", OBS, None)
    assert prog[0]["content"] == step_hrl.PROGRESS_SYSTEM
    text = _content(prog)
    assert "open fridge 1" in text and OBS in text and "Previous local progress: None" in text
    # the signatures take one step of inputs only: no history argument exists to leak earlier steps
    for build in (
        step_hrl.build_high_messages,
        step_hrl.build_low_messages,
        step_hrl.build_progress_messages,
    ):
        assert "history" not in build.__code__.co_varnames


def test_multi2_prompts():
    planner = multi2.build_planner_messages(
        TASK, OBS, ["go to countertop 1", "take tomato 1"], env="alfworld"
    )
    text = _content(planner)
    assert "System 1" in planner[0]["content"] and "ALFWorld" in planner[0]["content"]
    assert TASK in text and OBS in text and "Executed actions: go to countertop 1; take tomato 1" in text
    bounded = _content(multi2.build_planner_messages(TASK, OBS, ["a1", "a2", "a3"], max_actions=1))
    assert "Executed actions: a3" in bounded
    executor = multi2.build_executor_messages("Retrieve creditcard", OBS, ADMISSIBLE, env="textcraft")
    text = _content(executor)
    assert "System 2" in text and "TextCraft" in text and "Retrieve creditcard" in text and OBS in text
    assert "'inventory'" in text and "<completion>True or False</completion>" in text


# ---------------------------------------------------------------------------------------------------------------
# render_prompt
# ---------------------------------------------------------------------------------------------------------------


class FakeTokenizer:
    """Duck-typed tokenizer: one id per character of a ChatML-like rendering."""

    def __init__(self, as_mapping: bool = False) -> None:
        self.as_mapping = as_mapping
        self.calls: list[dict] = []

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        self.calls.append({"add_generation_prompt": add_generation_prompt, "tokenize": tokenize})
        text = "".join(f"<|{m['role']}|>{m['content']}" for m in messages)
        if add_generation_prompt:
            text += "<|assistant|>"
        ids = [ord(c) for c in text]
        return {"input_ids": ids} if self.as_mapping else ids


@pytest.mark.parametrize("as_mapping", [False, True])
def test_render_prompt_with_fake_tokenizer(as_mapping):
    tok = FakeTokenizer(as_mapping)
    messages = step_hrl.build_low_messages("g", "obs")
    ids = render_prompt(tok, messages)
    assert tok.calls == [{"add_generation_prompt": True, "tokenize": True}]
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert "".join(map(chr, ids)).endswith("<|assistant|>")
    assert "".join(map(chr, ids)).startswith("<|system|>You are a low-level action executor.")


def test_agent_modules_stay_pure():
    """Importing every protocol pulls in no ray / vllm / deepspeed / torch (fresh interpreter)."""
    code = (
        "import sys; import actors.agents.parsing, actors.agents.react, actors.agents.plan_execute, "
        "actors.agents.hipif, actors.agents.step_hrl, actors.agents.multi2; "
        "print([m for m in ('ray', 'vllm', 'deepspeed', 'torch') if m in sys.modules])"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
