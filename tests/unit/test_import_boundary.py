"""The pure modules (math, losses, shaping, parsers, prompts, records) must not import ray, vllm or deepspeed —
directly or through a package ``__init__`` — so they stay testable and usable anywhere."""

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("ray", "vllm", "deepspeed")


def _pure_modules() -> list[str]:
    mods = [
        "actors.trajectory",
        "learners.advantages",
        "learners.losses",
        "learners.hindsight",
        "learners.batch",
        "learners.packing",
        "learners.schedule",
        "learners.targets",
        "learners.algorithm",
        "learners.prepare",
        "learners.diagnostics",
        "learners.outcomes",
        "launch.config",
        "launch.evaluation.panels",
        "launch.evaluation.tasks",
        "launch.evaluation.scoring",
        "launch.evaluation.baselines",
        "launch.evaluation.intervals",
        "launch.evaluation.report",
        "launch.evaluation.episode_stats",
        "launch.evaluation.metrics",
        "launch.driver.weights",
        "launch.driver.update_plan",
        "launch.view.run_data",
        "launch.view.page",
        "envs.alfworld_plan",
    ]
    for pkg in ("reward", "actors.agents", "learners.algos"):
        path = ROOT / pkg.replace(".", "/")
        mods.append(pkg)
        mods += [f"{pkg}.{m.name}" for m in pkgutil.iter_modules([str(path)])]
    return [m for m in mods if importlib.util.find_spec(m) is not None]


@pytest.mark.parametrize("module", _pure_modules())
def test_pure_module_imports_no_distributed_stack(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"bad = sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN!r})); print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} pulls in {out.stdout.strip()}"


def test_the_check_can_fail():
    """A module that imports a forbidden package is caught (guards against a vacuous test)."""
    code = "import sys, json; import ray; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("ray not installed")
    assert out.stdout.strip() == "True"
