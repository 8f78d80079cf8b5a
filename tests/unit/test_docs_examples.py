"""The worked examples of docs/adding_an_algorithm.md, adding_an_environment.md and adding_a_protocol.md, run.

Convention: a fenced block directly after an HTML comment ``<!-- example: TARGET -->`` is executable.

* TARGET a path ending in ``.py`` (``learners/algos/reinforce_pp.py``): the block is that module's source. It
  is not in the tree; the test loads it under its dotted name (``learners.algos.reinforce_pp``) into
  ``sys.modules`` for one test, so the page's own imports of it run unchanged.
* TARGET ending in ``.yaml``: a preset, written to a temporary folder; commands naming its stem use that file.
* TARGET ``commands``: ``hierarl train`` lines, each run as ``hierarl train --dry-run ...`` in this process; a
  line whose comment says ``exits 2: <text>`` must exit 2 with <text> in its one-line error; the others, 0.
* Any other TARGET (``register``, ``register_stage``, ``baseline``): a python snippet run word for word in a
  fresh namespace, after the page's modules are loaded (and, for a snippet that registers nothing, its ``register``
  snippet has run).

Other blocks (diffs, the loop sketch) are prose. Each page must hold the targets listed in ``PAGES``, so
losing a marker fails here instead of testing less. The algorithm, driver-stage, env and protocol tables the
snippets register into are restored after every test (``registries``), so nothing leaks into other tests.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import envs
import envs.base
from actors.demos import collect_demonstrations
from actors.episodes import EpisodeRequest
from actors.inference import SamplingParams
from actors.protocols import AGENTS, AgentFactory
from actors.trajectory import Trajectory, Turn
from envs.random_policy import random_policy_wins
from envs.synthetic import SyntheticHierEnv
from launch.cli.main import main
from launch.driver.stage_kinds import STAGE_KINDS, stage_kind
from launch.driver.stages import staged_update
from launch.driver.update_plan import UpdatePlan, UpdateResult
from learners.algos.registry import ALGOS, get_algo
from learners.batch import build_turn_batch
from reward.shaping import ShapingConfig, apply_shaping
from tests.unit.scripted_engine import FakeEngine, run_episodes

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = {
    "adding_an_algorithm.md": [
        "learners/algos/reinforce_pp.py",
        "register",
        "launch/configs/reinforce_pp_synthetic_small.yaml",
        "commands",
        "tests/unit/test_reinforce_pp.py",
        "launch/driver/novelty.py",
        "register_stage",
    ],
    "adding_an_environment.md": ["envs/keyroom.py", "register", "baseline", "commands"],
    "adding_a_protocol.md": ["actors/agents/act_only.py", "register", "commands"],
}
_BLOCK = re.compile(r"<!-- example: (\S+) -->\n```\w*\n(.*?)^```", re.S | re.M)


def examples(page: str) -> dict[str, str]:
    """TARGET → block source of one page, in page order."""
    found = _BLOCK.findall((DOCS / page).read_text())
    return dict(found) if len(found) == len({t for t, _ in found}) else {}


@pytest.fixture(autouse=True)
def registries():
    """Every registration a snippet makes is undone after the test."""
    tables: list[dict[str, Any]] = [ALGOS, envs.base._REGISTRY, AGENTS, STAGE_KINDS]
    saved = [dict(t) for t in tables]
    yield
    for table, before in zip(tables, saved, strict=True):
        table.clear()
        table.update(before)


class Page:
    """One page's examples, loaded: modules in ``sys.modules`` (undone by monkeypatch), presets on disk."""

    def __init__(self, name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        self.blocks, self.tmp_path, self.presets = examples(name), tmp_path, {}
        self.modules: dict[str, ModuleType] = {}
        for target, source in self.blocks.items():
            if target.endswith(".py"):
                self.modules[target] = self._load(target, source, monkeypatch)
            elif target.endswith(".yaml"):
                path = tmp_path / Path(target).name
                path.write_text(source)
                self.presets[path.stem] = str(path)

    def _load(self, target: str, source: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
        name = target.removesuffix(".py").replace("/", ".")
        path = self.tmp_path / Path(target).name
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        parent, _, leaf = name.rpartition(".")
        if parent in sys.modules:  # ``from learners.algos import reinforce_pp`` reads the package's attribute
            monkeypatch.setattr(sys.modules[parent], leaf, module, raising=False)
        spec.loader.exec_module(module)
        return module

    def run(self, target: str) -> dict[str, Any]:
        """Run a snippet word for word in a fresh namespace; its globals afterwards."""
        namespace: dict[str, Any] = {"__name__": f"docs_example_{target}"}
        exec(compile(self.blocks[target], f"<{target} snippet>", "exec"), namespace)
        return namespace

    def check_commands(self, capsys: pytest.CaptureFixture[str]) -> int:
        """Each ``hierarl train`` line as a dry run; its exit code (and error text) as its comment says."""
        lines = [ln for ln in self.blocks["commands"].splitlines() if ln.startswith("hierarl train")]
        for line in lines:
            command, _, comment = line.partition("#")
            args = [self.presets.get(a, a) for a in shlex.split(command)[2:] if a != "--dry-run"]
            expected = re.search(r"exits 2: (.+)", comment)
            capsys.readouterr()
            assert main(["train", "--dry-run", *args]) == (2 if expected else 0), line
            if expected:
                assert expected.group(1).strip() in capsys.readouterr().err, line
        return len(lines)


def test_every_page_holds_its_examples():
    for page, targets in PAGES.items():
        assert list(examples(page)) == targets, f"{page}: marked examples differ (or one is marked twice)"


# ------------------------------------------------------------------------------------------------------------
# Adding an algorithm: REINFORCE++-Baseline
# ------------------------------------------------------------------------------------------------------------


def _traj(traj_id: str, group: str, tokens: list[int], rewards: list[float]) -> Trajectory:
    """One turn per reward; turn k has ``tokens[k]`` response tokens."""
    turns = [Turn([1, 2, 3], [7] * n, [-1.0] * n, env_reward=r) for n, r in zip(tokens, rewards, strict=True)]
    return Trajectory(traj_id, group, "t", "synthetic", turns, status="finished")


def test_algorithm_targets_golden(monkeypatch, tmp_path):
    page = Page("adding_an_algorithm.md", monkeypatch, tmp_path)
    algo = page.modules["learners/algos/reinforce_pp.py"]
    # three groups of different sizes, so a per-group scale (RLOO's n/(n-1), GRPO's std) would show:
    # a: R = 2, 1, 0 (1, 1, 2 tokens) -> mean 1, Ã = 1, 0, -1; b: R = 1, 0 (2 tokens, 1) -> Ã = 1/2, -1/2;
    # c: one member (R = 5): no baseline, Ã = 0 (1 token). Tokens [1, 0, -1, -1, ½, ½, -½, 0]: mean -1/16,
    # deviations (17, 1, -15, -15, 9, 9, -7, 1)/16, var = (289 + 1 + 2·225 + 2·81 + 49 + 1) / 256 / 8
    # = 119/256, std = √119/16 -> Â = (17, 1, -15, -15, 9, 9, -7, 1) / √119
    trajs = [_traj("a0", "a", [1], [2.0]), _traj("a1", "a", [1], [1.0]), _traj("a2", "a", [2], [0.0])]
    trajs += [_traj("b0", "b", [2], [1.0]), _traj("b1", "b", [1], [0.0]), _traj("c0", "c", [1], [5.0])]
    batch = build_turn_batch(trajs, max_len=32, pad_id=0)
    out = algo.compute_targets(trajs, batch, None, algo.Config())
    resp = batch.response_mask.numpy()
    golden = np.array([17, 1, -15, -15, 9, 9, -7, 1]) / np.sqrt(119)
    np.testing.assert_allclose(out.token_adv[resp], golden, atol=1e-6)
    assert not out.token_adv[~resp].any() and (out.loss_mask == resp).all()
    # the record: a KL term by default (so the reference policy is read), groups of >= 2, no critic
    record = algo.ALGORITHM
    assert record.uses_reference(algo.Config()) and not record.uses_reference(algo.Config(kl_coef=0.0))
    assert (record.min_group_size, record.value_slots, record.value_heads) == (2, (), 0)


def test_algorithm_config_checks_its_fields(monkeypatch, tmp_path):
    algo = Page("adding_an_algorithm.md", monkeypatch, tmp_path).modules["learners/algos/reinforce_pp.py"]
    with pytest.raises(ValueError, match=r"^algo\.eps: got -1\.0; allowed: a number > 0$"):
        algo.Config(eps=-1.0)
    with pytest.raises(
        ValueError, match=r"^algo\.kl_kind: unknown value 'k9'"
    ):  # the shared fields still checked
        algo.Config(kl_kind="k9")
    assert algo.Config().kl_kind == "k2"


def test_algorithm_registers_and_runs_from_its_preset(monkeypatch, tmp_path, capsys):
    page = Page("adding_an_algorithm.md", monkeypatch, tmp_path)
    assert "reinforce_pp" not in ALGOS
    page.run("register")
    assert get_algo("reinforce_pp") is page.modules["learners/algos/reinforce_pp.py"].ALGORITHM
    assert page.check_commands(capsys) == 4
    assert main(["train", "--dry-run", page.presets["reinforce_pp_synthetic_small"]]) == 0
    out = capsys.readouterr().out
    assert "algo: reinforce_pp" in out and "kl_coef: 0.001" in out and "kl_kind: 'k2'" in out


def test_algorithm_page_test_passes(monkeypatch, tmp_path):
    test_module = Page("adding_an_algorithm.md", monkeypatch, tmp_path).modules[
        "tests/unit/test_reinforce_pp.py"
    ]
    tests = [f for name, f in vars(test_module).items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()


class AnnotatingUpdater:
    """Stands in for ``Updater.update``: applies the annotation its plan carries to the batch, as the real one does
    between the algorithm's shaping and its targets, and takes one optimizer step."""

    def update(self, trajs: list[Trajectory], plan: UpdatePlan) -> UpdateResult:
        assert plan.annotate is not None
        stats = plan.annotate(trajs, build_turn_batch(trajs, max_len=32, pad_id=0), None)
        return UpdateResult({"optimizer_steps": 1.0, **stats}, {})


def _seen(traj_id: str, *observations: str) -> Trajectory:
    turns = [Turn([1, 2], [7], [-1.0], observation=o) for o in observations]
    return Trajectory(traj_id, traj_id, "t", "synthetic", turns, status="finished")


def test_algorithm_with_a_driver_stage_scores_through_the_update_path_and_keeps_its_counts(
    monkeypatch, tmp_path
):
    page = Page("adding_an_algorithm.md", monkeypatch, tmp_path)
    page.run("register_stage")
    algo = get_algo("reinforce_pp_novelty")
    stage = stage_kind(algo).build(None)  # the page's builder reads none of the run's inputs
    # observations a, b, a: β/√1, β/√1, then a's second sighting β/√2 (β = 0.1)
    trajs = [_seen("x", "a", "b"), _seen("y", "a")]
    metrics, _ = staged_update(AnnotatingUpdater(), stage, trajs, UpdatePlan(seed=0), 1)
    assert [t.shaped["novelty"] for tr in trajs for t in tr.turns] == pytest.approx(
        [0.1, 0.1, 0.1 / np.sqrt(2)]
    )
    assert metrics["novelty_observations"] == 2 and trajs[0].episode_return == pytest.approx(0.2)
    # a resume: the checkpoint's state read into a fresh stage, which counts on: a's third sighting
    state = stage.state()
    assert state == {"novelty_seen": {"a": 2, "b": 1}}
    resumed = stage_kind(algo).build(None)
    resumed.restore(state)
    again = [_seen("z", "a")]
    staged_update(AnnotatingUpdater(), resumed, again, UpdatePlan(seed=0), 2)
    assert again[0].turns[0].shaped["novelty"] == pytest.approx(0.1 / np.sqrt(3))


# ------------------------------------------------------------------------------------------------------------
# Adding an environment: the locked room
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def keyroom(monkeypatch, tmp_path) -> Page:
    page = Page("adding_an_environment.md", monkeypatch, tmp_path)
    page.run("register")
    return page


def test_env_follows_the_contract_and_wins_a_scripted_episode(keyroom):
    env = envs.make("keyroom", boxes=3, max_steps=8)
    assert isinstance(env, envs.TextEnv) and envs.success_reward("keyroom") == 1.0
    obs, info = env.reset(task_id="keyroom-0")
    assert set(envs.INFO_KEYS) <= set(info) and "3 boxes" in obs and not info["won"]
    key = env.key_box
    assert env.expert_plan() == [("find the key", [f"open box {key}"]), ("leave the room", ["unlock door"])]
    # garbage is an invalid action, never an exception
    for bad in ["", None, "x" * 10_000, "unlock door"]:  # no key yet: unlocking is not admissible
        _, reward, terminated, truncated, info = env.step(bad)
        assert (reward, terminated, truncated, info["valid_action"]) == (0.0, False, False, False)
    # open the boxes in order until the key turns up, then unlock: 4 invalid + at most 3 opens + 1 = 8 steps
    for box in range(key + 1):
        _, reward, terminated, _, info = env.step(f"Open Box {box}.")  # commands are normalised
        assert info["valid_action"] and not terminated
    assert "unlock door" in info["admissible_actions"]
    obs, reward, terminated, truncated, info = env.step("unlock door")
    assert (reward, terminated, truncated, info["won"], info["score"]) == (1.0, True, False, True, 1.0)
    assert set(envs.INFO_KEYS) <= set(info) and info["admissible_actions"] is None
    assert not set(env.task_ids("train")) & set(env.task_ids("test"))
    with pytest.raises(ValueError, match="unknown split"):
        env.task_ids("dev")


def test_env_truncates_at_its_step_limit(keyroom):
    env = envs.make("keyroom", boxes=3, max_steps=2)
    env.reset(task_id="keyroom-1")
    assert env.step("wait")[3] is False and env.step("wait")[3] is True  # truncated on step 2, not terminated


def test_env_random_policy_baseline(keyroom, capsys):
    namespace = keyroom.run("baseline")
    printed = capsys.readouterr().out.strip()
    assert printed and printed in keyroom.blocks["baseline"]  # the page shows the number it prints
    # 7/18 exact (the page's arithmetic); 20 tasks × 50 plays: σ = √(7/18 · 11/18 / 1000) = 0.0154, so a
    # correct env lands within 3σ = 0.046. The draws are seeded: the same number every run.
    assert abs(namespace["rate"] - 7 / 18) < 0.046
    env = envs.make("keyroom", boxes=1, max_steps=2)  # one box: open it, unlock -> always won in 2 steps
    assert random_policy_wins(env, [("keyroom-0", 0)], max_steps=2, repeats=3) == [3]


def test_env_expert_demonstrations_win_through_the_rollout_loop(keyroom, tok):
    ids = envs.make("keyroom").task_ids("train")[:4]
    demos = collect_demonstrations("keyroom", "react", ids, tokenizer=tok, max_steps=6)
    assert [d.task_id for d in demos] == ids and all(d.won for d in demos)
    assert all(len(d.turns) == 2 and d.turns[-1].decision.action == "unlock door" for d in demos)


def test_env_runs_from_the_cli(keyroom, capsys):
    assert keyroom.check_commands(capsys) == 3


# ------------------------------------------------------------------------------------------------------------
# Adding an agent protocol: act only
# ------------------------------------------------------------------------------------------------------------

TASK = "stages2-acts2-dist0-seed3"
PARAMS = SamplingParams(temperature=1.0, max_tokens=64)


@pytest.fixture
def act_only(monkeypatch, tmp_path) -> Page:
    page = Page("adding_a_protocol.md", monkeypatch, tmp_path)
    page.run("register")
    return page


def _expert_actions(task: str) -> list[str]:
    env = SyntheticHierEnv()
    env.reset(task_id=task)
    return [a for _, acts in env.expert_plan() for a in acts]


def test_protocol_plays_through_the_rollout_loop_and_a_malformed_reply_is_an_invalid_turn(act_only, tok):
    acts = _expert_actions(TASK)
    replies = ["I think I should go somewhere.", *(f"<action>{a}</action>" for a in acts)]
    prompts: list[str] = []

    def script(prompt_ids: tuple[int, ...]) -> str:
        prompts.append(tok.decode(list(prompt_ids)))
        return replies[len(prompts) - 1]

    (traj,) = run_episodes(
        FakeEngine(tok, script),
        [SyntheticHierEnv()],
        [EpisodeRequest(TASK, 0, "g", "g/0")],
        agent=AgentFactory("act_only", "synthetic"),
        params=PARAMS,
        max_steps=10,
    )
    assert traj.won and len(traj.turns) == len(acts) + 1  # the malformed turn cost a step, not the episode
    bad, *good = traj.turns
    assert (bad.decision.valid, bad.decision.error, bad.decision.action) == (False, "missing <action>", "")
    assert bad.info["valid_action"] is False and not bad.masks["action_mask"].any()
    for turn, act in zip(good, acts, strict=True):
        assert turn.decision.valid and turn.decision.action == act and turn.info["valid_action"]
        # the action mask covers exactly the block: its tokens decode to it, dropping either end loses it
        ids = turn.response_ids[turn.masks["action_mask"]].tolist()
        block = f"<action>{act}</action>"
        assert (
            block in tok.decode(ids)
            and block not in tok.decode(ids[1:])
            and block not in tok.decode(ids[:-1])
        )
    # the prompt shows the window of recent steps: the second one shows the malformed step's empty action
    assert "Action 1: '']" in prompts[1] and "You are now at step 2" in prompts[1]
    # the format term charges the invalid turn only: -0.01 R
    apply_shaping(traj, ShapingConfig(terms=("format",)))
    assert [t.shaped["format"] for t in traj.turns] == [-0.01] + [0.0] * len(acts)


def test_protocol_expert_demonstrations_win(act_only, tok):
    demos = collect_demonstrations("synthetic", "act_only", [TASK], tokenizer=tok, max_steps=10)
    (demo,) = demos
    assert demo.won and [t.response_text for t in demo.turns] == [
        f"<action>{a}</action>" for a in _expert_actions(TASK)
    ]


def test_protocol_runs_from_the_cli(act_only, capsys):
    assert act_only.check_commands(capsys) == 3


def test_registrations_do_not_leak():
    # the last test of the file: every registration and example module above is gone
    assert "reinforce_pp" not in ALGOS and "keyroom" not in envs.env_names() and "act_only" not in AGENTS
    assert "reinforce_pp_novelty" not in ALGOS and "novelty" not in STAGE_KINDS
    examples = {
        "learners.algos.reinforce_pp",
        "launch.driver.novelty",
        "envs.keyroom",
        "actors.agents.act_only",
    }
    assert not examples & set(sys.modules)
