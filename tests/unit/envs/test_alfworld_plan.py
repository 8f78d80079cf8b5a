"""The alignment of ALFWorld expert commands to ALFRED plan steps (``envs.alfworld_plan``), on hand-written plans and
command lists whose segments are worked out in the comments (module docstring, rules 1-4)."""

from __future__ import annotations

from envs.alfworld_plan import (
    Alignment,
    Command,
    PlanStep,
    Segment,
    align,
    completes,
    object_type,
    parse_command,
    subtasks,
)


def plan(*steps: tuple[str, ...]) -> list[PlanStep]:
    return [PlanStep("", action, tuple(args), "") for action, *args in steps]


def cut(alignment: Alignment) -> list[tuple[int, list[str]]]:
    """(plan step, commands) per segment."""
    return [(s.step, list(s.actions)) for s in alignment.segments]


HEAT = plan(
    ("GotoLocation", "countertop"),  # 0
    ("PickupObject", "apple"),  # 1
    ("GotoLocation", "microwave"),  # 2
    ("HeatObject", "apple"),  # 3
    ("GotoLocation", "diningtable"),  # 4
    ("PutObject", "apple", "diningtable"),  # 5
)


def test_commands_parse_in_both_grammars():
    assert parse_command("take apple 1 from countertop 2") == Command("take", "apple 1", "countertop 2")
    assert parse_command("put apple 1 in/on diningtable 1") == Command("put", "apple 1", "diningtable 1")
    assert parse_command("move apple 1 to diningtable 1") == Command("put", "apple 1", "diningtable 1")
    assert parse_command("heat apple 1 with microwave 1") == Command("heat", "apple 1", "microwave 1")
    assert parse_command("go to sidetable 10") == Command("go", "", "sidetable 10")
    assert parse_command("use desklamp 2") == Command("use", "desklamp 2", "")
    assert parse_command("look") == Command("look") and parse_command("") == Command("")
    assert object_type("alarmclock 3") == "alarmclock" and object_type("desk") == "desk"


def test_an_anchor_matches_verb_and_argument_types():
    put = PlanStep("", "PutObject", ("apple", "diningtable"), "")
    assert completes(put, parse_command("put apple 2 in/on diningtable 1"))
    assert not completes(put, parse_command("put apple 2 in/on countertop 1"))  # receptacle type differs
    assert not completes(put, parse_command("put tomato 1 in/on diningtable 1"))  # object type differs
    assert not completes(put, parse_command("take apple 2 from diningtable 1"))  # verb differs
    assert not completes(
        PlanStep("", "GotoLocation", ("diningtable",), ""), parse_command("go to diningtable 1")
    )


def test_search_goes_to_navigation_local_commands_to_the_manipulation():
    actions = [
        "look",  # 0  before the first "go to": joins the first navigation
        "go to cabinet 1",  # 1  search
        "open cabinet 1",  # 2  search
        "close cabinet 1",  # 3  search
        "go to countertop 1",  # 4  last "go to" before the take: ends navigation 0
        "take apple 1 from countertop 1",  # 5  anchor of step 1
        "go to microwave 1",  # 6  navigation 2
        "heat apple 1 with microwave 1",  # 7  anchor of step 3
        "go to diningtable 1",  # 8  navigation 4
        "examine diningtable 1",  # 9  after the last "go to": the put's own
        "put apple 1 in/on diningtable 1",  # 10 anchor of step 5, the last command
    ]
    a = align(HEAT, actions)
    assert cut(a) == [
        (0, actions[0:5]),
        (1, actions[5:6]),
        (2, actions[6:7]),
        (3, actions[7:8]),
        (4, actions[8:9]),
        (5, actions[9:11]),
    ]
    assert a.complete and not a.empty and not a.reordered
    assert [s.reached for s in a.segments if s.anchor is None] == [
        "countertop 1",
        "microwave 1",
        "diningtable 1",
    ]
    assert subtasks(a) == [
        ("find and take apple", actions[0:6]),
        ("heat apple", actions[6:8]),
        ("put apple in/on diningtable", actions[8:11]),
    ]


def test_opening_the_receptacle_the_object_is_in_belongs_to_the_pickup():
    p = plan(("GotoLocation", "fridge"), ("PickupObject", "egg"))
    actions = ["look", "go to fridge 1", "open fridge 1", "take egg 1 from fridge 1"]
    assert cut(align(p, actions)) == [(0, actions[:2]), (1, actions[2:])]


def test_no_go_to_leaves_the_navigation_step_empty():
    # The lamp stands on the desk the bowl came from: the expert never moves between the take and the use.
    p = plan(
        ("GotoLocation", "desk"),
        ("PickupObject", "bowl"),
        ("GotoLocation", "desklamp"),
        ("ToggleObject", "desklamp"),
    )
    actions = ["look", "go to desk 1", "take bowl 1 from desk 1", "use desklamp 1"]
    a = align(p, actions)
    assert cut(a) == [(0, actions[:2]), (1, actions[2:3]), (3, actions[3:])]
    assert a.empty == (2,) and a.complete
    assert subtasks(a) == [("find and take bowl", actions[:3]), ("find and use desklamp", actions[3:])]


def test_without_a_navigation_step_in_the_plan_the_walk_joins_the_manipulation():
    # ALFRED cleaned at the sink next to the pickup (no GotoLocation before CleanObject); the expert walks there.
    p = plan(
        ("GotoLocation", "sinkbasin"),
        ("PickupObject", "cloth"),
        ("CleanObject", "cloth"),
        ("GotoLocation", "cart"),
        ("PutObject", "cloth", "cart"),
    )
    actions = [
        "look",
        "go to countertop 1",
        "take cloth 1 from countertop 1",
        "go to sinkbasin 1",  # no GotoLocation before step 2: this walk is the clean's
        "clean cloth 1 with sinkbasin 1",
        "go to cart 1",
        "put cloth 1 in/on cart 1",
    ]
    a = align(p, actions)
    assert cut(a) == [
        (0, actions[:2]),
        (1, actions[2:3]),
        (2, actions[3:5]),
        (3, actions[5:6]),
        (4, actions[6:]),
    ]
    assert a.complete


def test_steps_done_out_of_plan_order_still_align():
    # Two look_at_obj_in_light plans toggle first; the expert always takes the object first.
    p = plan(("GotoLocation", "desk"), ("ToggleObject", "desklamp"), ("PickupObject", "book"))
    actions = ["look", "go to bed 1", "take book 1 from bed 1", "go to desk 1", "use desklamp 1"]
    a = align(p, actions)
    # The pickup (step 2) has no GotoLocation right before it in the plan: its walk is its own.  The toggle's
    # GotoLocation (step 0) takes the walk to the desk.
    assert cut(a) == [(2, actions[:3]), (0, actions[3:4]), (1, actions[4:])]
    assert a.reordered and a.complete
    assert [g for g, _ in subtasks(a)] == ["find and take book", "find and use desklamp"]


def test_a_wrong_object_and_an_undone_pickup_stay_in_the_search():
    p = plan(
        ("GotoLocation", "shelf"),
        ("PickupObject", "vase"),
        ("GotoLocation", "safe"),
        ("PutObject", "vase", "safe"),
    )
    actions = [
        "look",
        "go to shelf 1",
        "take pencil 1 from shelf 1",  # not a vase: no anchor
        "put pencil 1 in/on shelf 1",  # puts back what no step took: nothing to undo
        "take vase 1 from shelf 1",  # anchor of step 1 ...
        "put vase 1 in/on shelf 1",  # ... undone (rule 2): a put that completes no PutObject step
        "go to shelf 2",  # the search goes on: navigation of step 0
        "take vase 2 from shelf 2",  # anchor of step 1
        "go to safe 1",
        "open safe 1",
        "put vase 2 in/on safe 1",
    ]
    a = align(p, actions)
    assert cut(a) == [(0, actions[:7]), (1, actions[7:8]), (2, actions[8:9]), (3, actions[9:])]
    assert a.complete


def test_disagreement_is_reported_not_hidden():
    # Commands after the last anchor are unassigned: the alignment is incomplete.
    a = align(HEAT[:2], ["go to countertop 1", "take apple 1 from countertop 1", "look", "inventory"])
    assert a.unassigned == ("look", "inventory") and not a.unmatched and not a.complete
    assert align(HEAT, ["look"]) == Alignment(segments=(), unassigned=("look",), unmatched=(1, 3, 5))
    # A step no command completes is reported, but every command has a step: complete (ALFWorld's goal can hold
    # before the plan's last step; here the expert never heats and the put ends the commands).
    actions = [
        "go to countertop 1",
        "take apple 1 from countertop 1",
        "go to diningtable 1",
        "put apple 1 in/on diningtable 1",
    ]
    a = align(HEAT, actions)
    assert a.unmatched == (3,) and not a.unassigned and a.complete
    # the put's GotoLocation (step 4) takes the walk; the heat's (step 2) has no anchor after it, so no segment
    assert cut(a) == [(0, actions[:1]), (1, actions[1:2]), (4, actions[2:3]), (5, actions[3:])]
    assert [g for g, _ in subtasks(a)] == ["find and take apple", "put apple in/on diningtable"]


def test_a_repeated_step_says_another():
    p = plan(
        ("GotoLocation", "sofa"),
        ("PickupObject", "box"),
        ("GotoLocation", "coffeetable"),
        ("PutObject", "box", "coffeetable"),
        ("GotoLocation", "dresser"),
        ("PickupObject", "box"),
        ("GotoLocation", "coffeetable"),
        ("PutObject", "box", "coffeetable"),
    )
    actions = [
        "look",
        "go to sofa 1",
        "take box 3 from sofa 1",
        "go to coffeetable 1",
        "put box 3 in/on coffeetable 1",
        "go to dresser 1",
        "take box 2 from dresser 1",
        "go to coffeetable 1",
        "put box 2 in/on coffeetable 1",
    ]
    a = align(p, actions)
    # Each anchor completes the earliest pending step it matches: the first take step 1, the second step 5.
    assert [s.step for s in a.segments] == list(range(8)) and a.complete
    assert subtasks(a) == [
        ("find and take box", actions[:3]),
        ("put box in/on coffeetable", actions[3:5]),
        ("find and take another box", actions[5:7]),
        ("put another box in/on coffeetable", actions[7:]),
    ]


def test_segments_record_their_anchor():
    a = align(HEAT[:2], ["go to countertop 1", "take apple 1 from countertop 1"])
    assert a.segments == (
        Segment(0, "GotoLocation", ("countertop",), ("go to countertop 1",), None, "countertop 1"),
        Segment(
            1,
            "PickupObject",
            ("apple",),
            ("take apple 1 from countertop 1",),
            "take apple 1 from countertop 1",
        ),
    )
