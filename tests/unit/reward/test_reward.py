"""Golden per-turn values for every shaping term (arithmetic in comments), edge cases, a brute-force reference for the
repetition rule, and the composition into ``Turn.shaped`` / ``Turn.reward``."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from actors.trajectory import Decision, Trajectory, Turn
from reward import (
    HIPER_TERMS,
    HIPIF_TERMS,
    HISR_TERMS,
    TERMS,
    ShapingConfig,
    ShapingConstants,
    action_executable,
    action_grounding_reward,
    apply_shaping,
    format_penalty,
    invalid_action_penalty,
    keep_changed_subgoal,
    keep_consistency_penalty,
    keep_penalty,
    repeat_penalty,
    shaping_components,
    subgoal_failure_penalty,
    ungrounded_subgoal_penalty,
)
from reward.process import entity_words, subgoal_spans

TOL = 1e-12


def mk_turn(
    action: str = "",
    *,
    valid: bool = True,
    switch: bool | None = None,
    subgoal: str | None = None,
    obs: str = "",
    info: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    env_reward: float = 0.0,
) -> Turn:
    return Turn(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5],
        logprobs=[-0.1, -0.2, -0.3],
        decision=Decision(action=action, valid=valid, switch=switch, subgoal=subgoal, extra=extra or {}),
        observation=obs,
        info=info or {},
        env_reward=env_reward,
    )


def mk_traj(
    turns: list[Turn], *, won: bool = False, task: str = "", info: dict[str, Any] | None = None
) -> Trajectory:
    return Trajectory(
        traj_id="t0", group_id="g0", task_id="task", env_name="synthetic", turns=turns, task=task, won=won,
        info=info or {},
    )  # fmt: skip


def close(a: np.ndarray, b: list[float]) -> bool:
    return a.dtype == np.float64 and a.shape == (len(b),) and np.allclose(a, b, rtol=0.0, atol=TOL)


EMPTY = mk_traj([])


# ---------------------------------------------------------------------------------------------------------------
# every term: empty trajectory -> float64[0]
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TERMS))
def test_every_term_on_empty_trajectory(name: str) -> None:
    out = TERMS[name](EMPTY, ShapingConstants())
    assert out.dtype == np.float64 and out.shape == (0,)


# ---------------------------------------------------------------------------------------------------------------
# format (HiPER App. C, HIPIF App. B)
# ---------------------------------------------------------------------------------------------------------------


def test_format_all_valid_all_invalid_mixed() -> None:
    assert close(format_penalty(mk_traj([mk_turn("a"), mk_turn("b")]), 0.1), [0.0, 0.0])
    assert close(format_penalty(mk_traj([mk_turn(valid=False)] * 3), 0.1), [-0.1, -0.1, -0.1])
    mixed = mk_traj([mk_turn(), mk_turn(valid=False), mk_turn(), mk_turn(valid=False)])
    assert close(format_penalty(mixed, 0.1), [0.0, -0.1, 0.0, -0.1])
    assert close(format_penalty(mixed, penalty=0.5), [0.0, -0.5, 0.0, -0.5])


# ---------------------------------------------------------------------------------------------------------------
# KEEP penalty and KEEP consistency (HiPER App. C)
# ---------------------------------------------------------------------------------------------------------------


def test_keep_penalty_golden_and_keep_at_turn0() -> None:
    # decisions KEEP, KEEP, SWITCH, KEEP, None -> q = switches() = [1 (turn 0 forced), 0, 1, 0, 0]
    # c_t = -0.3 * (1 - q_t) = [0, -0.3, 0, -0.3, -0.3]
    traj = mk_traj([mk_turn(switch=s) for s in (False, False, True, False, None)])
    assert close(keep_penalty(traj, 0.3), [0.0, -0.3, 0.0, -0.3, -0.3])
    assert close(keep_penalty(traj, c_keep=0.1), [0.0, -0.1, 0.0, -0.1, -0.1])
    assert close(keep_penalty(mk_traj([mk_turn(switch=False)]), 0.3), [0.0])  # single KEEP at turn 0: q_0 = 1
    all_switch = mk_traj([mk_turn(switch=True)] * 4)
    assert close(keep_penalty(all_switch, 0.3), [0.0] * 4)


def test_keep_consistency_golden() -> None:
    turns = [
        mk_turn(switch=True, subgoal="find a cup"),  # 0: SWITCH                       -> 0
        mk_turn(switch=False, subgoal="find a cup"),  # 1: exact copy                  -> 0
        mk_turn(switch=False, subgoal="  find a   cup "),  # 2: whitespace only        -> 0
        mk_turn(switch=False, subgoal="find a mug"),  # 3: text changed                -> -0.1
        mk_turn(
            switch=False, subgoal="find a cup", extra={"keep_changed_subgoal": False}
        ),  # 4: parser says no
        mk_turn(
            switch=False, subgoal="find a cup", extra={"keep_changed_subgoal": True}
        ),  # 5: parser says yes
        mk_turn(switch=True, subgoal="cool the cup"),  # 6: SWITCH may change text     -> 0
        mk_turn(switch=False, subgoal=None),  # 7: missing subgoal = format error       -> 0
        mk_turn(switch=None, subgoal="something else"),  # 8: unreadable switch        -> 0
        mk_turn(switch=False, subgoal="Something Else"),  # 9: case differs: not exact -> -0.1
    ]
    traj = mk_traj(turns)
    assert keep_changed_subgoal(traj).tolist() == [
        False,
        False,
        False,
        True,
        False,
        True,
        False,
        False,
        False,
        True,
    ]
    assert close(keep_consistency_penalty(traj, 0.1), [0, 0, 0, -0.1, 0, -0.1, 0, 0, 0, -0.1])


def test_keep_consistency_turn0_is_never_charged() -> None:
    traj = mk_traj([mk_turn(switch=False, subgoal="x", extra={"keep_changed_subgoal": True})])
    assert close(keep_consistency_penalty(traj, 0.1), [0.0])


# ---------------------------------------------------------------------------------------------------------------
# invalid action and HISR action grounding
# ---------------------------------------------------------------------------------------------------------------


def test_invalid_action_penalty() -> None:
    traj = mk_traj(
        [mk_turn("a", info={"valid_action": False}), mk_turn("b", info={"valid_action": True}), mk_turn("c")]
    )
    assert close(invalid_action_penalty(traj, 0.1), [-0.1, 0.0, 0.0])  # missing key: no evidence, no penalty
    assert close(invalid_action_penalty(traj, penalty=1.0), [-1.0, 0.0, 0.0])


def _hisr_traj() -> Trajectory:
    turns = [
        # 0: in the reset list, env answers normally                     -> executable
        mk_turn("go to desk 1", obs="start", info={"admissible_actions": ["take pen 1 from desk 1", "look"]}),
        # 1: "open drawer 9" not in turn 0's (post-step) list              -> not executable
        mk_turn(
            "open drawer 9", obs="On the desk 1, you see a pen 1.", info={"admissible_actions": ["look"]}
        ),
        # 2: admissible ("look", layout ignored), but answer "Nothing happens." -> not executable
        mk_turn("  LOOK ", obs="x", info={"next_observation": "Nothing happens."}),
        # 3: list inherited from turn 1 ("look"); env says invalid          -> not executable
        mk_turn("look", obs="y", info={"valid_action": False}),
        # 4: no action sent (non-acting turn)                               -> not executable
        mk_turn("", obs="z"),
        # 5: admissible, next observation comes from the fallback: none (last turn) -> executable
        mk_turn("look", obs="w"),
    ]
    return mk_traj(turns, info={"admissible_actions": ["go to desk 1", "look"]})


def test_action_executable_and_grounding_reward() -> None:
    traj = _hisr_traj()
    assert action_executable(traj).tolist() == [True, False, False, False, False, True]
    # alpha * r_g = 0.3 * [1, 0, 0, 0, 0, 1]
    assert close(action_grounding_reward(traj), [0.3, 0.0, 0.0, 0.0, 0.0, 0.3])
    assert close(action_grounding_reward(traj, alpha=1.0), [1.0, 0.0, 0.0, 0.0, 0.0, 1.0])


def test_action_grounding_without_admissible_list() -> None:
    # no list anywhere (benchmark without one): only the environment's answer decides
    traj = mk_traj(
        [mk_turn("foo", obs="a"), mk_turn("bar", obs="Nothing happened here"), mk_turn("baz", obs="b")]
    )
    # turn 0's answer is turn 1's observation ("Nothing happened") -> 0; turn 1's answer "b" -> 1; turn 2 unknown -> 1
    assert action_executable(traj).tolist() == [False, True, True]


# ---------------------------------------------------------------------------------------------------------------
# HIPIF r^gr: ungrounded subgoals
# ---------------------------------------------------------------------------------------------------------------

ROOM = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, a fridge 1."
TASK = "put a clean apple in microwave"


def test_entity_words() -> None:
    assert entity_words(ROOM) == {"room", "cabinet", "countertop", "fridge"}
    assert entity_words("Check the cabinets and boxes, then find tomatoes") == {"cabinet", "box", "tomato"}
    assert entity_words("go to it and look around") == set()


def test_ungrounded_subgoal_golden() -> None:
    turns = [
        mk_turn("go to countertop 1", switch=True, subgoal="go to countertop 1", obs=ROOM),  # 0: countertop -> 0
        mk_turn("look", switch=False, subgoal="find the unicorn", obs="On the countertop 1, you see a mug 1."),  # 1: KEEP, unchecked
        mk_turn("look", switch=True, subgoal="find the unicorn", obs="You see nothing."),  # 2: nothing matches -> -0.1
        mk_turn("look", switch=True, subgoal="locate the apple", obs="ok"),  # 3: "apple" is in the task -> 0
        mk_turn("look", switch=True, subgoal="Check the CABINETS", obs="ok"),  # 4: plural of cabinet 1 (turn 0 obs) -> 0
        mk_turn("look", switch=True, subgoal="take the mug", obs="ok", info={"admissible_actions": ["use desklamp 1"]}),  # 5: mug seen at turn 1 -> 0
        mk_turn("look", switch=True, subgoal="turn on the desklamp", obs="ok"),  # 6: desklamp admissible here -> 0
        mk_turn("look", switch=True, subgoal=None, obs="ok"),  # 7: missing subgoal: format's business -> 0
        mk_turn("look", switch=True, subgoal="go and look around", obs="ok"),  # 8: no entity word at all -> -0.1
    ]  # fmt: skip
    traj = mk_traj(turns, task=TASK)
    assert close(ungrounded_subgoal_penalty(traj, 0.1), [0, 0, -0.1, 0, 0, 0, 0, 0, -0.1])
    # without the task as context, "apple" is not grounded at turn 3 -> -0.1 there too
    assert close(
        ungrounded_subgoal_penalty(traj, 0.1, include_task=False), [0, 0, -0.1, -0.1, 0, 0, 0, 0, -0.1]
    )


def test_ungrounded_subgoal_turn0_keep_is_checked() -> None:
    # turn 0 is a boundary even when the model wrote KEEP, so its subgoal is a proposal and is checked
    traj = mk_traj([mk_turn("look", switch=False, subgoal="find the dragon", obs=ROOM)], task=TASK)
    assert close(ungrounded_subgoal_penalty(traj, 0.1), [-0.1])


# ---------------------------------------------------------------------------------------------------------------
# HIPIF r^term: subgoals of successful trajectories that ended on a failure
# ---------------------------------------------------------------------------------------------------------------


def _term_turns() -> list[Turn]:
    nh = {"next_observation": "Nothing happens."}
    ok = {"next_observation": "You open the fridge 1."}
    return [
        mk_turn("open fridge 1", switch=True, subgoal="s0", info=ok),  # span 0 = turns 0-1
        mk_turn("cool apple 1", switch=False, subgoal="s0", info=nh),  #   last answer fails -> -0.1 at turn 0
        mk_turn("go to desk 1", switch=True, subgoal="s1", info=nh),  # span 1 = turns 2-3
        mk_turn("look", switch=False, subgoal="s1", info=ok),  #   failure mid-span only -> 0
        mk_turn("take pen 1", switch=True, subgoal="s2", info={"valid_action": False, **ok}),  # span 2: env invalid -> -0.1 at 4
        mk_turn("", switch=True, subgoal="s3"),  # span 3 = turn 5 alone: no action -> skipped
        mk_turn("put pen 1 in drawer 1", switch=True, subgoal="s4", info={"next_observation": "You won!"}),  # -> 0
    ]  # fmt: skip


def test_subgoal_failure_only_in_successful_trajectories() -> None:
    won = mk_traj(_term_turns(), won=True)
    assert subgoal_spans(won) == [(0, 2), (2, 4), (4, 5), (5, 6), (6, 7)]
    assert close(subgoal_failure_penalty(won, 0.1), [-0.1, 0, 0, 0, -0.1, 0, 0])
    lost = mk_traj(_term_turns(), won=False)
    assert close(subgoal_failure_penalty(lost, 0.1), [0.0] * 7)


def test_subgoal_failure_uses_next_turn_observation_and_scienceworld_pattern() -> None:
    turns = [
        mk_turn("focus on x", switch=True, subgoal="a", obs="start"),  # answer = turn 1's observation
        mk_turn("look", switch=True, subgoal="b", obs="No known action matches that input."),
        mk_turn("look", switch=False, subgoal="b", obs="fine", info={"next_observation": "done"}),
    ]
    # span 0 = [0]: its answer is turn 1's observation -> failure -> -0.1 at turn 0; span 1 ends on "done" -> 0
    assert close(subgoal_failure_penalty(mk_traj(turns, won=True), 0.1), [-0.1, 0.0, 0.0])


# ---------------------------------------------------------------------------------------------------------------
# HIPIF r^exec: third repeat of an action-observation pair within one subgoal
# ---------------------------------------------------------------------------------------------------------------


def _pairs(pairs: list[tuple[str, str]], switches: list[bool] | None = None) -> Trajectory:
    switches = switches or [True] + [False] * (len(pairs) - 1)
    return mk_traj(
        [
            mk_turn(a, switch=q, info={"next_observation": o})
            for (a, o), q in zip(pairs, switches, strict=True)
        ]
    )


def test_repeat_exactly_two_vs_three_vs_four() -> None:
    ax = ("open cabinet 1", "Nothing happens.")
    assert close(repeat_penalty(_pairs([ax, ax]), 0.1), [0.0, 0.0])  # 2 occurrences: no penalty
    assert close(repeat_penalty(_pairs([ax, ax, ax]), 0.1), [0.0, 0.0, -0.1])  # 3rd occurrence -> -0.1
    assert close(repeat_penalty(_pairs([ax, ax, ax, ax]), 0.1), [0.0, 0.0, -0.1, -0.1])  # 3rd and 4th


def test_repeat_nonconsecutive_distinct_pairs_and_layout() -> None:
    ax, ay, bx = ("a", "x"), ("a", "y"), ("b", "x")
    # (a,x) at 0, 2, 4 -> third at 4; (a,y) and (b,x) are different pairs; " A " == "a" after normalisation
    traj = _pairs([ax, ay, ax, bx, (" A ", "X"), ay])
    assert close(repeat_penalty(traj, 0.1), [0.0, 0.0, 0.0, 0.0, -0.1, 0.0])
    assert close(repeat_penalty(traj, 0.1, threshold=2), [0.0, 0.0, -0.1, 0.0, -0.1, -0.1])


def test_repeat_counts_restart_at_subgoal_switch() -> None:
    ax = ("a", "x")
    # spans [0,1] and [2,3,4]: 2 + 3 occurrences -> only the 3rd inside the second span is charged
    traj = _pairs([ax] * 5, switches=[True, False, True, False, False])
    assert close(repeat_penalty(traj, 0.1), [0.0, 0.0, 0.0, 0.0, -0.1])
    traj = _pairs([ax] * 4, switches=[True, False, True, False])  # 2 + 2: never three inside one span
    assert close(repeat_penalty(traj, 0.1), [0.0] * 4)


def _repeat_reference(traj: Trajectory, penalty: float, threshold: int) -> np.ndarray:
    """Brute force: for each acting turn, count equal pairs among acting turns of its span up to and including it."""
    q = traj.switches()
    T = len(traj.turns)
    out = np.zeros(T)
    for t in range(T):
        if not traj.turns[t].decision.action:
            continue
        start = max(s for s in range(t + 1) if q[s])
        key = (traj.turns[t].decision.action, traj.turns[t].info["next_observation"])
        n = sum(
            1
            for j in range(start, t + 1)
            if traj.turns[j].decision.action and (traj.turns[j].decision.action, traj.turns[j].info["next_observation"]) == key
        )  # fmt: skip
        out[t] = -penalty if n >= threshold else 0.0
    return out


def test_repeat_matches_brute_force_on_random_trajectories() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        T = int(rng.integers(0, 25))
        turns = [
            mk_turn(
                str(rng.choice(["", "a", "b"])),
                switch=bool(rng.random() < 0.2),
                info={"next_observation": str(rng.choice(["x", "y"]))},
            )
            for _ in range(T)
        ]
        traj = mk_traj(turns)
        threshold = int(rng.integers(1, 5))
        penalty = float(rng.random())
        ref = _repeat_reference(traj, penalty, threshold)
        assert np.allclose(repeat_penalty(traj, penalty, threshold), ref, rtol=0.0, atol=TOL)


# ---------------------------------------------------------------------------------------------------------------
# composition
# ---------------------------------------------------------------------------------------------------------------


def test_config_defaults_and_validation() -> None:
    c = ShapingConfig()
    assert c.terms == ("format",) and c.constants == ShapingConstants()
    k = c.constants
    # in units of the success reward R: HiPER's 0.1 / 0.3 and HIPIF's 0.1 against R = 10
    assert (k.format_penalty, k.c_keep, k.keep_consistency_penalty, k.process_penalty, k.repeat_threshold) == (
        0.01, 0.03, 0.03, 0.01, 3,
    )  # fmt: skip
    assert (k.grounding_alpha, k.keep_mode, c.success_reward) == (0.3, "per_turn", 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.c_keep = 0.5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.constants = ShapingConstants()  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown"):
        ShapingConfig(terms=("format", "nope"))
    with pytest.raises(ValueError, match="repeated"):
        ShapingConfig(terms=("format", "format"))
    with pytest.raises(ValueError, match="grounding_alpha"):
        ShapingConfig(constants=ShapingConstants(grounding_alpha=1.5))
    with pytest.raises(ValueError, match="repeat_threshold"):
        ShapingConfig(constants=ShapingConstants(repeat_threshold=0))
    with pytest.raises(ValueError, match="keep_mode"):
        ShapingConfig(constants=ShapingConstants(keep_mode="ratio"))
    with pytest.raises(ValueError, match="success_reward"):
        ShapingConfig(success_reward=0.0)
    for terms in (HIPER_TERMS, HIPIF_TERMS, HISR_TERMS):
        ShapingConfig(terms=terms)


def _hiper_traj() -> Trajectory:
    return mk_traj(
        [
            mk_turn("a", switch=True, subgoal="g1", env_reward=0.0),
            mk_turn("b", switch=False, subgoal="g1", valid=False, env_reward=0.0),
            mk_turn("c", switch=False, subgoal="g2", env_reward=0.0),
            mk_turn("d", switch=True, subgoal="g3", env_reward=10.0),
        ]
    )


def test_apply_shaping_records_components_and_reward_sum() -> None:
    traj = _hiper_traj()
    traj.turns[0].shaped["him"] = 0.25  # another stage's component survives
    cfg = ShapingConfig(terms=HIPER_TERMS, success_reward=10.0)  # an env paying R = 10, as ALFWorld does
    out = apply_shaping(traj, cfg)
    assert out is traj  # in place
    expected = {
        # format 0.01 R: turn 1 malformed; keep 0.03 R: q = [1,0,0,1] -> -0.3 at 1, 2; consistency 0.03 R: turn 2
        # KEEP changed g1 -> g2
        "format": [0.0, -0.1, 0.0, 0.0],
        "keep": [0.0, -0.3, -0.3, 0.0],
        "keep_consistency": [0.0, 0.0, -0.3, 0.0],
    }
    for name, values in expected.items():
        assert [t.shaped[name] for t in traj.turns] == pytest.approx(values, abs=TOL)
    assert set(traj.turns[1].shaped) == set(HIPER_TERMS)
    assert traj.turns[0].shaped["him"] == 0.25
    # r_t = env + sum(shaped): [0 + 0.25, -0.1 - 0.3, -0.3 - 0.3, 10.0]
    assert close(traj.rewards(), [0.25, -0.4, -0.6, 10.0])
    for t in traj.turns:
        assert t.reward == pytest.approx(t.env_reward + sum(t.shaped.values()), abs=TOL)
    assert traj.episode_return == pytest.approx(0.25 - 0.4 - 0.6 + 10.0, abs=TOL)
    before = [dict(t.shaped) for t in traj.turns]
    apply_shaping(traj, cfg)  # idempotent
    assert [t.shaped for t in traj.turns] == before


def test_shaping_components_is_pure_and_matches_terms() -> None:
    traj = _hiper_traj()
    comps = shaping_components(traj, ShapingConfig(terms=("format", "keep")))
    assert list(comps) == ["format", "keep"]
    assert close(comps["keep"], [0.0, -0.03, -0.03, 0.0])  # c_KEEP 0.03 R, R = 1
    assert all(t.shaped == {} for t in traj.turns)
    # the terms read their constants from ShapingConfig.constants, times R (swapping the two fails here)
    scaled = ShapingConfig(
        terms=("format", "keep"),
        constants=ShapingConstants(format_penalty=0.02, c_keep=0.05),
        success_reward=4.0,
    )
    comps = shaping_components(traj, scaled)
    assert close(comps["format"], [0.0, -0.08, 0.0, 0.0]) and close(comps["keep"], [0.0, -0.2, -0.2, 0.0])


def test_keep_penalty_normalized_mode_costs_at_most_c_keep_per_episode() -> None:
    """keep_mode "normalized" (the HiPER authors' default): -c_KEEP (1 - q_t) / T. q = [1, 0, 0, 1], T = 4,
    c_KEEP 0.03 R with R = 10: -0.3 / 4 = -0.075 on each of the two KEEP turns, -0.15 in all (per turn: -0.6)."""
    cfg = ShapingConfig(
        terms=("keep",), constants=ShapingConstants(keep_mode="normalized"), success_reward=10.0
    )
    assert close(shaping_components(_hiper_traj(), cfg)["keep"], [0.0, -0.075, -0.075, 0.0])


def test_only_the_grounding_weight_is_not_scaled_by_the_success_reward() -> None:
    """HISR's α is a weight inside the fused model reward (Eq. 8), not an amount: 0.3 whatever R; the penalties
    scale (here invalid_action 0.01 R with R = 10 -> -0.1)."""
    turns = [
        mk_turn("x", info={"next_observation": "You won.", "valid_action": True}),
        mk_turn("y", info={"next_observation": "Nothing happens.", "valid_action": False}),
    ]
    cfg = ShapingConfig(terms=("action_grounding", "invalid_action"), success_reward=10.0)
    comps = shaping_components(mk_traj(turns), cfg)
    assert close(comps["action_grounding"], [0.3, 0.0]) and close(comps["invalid_action"], [0.0, -0.1])


def test_apply_shaping_hipif_and_hisr_presets() -> None:
    nh = {"next_observation": "Nothing happens."}
    turns = [
        mk_turn("open cabinet 1", switch=True, subgoal="open the cabinet", obs=ROOM, info=nh),
        mk_turn("open cabinet 1", switch=False, subgoal="open the cabinet", obs="Nothing happens.", info=nh),
        mk_turn("open cabinet 1", switch=False, subgoal="open the cabinet", obs="Nothing happens.", info=nh, valid=False),
        mk_turn("go to moon", switch=True, subgoal="fly to the moon", obs="Nothing happens.",
                info={"next_observation": "You won.", "valid_action": True}, env_reward=10.0),
    ]  # fmt: skip
    # R = 10 (ALFWorld): each HIPIF penalty is 0.01 R = 0.1 (App. B)
    traj = apply_shaping(
        mk_traj(turns, won=True, task=TASK), ShapingConfig(terms=HIPIF_TERMS, success_reward=10.0)
    )
    # format: turn 2; ungrounded: turn 3 ("moon" nowhere); failure: span [0..2] ends on "Nothing happens." -> turn 0;
    # repeat: 3rd (open cabinet 1, Nothing happens.) at turn 2
    assert [t.shaped["format"] for t in traj.turns] == pytest.approx([0, 0, -0.1, 0], abs=TOL)
    assert [t.shaped["ungrounded_subgoal"] for t in traj.turns] == pytest.approx([0, 0, 0, -0.1], abs=TOL)
    assert [t.shaped["subgoal_failure"] for t in traj.turns] == pytest.approx([-0.1, 0, 0, 0], abs=TOL)
    assert [t.shaped["repeat"] for t in traj.turns] == pytest.approx([0, 0, -0.1, 0], abs=TOL)
    # r = [-0.1, 0, -0.2, 10 - 0.1]
    assert close(traj.rewards(), [-0.1, 0.0, -0.2, 9.9])

    apply_shaping(traj, ShapingConfig(terms=HISR_TERMS, success_reward=10.0))
    # executable: answers fail for turns 0-2 ("Nothing happens."), turn 3 answered "You won." -> 0.3 at turn 3 only
    assert [t.shaped["action_grounding"] for t in traj.turns] == pytest.approx([0, 0, 0, 0.3], abs=TOL)


def test_apply_shaping_empty_trajectory() -> None:
    traj = mk_traj([])
    assert apply_shaping(traj, ShapingConfig(terms=tuple(TERMS))) is traj
    assert traj.rewards().shape == (0,)


def test_reward_package_imports_no_heavy_frameworks() -> None:
    code = (
        "import sys, reward, reward.shaping; "
        "bad = [m for m in ('torch', 'ray', 'vllm', 'deepspeed') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[3])
    )
