"""Every shipped preset on an in-process env (synthetic, TextCraft) can write its own demonstrations: each expert
response fits the preset's ``rollout.max_new_tokens`` (``actors.demos.check_demos_fit``, which refuses a run whose
responses would be cut before their closing tag, leaving tasks no policy can win)."""

from __future__ import annotations

import pytest

from actors.demos import check_demos_fit
from launch.config import PRESET_DIR, resolve_config
from launch.driver.wiring import demonstrations_on
from launch.evaluation.tasks import env_task_ids

IN_PROCESS = ("synthetic", "textcraft")
PRESETS = [p.stem for p in sorted(PRESET_DIR.glob("*.yaml")) if resolve_config(p.stem).env.name in IN_PROCESS]


@pytest.mark.parametrize("preset", PRESETS)
def test_a_presets_demonstrations_fit_its_response_budget(preset, tok):
    cfg = resolve_config(preset)
    ids = env_task_ids(cfg, cfg.env.train_split)[:: max(1, len(env_task_ids(cfg, cfg.env.train_split)) // 12)]
    demos = demonstrations_on(cfg, tok, ids)
    assert demos, preset
    check_demos_fit(demos, cfg.rollout.max_new_tokens, tok)
