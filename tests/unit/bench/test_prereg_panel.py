"""The pre-registered held-out panel of the RL-vs-imitation study is exactly what its rule selects, so it was
fixed by the rule (bench/prereg_panel.py), not by any run's results; and a remake keeps its tasks."""

import sys
from pathlib import Path

import envs
from launch.evaluation import panels as P

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import prereg_panel


def test_the_stored_panel_is_its_rule():
    env = envs.make("textcraft", **prereg_panel.OPTIONS)
    stored = P.load_panel(prereg_panel.NAME)
    assert [t.task_id for t in stored.tasks] == prereg_panel.selected(env)
    assert stored == prereg_panel.make(env)
    kinds = [env.task_stratum(t.task_id) for t in stored.tasks]
    assert (kinds.count("several ingredients"), kinds.count("one ingredient")) == (6, 26)
    # none of the 8 tasks the main job trained RL on before, none of the test split
    earlier = P.derive("textcraft", prereg_panel.OPTIONS, "train", env=env).tasks[:8]
    assert not {t.task_id for t in earlier} & {t.task_id for t in stored.tasks}
    assert stored.split == "train" and len(stored.tasks) == 32
    # remade from the installed data, a listed panel keeps its tasks (not the whole split)
    assert P.remake(stored, env) == stored
