"""Parsers of every agent protocol: hand cases per protocol, masks, and property tests (never raise, round-trip)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.agents import hipif, multi2, plan_execute, react, step_hrl
from actors.agents.parsing import (
    TAG_TO_MASK,
    char_spans_to_token_mask,
    masks_for_parse,
    token_offsets_from_pieces,
)
from actors.trajectory import MASK_NAMES

PARSERS = {
    "react": react.parse_react,
    "plan_execute": plan_execute.parse_plan_execute,
    "hipif": hipif.parse_hipif,
    "step_high": step_hrl.parse_high,
    "step_low": step_hrl.parse_low,
    "step_progress": step_hrl.parse_progress,
    "multi2_planner": multi2.parse_planner,
    "multi2_executor": multi2.parse_executor,
}


def _span_text(res, tag: str) -> str:
    s, e = res.spans[tag]
    return res.text[s:e]


# ---------------------------------------------------------------------------------------------------------------
# ReAct
# ---------------------------------------------------------------------------------------------------------------


def test_react_valid_spans_point_at_tags():
    text = "  <think>I need the mug.</think>\n<action>go to cabinet 1</action> "
    res = react.parse_react(text)
    assert res.valid and res.error == ""
    assert res.fields == {"think": "I need the mug.", "action": "go to cabinet 1"}
    assert _span_text(res, "think") == "<think>I need the mug.</think>"
    assert _span_text(res, "action") == "<action>go to cabinet 1</action>"
    assert res.spans["think"] == (2, 32)  # 2 leading spaces + len("<think>I need the mug.</think>") = 30
    d = react.react_decision(res)
    assert (d.action, d.valid, d.switch, d.subgoal) == ("go to cabinet 1", True, None, None)
    assert d.extra["think"] == "I need the mug."


@pytest.mark.parametrize(
    ("text", "error_part", "action"),
    [
        ("<think>hmm</think>", "missing <action>", None),
        ("<action>look</action>", "missing <think>", "look"),
        ("<think>a</think><action>look</action><action>go to x</action>", "repeated <action>", "look"),
        ("<think>a</think><action>look", "unclosed <action>", None),
        ("<think>a</think><action>   </action>", "empty <action>", ""),
        ("<action>look</action><think>a</think>", "out of order", "look"),
        ("</action><think>a</think><action>look</action>", "stray </action>", "look"),
        ("<think>say <action>look</action></think>", "<action> inside <think>", "look"),
        ("<think>a</think><action>x<action>y</action>", "nested <action>", "x<action>y"),
        ("", "missing <think>", None),
    ],
)
def test_react_invalid_cases(text, error_part, action):
    res = react.parse_react(text)
    assert not res.valid
    assert error_part in res.error
    assert res.action == action
    d = react.react_decision(res)
    assert not d.valid and d.error == res.error
    # fallback: the parsed action when one was read, else the empty command (env answers it as invalid)
    assert d.action == (action or "")


def test_react_unclosed_span_runs_to_end_and_raw_fallback():
    text = "<think>a</think> <action>go to"
    res = react.parse_react(text)
    assert res.spans["action"] == (17, len(text))
    assert react.react_decision(res, fallback="raw").action == text
    assert react.react_decision(res).action == ""


def test_tags_case_whitespace_and_outside_text():
    res = react.parse_react("Sure! < THINK >x</think > then <Action> open drawer 1 </ACTION>.")
    assert res.valid, res.error
    assert res.fields == {"think": "x", "action": "open drawer 1"}
    assert res.outside_text == "Sure! then ."


# ---------------------------------------------------------------------------------------------------------------
# HiPER Plan–Execute
# ---------------------------------------------------------------------------------------------------------------


def test_plan_execute_switch_valid():
    text = (
        "<switch>SWITCH </switch><subgoal>find and cool a cup </subgoal> <action>go to countertop 1</action>"
    )
    res = plan_execute.parse_plan_execute(text)
    assert res.valid and res.switch is True
    assert _span_text(res, "switch") == "<switch>SWITCH </switch>"
    assert _span_text(res, "subgoal") == "<subgoal>find and cool a cup </subgoal>"
    assert _span_text(res, "action") == "<action>go to countertop 1</action>"
    d = plan_execute.plan_execute_decision(res, prev_subgoal=None)
    assert (d.switch, d.subgoal, d.action, d.valid) == (
        True,
        "find and cool a cup",
        "go to countertop 1",
        True,
    )


def test_plan_execute_keep_copies_previous_and_flags_changed_subgoal():
    # HiPER App. E, ALFWorld example, step 10: KEEP with an edited subgoal
    text = (
        "<switch>KEEP </switch><subgoal>put the cooled cup in the cabinet</subgoal> "
        "<action>move cup 1 to cabinet 1</action>"
    )
    res = plan_execute.parse_plan_execute(text)
    assert res.valid and res.switch is False
    d = plan_execute.plan_execute_decision(res, prev_subgoal="put the cooled cup in cabinet")
    assert d.valid and d.switch is False
    assert d.subgoal == "put the cooled cup in cabinet"
    assert d.extra["keep_changed_subgoal"] is True
    assert d.extra["written_subgoal"] == "put the cooled cup in the cabinet"


def test_plan_execute_keep_same_subgoal_modulo_whitespace_not_flagged():
    res = plan_execute.parse_plan_execute(
        "<switch>keep</switch><subgoal>find  a knife</subgoal><action>look</action>"
    )
    d = plan_execute.plan_execute_decision(res, prev_subgoal="find a knife ")
    assert d.valid and d.switch is False and "keep_changed_subgoal" not in d.extra
    assert d.subgoal == "find a knife "


@pytest.mark.parametrize("word", ["switch", "Switch", ' "SWITCH" ', "SWITCH."])
def test_plan_execute_switch_word_case_and_quotes(word):
    res = plan_execute.parse_plan_execute(f"<switch>{word}</switch><subgoal>g</subgoal><action>a</action>")
    assert res.valid and res.switch is True


def test_plan_execute_wrong_switch_word_is_invalid_and_inferred():
    res = plan_execute.parse_plan_execute(
        "<switch>MAYBE</switch><subgoal>new goal</subgoal><action>a</action>"
    )
    assert not res.valid and "KEEP or SWITCH" in res.error and res.switch is None
    d = plan_execute.plan_execute_decision(res, prev_subgoal="old goal")
    assert d.switch is True and d.subgoal == "new goal" and d.extra["switch_inferred"] is True
    same = plan_execute.parse_plan_execute("<switch>?</switch><subgoal>old goal</subgoal><action>a</action>")
    d = plan_execute.plan_execute_decision(same, prev_subgoal="old goal")
    assert d.switch is False and d.subgoal == "old goal"


def test_plan_execute_missing_and_repeated_blocks():
    res = plan_execute.parse_plan_execute("<subgoal>g</subgoal><action>a</action>")
    assert not res.valid and "missing <switch>" in res.error
    res = plan_execute.parse_plan_execute(
        "<switch>SWITCH</switch><subgoal>g1</subgoal><subgoal>g2</subgoal><action>a</action>"
    )
    assert not res.valid and "repeated <subgoal>" in res.error and res.subgoal == "g1"
    assert _span_text(res, "subgoal") == "<subgoal>g1</subgoal>"
    res = plan_execute.parse_plan_execute("<subgoal>g</subgoal><switch>KEEP</switch><action>a</action>")
    assert not res.valid and "out of order" in res.error


def test_plan_execute_keep_at_first_turn_and_empty_output():
    res = plan_execute.parse_plan_execute("<switch>KEEP</switch><subgoal>g</subgoal><action>a</action>")
    d = plan_execute.plan_execute_decision(res, prev_subgoal=None)
    assert d.subgoal == "g" and d.switch is False and d.extra["keep_without_subgoal"] is True
    empty = plan_execute.parse_plan_execute("")
    d = plan_execute.plan_execute_decision(empty, prev_subgoal="g0")
    assert not d.valid and d.action == "" and d.subgoal == "g0" and d.switch is False


# ---------------------------------------------------------------------------------------------------------------
# HIPIF
# ---------------------------------------------------------------------------------------------------------------


def test_hipif_continue_and_complete_branches():
    cont = hipif.parse_hipif("<reflection>Not completed; open it.</reflection><action>open fridge 1</action>")
    assert cont.valid
    d = hipif.hipif_decision(cont, current_subgoal="cool the tomato")
    assert (d.switch, d.subgoal, d.action) == (False, "cool the tomato", "open fridge 1")
    assert d.extra == {"reflection": "Not completed; open it.", "completed": False}

    text = "<reflection>Completed.</reflection><subgoal>heat the egg</subgoal> <action>go to microwave 1</action>"
    done = hipif.parse_hipif(text)
    assert done.valid and _span_text(done, "subgoal") == "<subgoal>heat the egg</subgoal>"
    d = hipif.hipif_decision(done, current_subgoal="find an egg")
    assert (d.switch, d.subgoal, d.action) == (True, "heat the egg", "go to microwave 1")


def test_hipif_first_step_requires_subgoal_and_format_errors():
    res = hipif.parse_hipif("<reflection>start</reflection><action>look</action>")
    assert res.valid  # context-free parse is fine ...
    d = hipif.hipif_decision(res, current_subgoal=None)
    assert not d.valid and "first step" in d.error  # ... but there is no subgoal to continue
    res = hipif.parse_hipif("<reflection>r</reflection><action>a</action><subgoal>g</subgoal>")
    assert not res.valid and "out of order" in res.error
    res = hipif.parse_hipif("<action>a</action>")
    assert not res.valid and "missing <reflection>" in res.error
    res = hipif.parse_hipif(
        "<reflection>r</reflection><subgoal>g</subgoal><subgoal>h</subgoal><action>a</action>"
    )
    assert not res.valid and "repeated <subgoal>" in res.error


def test_folded_history_folds_completed_subgoal_to_its_last_pair():
    h = hipif.FoldedHistory(origin_observation="You are in the middle of a room.")
    steps = [
        (
            "<reflection>r</reflection><subgoal>find a tomato</subgoal><action>go to countertop 1</action>",
            "obs A",
        ),
        ("<reflection>r</reflection><action>go to countertop 2</action>", "obs B"),
        (
            "<reflection>r</reflection><subgoal>cool the tomato</subgoal><action>cool tomato 1 with fridge 1</action>",
            "C",
        ),
    ]
    for text, obs in steps:
        h.apply(hipif.hipif_decision(hipif.parse_hipif(text), h.current_subgoal), obs)
    assert h.completed_subgoals == ["find a tomato"]
    assert h.folded[0] == hipif.FoldedRecord("find a tomato", "go to countertop 2", "obs B")
    assert h.current_subgoal == "cool the tomato" and h.steps == [("cool tomato 1 with fridge 1", "C")]
    assert h.render() == (
        "[(current_subgoal: cool the tomato),(pre_action: cool tomato 1 with fridge 1, pre_observation: C)]\n"
        "[(origin_observation: You are in the middle of a room.)]\n"
        "[(history_subgoal 1: find a tomato),(pre_action: go to countertop 2, pre_observation: obs B)]"
    )
    assert "obs A" not in h.render()  # folded away


# ---------------------------------------------------------------------------------------------------------------
# STEP-HRL and Multi2
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "decide"),
    [(step_hrl.parse_low, step_hrl.low_decision), (multi2.parse_executor, multi2.executor_decision)],
)
def test_action_with_completion_flag(parse, decide):
    res = parse("<action>go to sidetable 1</action><completion>true</completion>")
    assert res.valid and res.completion is True
    assert _span_text(res, "completion") == "<completion>true</completion>"
    d = decide(res, "Retrieve creditcard")
    assert (d.action, d.subgoal, d.extra["completion"], d.switch) == (
        "go to sidetable 1",
        "Retrieve creditcard",
        True,
        None,
    )
    bad = parse("<action>look</action><completion>maybe</completion>")
    assert not bad.valid and bad.completion is None and "True or False" in bad.error
    assert decide(bad, "g").extra["completion"] is False
    missing = parse("<action>look</action>")
    assert not missing.valid and "missing <completion>" in missing.error


@pytest.mark.parametrize(
    ("parse", "decide"),
    [(step_hrl.parse_high, step_hrl.high_decision), (multi2.parse_planner, multi2.planner_decision)],
)
def test_subgoal_roles_and_bare_text_fallback(parse, decide):
    res = parse("<subgoal>navigate to kitchen</subgoal>")
    assert res.valid
    d = decide(res)
    assert (d.subgoal, d.action, d.switch, d.valid) == ("navigate to kitchen", "", True, True)
    bare = decide(parse(" navigate to kitchen \n"))
    assert (bare.subgoal, bare.valid) == ("navigate to kitchen", False)


def test_progress_role():
    res = step_hrl.parse_progress("<progress>Thermometer obtained.</progress>")
    d = step_hrl.progress_decision(res, "find a thermometer")
    assert res.valid and d.extra["progress"] == "Thermometer obtained." and d.action == ""
    res = step_hrl.parse_progress("<progress>a</progress><progress>b</progress>")
    assert not res.valid and step_hrl.progress_decision(res, "g").extra["progress"] == "a"


# ---------------------------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------------------------


def test_token_offsets_from_pieces():
    off = token_offsets_from_pieces(["ab", "", "c", "def"])
    assert off.tolist() == [[0, 2], [2, 2], [2, 3], [3, 6]]
    assert token_offsets_from_pieces([]).shape == (0, 2)


def test_char_spans_to_token_mask_hand_cases():
    off = [(0, 3), (3, 5), (5, 5), (5, 9), (9, 9), (9, 12)]
    # span [4, 9): token 1 (3..5) straddles the start, token 3 lies inside; zero-width tokens count when
    # s <= p < e: token 2 at p=5 does, token 4 at p=9 (= span end) does not
    assert char_spans_to_token_mask(off, [(4, 9)], 6).tolist() == [False, True, True, True, False, False]
    # two spans; span end is exclusive: [0, 3) does not touch token (3, 5)
    assert char_spans_to_token_mask(off, [(0, 3), (11, 12)], 6).tolist() == [
        True,
        False,
        False,
        False,
        False,
        True,
    ]
    # n_tokens longer than the offsets (trailing EOS not decoded) and shorter (truncated)
    assert char_spans_to_token_mask(off, [(0, 12)], 8).tolist() == [True] * 6 + [False, False]
    assert char_spans_to_token_mask(off, [(0, 12)], 2).tolist() == [True, True]
    assert char_spans_to_token_mask(off, [], 6).tolist() == [False] * 6
    assert char_spans_to_token_mask([], [(0, 4)], 0).shape == (0,)


def test_masks_for_parse_plan_execute_tokens():
    pieces = [
        "<switch>",
        "SW",
        "ITCH",
        "</switch>",
        "<sub",
        "goal>",
        "find",
        "</subgoal>",
        " ",
        "<action>",
        "look",
        "</action>",
        "<eos>",
    ]
    text = "".join(pieces[:-1])
    res = plan_execute.parse_plan_execute(text)
    off = token_offsets_from_pieces(pieces[:-1])
    masks = masks_for_parse(res, off, n_tokens=len(pieces))
    assert set(masks) == {"switch_mask", "subgoal_mask", "action_mask"} <= set(MASK_NAMES)
    idx = {k: np.flatnonzero(v).tolist() for k, v in masks.items()}
    assert idx == {"switch_mask": [0, 1, 2, 3], "subgoal_mask": [4, 5, 6, 7], "action_mask": [9, 10, 11]}
    assert all(m.shape == (len(pieces),) and m.dtype == bool for m in masks.values())


def test_masks_for_absent_tag_are_all_false():
    res = react.parse_react("<action>look</action>")
    masks = masks_for_parse(res, token_offsets_from_pieces(["<action>", "look", "</action>"]), 3)
    assert masks["think_mask"].tolist() == [False] * 3 and masks["action_mask"].all()


def test_tag_to_mask_names_are_known():
    assert set(TAG_TO_MASK.values()) <= set(MASK_NAMES)


def test_mask_vectorised_matches_loop_on_random_inputs():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(0, 4, size=rng.integers(0, 30))
        ends = np.cumsum(lengths)
        off = np.stack([ends - lengths, ends], axis=1) if lengths.size else np.zeros((0, 2), np.int64)
        total = int(ends[-1]) if lengths.size else 0
        spans = [
            tuple(sorted(rng.integers(0, total + 2, size=2).tolist())) for _ in range(rng.integers(0, 4))
        ]
        n = int(rng.integers(0, 35))
        ref = [
            i < len(off)
            and any(
                (s <= off[i][0] < e) if off[i][0] == off[i][1] else (off[i][0] < e and s < off[i][1])
                for s, e in spans
            )
            for i in range(n)
        ]
        assert char_spans_to_token_mask(off, spans, n).tolist() == ref


# ---------------------------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------------------------

_TAGGY = st.lists(
    st.sampled_from(
        [
            *list("ab <>/ \n\tKEPSWITCHkeep"),
            "<think>",
            "</think>",
            "<action>",
            "</action>",
            "<switch>",
            "</switch>",
            "<subgoal>",
            "</subgoal>",
            "<reflection>",
            "</reflection>",
            "<progress>",
            "</progress>",
            "<completion>",
            "</completion>",
            "KEEP",
            "SWITCH",
            "True",
            "False",
            "é",
            "\x00",
        ]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.text(max_size=80), _TAGGY), name=st.sampled_from(sorted(PARSERS)))
def test_parsers_never_raise_and_spans_are_sane(text, name):
    _check_parse(name, text)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parsers_never_raise_on_two_thousand_outputs_each(name):
    """The same property at 2,000 examples per protocol: malformed model output is an invalid turn,
    never a crash."""

    @settings(max_examples=2_000, deadline=None, database=None)
    @given(text=st.one_of(st.text(max_size=120), _TAGGY))
    def check(text):
        _check_parse(name, text)

    check()


def _check_parse(name: str, text: str) -> None:
    res = PARSERS[name](text)
    assert res.valid == (not res.errors)
    for s, e in res.spans.values():
        assert 0 <= s < e <= len(text)
    if res.valid:
        starts = [res.spans[t][0] for t in res.tags if t in res.spans]
        assert starts == sorted(starts)
        for t, (s, e) in res.spans.items():
            assert text[s:e].lower().startswith("<") and t in text[s:e].lower()


@settings(max_examples=100, deadline=None)
@given(text=_TAGGY, cuts=st.lists(st.integers(0, 60), max_size=20), extra=st.integers(0, 3))
def test_masks_have_n_tokens_and_cover_spans(text, cuts, extra):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    res = plan_execute.parse_plan_execute(text)
    off = token_offsets_from_pieces(pieces)
    n = len(pieces) + extra
    masks = masks_for_parse(res, off, n)
    for tag, mask in ((t, masks[TAG_TO_MASK[t]]) for t in res.tags):
        assert mask.shape == (n,)
        if tag in res.spans:
            s, e = res.spans[tag]
            covered = off[mask[: len(pieces)]]
            assert covered[:, 0].min() <= s and covered[:, 1].max() >= e  # the marked tokens cover the span
        else:
            assert not mask.any()


_FIELD = st.text(
    alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), min_size=1, max_size=30
).filter(lambda s: s.strip() != "")
_WS = st.sampled_from(["", " ", "\n", "  \n"])


@settings(max_examples=100, deadline=None)
@given(think=_FIELD, action=_FIELD, ws=_WS)
def test_react_round_trip(think, action, ws):
    res = react.parse_react(ws + react.format_react(think, action) + ws)
    assert res.valid, res.error
    assert (res.get("think"), res.action) == (think.strip(), action.strip())


@settings(max_examples=100, deadline=None)
@given(switch=st.booleans(), subgoal=_FIELD, action=_FIELD, prev=st.one_of(st.none(), _FIELD))
def test_plan_execute_round_trip(switch, subgoal, action, prev):
    res = plan_execute.parse_plan_execute(plan_execute.format_plan_execute(switch, subgoal, action))
    assert res.valid, res.error
    assert (res.switch, res.subgoal, res.action) == (switch, subgoal.strip(), action.strip())
    d = plan_execute.plan_execute_decision(res, prev)
    assert d.switch is switch
    assert d.subgoal == (subgoal.strip() if switch or prev is None else prev)


@settings(max_examples=100, deadline=None)
@given(reflection=_FIELD, action=_FIELD, subgoal=st.one_of(st.none(), _FIELD))
def test_hipif_round_trip(reflection, action, subgoal):
    res = hipif.parse_hipif(hipif.format_hipif(reflection, action, subgoal))
    assert res.valid, res.error
    assert (res.get("reflection"), res.action) == (reflection.strip(), action.strip())
    assert res.subgoal == (subgoal.strip() if subgoal is not None else None)
    d = hipif.hipif_decision(res, current_subgoal="current")
    assert d.switch is (subgoal is not None)


@settings(max_examples=60, deadline=None)
@given(subgoal=_FIELD, action=_FIELD, progress=_FIELD, done=st.booleans())
def test_step_hrl_and_multi2_round_trip(subgoal, action, progress, done):
    assert step_hrl.parse_high(step_hrl.format_high(subgoal)).subgoal == subgoal.strip()
    assert step_hrl.parse_progress(step_hrl.format_progress(progress)).get("progress") == progress.strip()
    assert multi2.parse_planner(multi2.format_planner(subgoal)).subgoal == subgoal.strip()
    for res in (
        step_hrl.parse_low(step_hrl.format_low(action, done)),
        multi2.parse_executor(multi2.format_executor(action, done)),
    ):
        assert res.valid and (res.action, res.completion) == (action.strip(), done)
