"""BC and the offline datasets on real ALFWorld through the training driver (real Ray, HF engine, DeepSpeed, a tiny
random model): the hand-coded expert's demonstrations, cut by the ALFRED plan, in STEP-HRL's and Multi2's formats."""

from __future__ import annotations

import json

import pytest

from envs.data import shared_alfworld_tarball
from launch.config import resolve_config
from launch.driver.build import build_run
from launch.driver.train import Trainer
from tests.ray.tiny_runs import TINY

pytest.importorskip("alfworld", reason="needs `pip install 'hierarl[alfworld]'`")
pytestmark = pytest.mark.skipif(
    not shared_alfworld_tarball().is_file(), reason=f"no ALFWorld games at {shared_alfworld_tarball()}"
)

# bc.episodes=3 with seed 0 draws three valid_train pick_and_place games whose expert plays take 6, 35 and 27
# commands: within max_steps 12 one demonstration, two skipped as truncated.
ALFWORLD_TINY = [
    *[
        o
        for o in TINY
        if not o.startswith(("env.", "bc.episodes", "eval_episodes", "rollout.max_new_tokens"))
    ],
    "model.max_model_len=1024",
    "env.name=alfworld",
    "env.train_tasks=0",
    "env.max_steps=12",
    "env.train_split=valid_train",
    "env.eval_split=valid_train",
    'env.options={"task_types": ["pick_and_place"]}',
    "env.workers_per_rollout=2",
    "rollout.max_new_tokens=33",  # STEP-HRL's longest demonstration response on these games (check_demos_fit)
    "bc.episodes=3",
    "eval_episodes=1",
    "iterations=0",  # BC, its evaluation and the offline dataset
    "algo.data_ratio=1.0",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "roles", "extra"),
    [
        ("step_hrl", ("high", "low", "progress"), []),
        (
            "multi2",
            ("executor", "planner"),
            ['model.role_adapters={"planner": "planner", "executor": "executor"}'],
        ),
    ],
)
def test_bc_and_offline_data_on_alfworld(ray_local, tmp_path, capsys, algo, roles, extra):
    cfg = resolve_config(
        None, [*ALFWORLD_TINY, f"algo={algo}", f"rollout.agent={algo}", *extra, f"run_dir={tmp_path}"]
    )
    trainer = Trainer(build_run(cfg))
    try:
        history = trainer.run()
    finally:
        trainer.close()
    assert "[hierarl] demonstrations: 1 of 3 alfworld tasks; skipped 2 truncated" in capsys.readouterr().out
    bc = next(r for r in history if r.get("phase") == "bc")
    assert bc["demos"] == 1 and bc["turns"] > 0
    manifest = json.loads((tmp_path / "offline" / "manifest.json").read_text())
    assert (manifest["env"], manifest["expert"], manifest["expert_won"], manifest["collected"]) == (
        "alfworld",
        1,
        1,
        1,
    )
    assert sorted(manifest["transitions"]) == sorted(roles) and all(manifest["transitions"].values())
