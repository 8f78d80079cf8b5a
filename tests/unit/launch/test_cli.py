"""The ``hierarl`` command: one line and exit 2 for bad input, help for every command, the dry run (its resolved
config, no distributed stack imported, no Ray session in a fresh process), and the defaults the workers and
``hierarl rollout`` take from the run config rather than restating."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import RunStopped
from launch.cli.main import COMMANDS, main
from launch.config import DEFAULT_PRESET, ConfigError, behaviour_is_cap, resolve_config
from learners.algos.registry import ALGOS

ROOT = Path(__file__).resolve().parents[3]


# --- the command ---------------------------------------------------------------------------------------------


def test_train_reports_one_line_and_exit_code_2(capsys):
    assert main(["train", "algo.reward_terms=format,nonsense"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "hierarl train: algo.reward_terms: unknown value 'nonsense'"
    )
    assert main(["train", "--verbose"]) == 2
    assert capsys.readouterr().err.startswith("hierarl train: unknown option '--verbose'; allowed: --dry-run")


def test_train_help_is_not_a_preset_name(capsys):
    """Before: `hierarl train --help` was read as a preset named '--help'."""
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: hierarl train [PRESET] [key=value ...]")
    for key in ("rollout.group_size", "learner.micro_batch_size", "bc.enabled", "env.options", "seed"):
        assert f"\n  {key} " in out, key
    assert "Trajectories per task and initial state" in out  # a field docstring's first line
    assert "lam_low" in out and "\n    shaping.process_penalty " in out  # algo keys and shaping constants
    assert "algo.shaping.<name>" in out and "\n    shaping.format_penalty " in out
    assert main(["train", "-h", "hiper_alfworld"]) == 0


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help(command, flag, capsys):
    """`hierarl <command> --help` prints help and exits 0 (argparse's SystemExit(0) or a return of 0); before,
    `hierarl sweep --help` exited 2 and `hierarl download-alfworld --help` tried to download into './--help'."""
    try:
        rc = main([command, flag])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr().out
    assert rc == 0 and f"hierarl {command}" in out and len(out.strip()) > 40


def test_train_help_lists_every_algorithm(capsys):
    assert main(["train", "--help"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  algo "))
    assert all(name in line for name in ALGOS), line


def test_dry_run_prints_the_resolved_config(capsys):
    assert main(["train", "--dry-run", "hiper_webshop", "algo.shaping.c_keep=0.2"]) == 0
    out = capsys.readouterr().out
    assert "[hierarl] preset hiper_webshop (" in out and "base hiper_alfworld" in out
    assert (
        "name: webshop" in out
        and "resolved_algo:\n" in out
        and "\n  shaping:\n    format_penalty: 0.01\n" in out
    )
    assert (
        "\n    c_keep: 0.2\n" in out and "\n  env.success_reward: 1.0\n" in out
    )  # WebShop's reward is in [0, 1]
    assert main(["train", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "preset hiper_textcraft_cpu (" in out and "the default, no preset named" in out
    assert "\n    format_penalty: 0.01\n" in out
    # null: what this machine derives for the default (auto engine and dtypes: 0 on a CPU without bf16)
    derived = behaviour_is_cap(resolve_config(DEFAULT_PRESET, []))
    old = "engine" if derived == 0 else "recompute"  # π_old from the engine where engine and learner agree
    assert out.endswith(
        f"derived:\n  env.success_reward: 1.0\n  learner.behaviour_is_cap: {derived!r}\n"
        f"  learner.old_logprobs: {old}\n"
    )
    fp32_hf = ["rollout.engine=hf", "model.dtype=float32", "learner.dtype=float32"]
    assert main(["train", "--dry-run", *fp32_hf]) == 0
    out = capsys.readouterr().out  # null, sync, fp32 HF
    assert out.endswith("\n  learner.behaviour_is_cap: 0.0\n  learner.old_logprobs: engine\n")
    assert main(["train", "--dry-run", *fp32_hf, "max_staleness=2"]) == 0
    out = capsys.readouterr().out  # a lagging loop: the engine's adapter is older than the learner's
    assert out.endswith("\n  learner.behaviour_is_cap: 2.0\n  learner.old_logprobs: recompute\n")


def _env_without_ray() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_a_bad_algorithm_fails_in_a_fresh_process_before_ray(tmp_path):
    """Exit 2 with one line, and no Ray session: the child (and anything it starts) keeps Ray's files in its own
    temp dir (``RAY_TMPDIR``), so a session it started would show up there, and Ray run by other processes on the
    machine cannot fail this test."""
    out = subprocess.run(
        [sys.executable, "-m", "launch.cli.main", "train", "algo=nonsense"],
        cwd=ROOT,
        env={**_env_without_ray(), "RAY_TMPDIR": str(tmp_path), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "hierarl train: algo: unknown algorithm 'nonsense'; allowed: gigpo, grpo, hiper, hipif, hipif_gigpo, hisr, multi2, ppo, rft, rloo, sft, step_hrl"
    ]
    assert not (tmp_path / "ray").exists(), "the child started a Ray session"


def test_dry_run_imports_no_distributed_stack():
    code = (
        "import sys; from launch.cli.main import main; rc = main(['train', '--dry-run', 'algo=ppo']); "
        "print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'deepspeed', 'vllm'})); "
        "sys.exit(rc)"
    )
    out = _child([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout and "algo: ppo" in out.stdout


def test_the_installed_hierarl_command_runs_the_cli():
    """The README's commands call the console script ``install.sh`` installs: its entry point must be this
    ``main`` (a moved module left it pointing nowhere once) and the script must run the main job's dry run."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="hierarl")
    assert script.load() is main
    out = _child([str(Path(sys.executable).with_name("hierarl")), "train", "--dry-run"])
    assert out.returncode == 0, out.stderr
    assert f"[hierarl] preset {DEFAULT_PRESET} (" in out.stdout


def _child(cmd: list[str]) -> subprocess.CompletedProcess:
    """``cmd`` in a fresh process at the repository root, without the test's Ray address."""
    return subprocess.run(cmd, cwd=ROOT, env=_env_without_ray(), capture_output=True, text=True, timeout=120)


# --- one source of defaults for the workers and `hierarl rollout` ----------------------------------


def test_worker_configs_restate_no_run_config_default():
    """WorkerConfig and LearnerSpec are built from the run config; only worker-specific fields have defaults."""
    import dataclasses

    from actors.rollout import WorkerConfig
    from learners.learner_spec import LearnerSpec

    def defaulted(cls):
        return {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        }

    assert defaulted(WorkerConfig) == {"device", "torch_threads", "adapter_path", "adapters"}
    assert (
        defaulted(LearnerSpec)
        == {
            "device",
            "value_heads",
            "value_head_hidden",
            "adapters",
            "extra_critics",
            "frozen_adapters",
            "target_critic",
            "master_port",
            "torch_threads",
            "critic_reach",  # no run config key: only the iteration bench turns it off, to time the passes before it
        }
    )


def test_rollout_command_defaults_are_the_run_configs():
    import dataclasses

    from launch.cli.rollout import rollout_parser, rollout_run_config
    from launch.config import TrainConfig

    cfg = rollout_run_config(rollout_parser().parse_args([]))
    default = TrainConfig()
    assert cfg == dataclasses.replace(default, bc=dataclasses.replace(default.bc, enabled=False))
    other = rollout_run_config(rollout_parser().parse_args(["--env", "synthetic", "--agent-options", "{}"]))
    assert (other.env.name, other.env.options, other.rollout.agent_options) == ("synthetic", {}, {})
    with pytest.raises(SystemExit) as e:  # argparse: usage + one error line, exit 2
        rollout_run_config(rollout_parser().parse_args(["--protocol", "nope"]))
    assert e.value.code == 2
    with pytest.raises(ConfigError, match=r"env\.name: unknown value 'alfwrld'"):
        rollout_run_config(rollout_parser().parse_args(["--env", "alfwrld"]))


def test_rollout_command_summarises_with_a_runs_episode_keys(tmp_path):
    """``hierarl rollout``'s summary is the run's episode summary (``trajectory_stats``' keys, as in metrics rows),
    its figures those of the JSONL it wrote: 3 episodes of the tiny model, HF engine, TextCraft depth 1."""
    from actors.trajectory import read_jsonl
    from launch.cli.rollout import rollout_main
    from launch.evaluation.episode_stats import trajectory_stats

    out = tmp_path / "r.jsonl"
    args = ["--model", "tiny", "--engine", "hf", "--dtype", "float32", "--episodes", "3", "--max-steps", "2"]
    summary = rollout_main([*args, "--max-new-tokens", "8", "--num-envs", "1", "--out", str(out)])
    trajs = list(read_jsonl(out))
    assert json.loads(out.with_suffix(".summary.json").read_text())["episodes"] == len(trajs) == 3
    assert set(trajectory_stats(trajs)) < set(summary)
    assert summary["success"] == sum(t.won for t in trajs) / 3
    assert summary["turns"] == sum(len(t.turns) for t in trajs) and summary["env_steps"] <= 2


def test_a_run_stopped_by_design_is_one_line_and_exit_1(tmp_path, monkeypatch, capsys):
    """A ``RunStopped`` from the run (restarts used up, a stage with no usable data) reaches the user as one line,
    exit 1, naming the run folder, not as a traceback; any other error is a bug and still propagates whole."""
    import launch.driver.train as driver

    def stop(cfg):
        raise RunStopped(
            "HISR: none of the 4 trajectories collected with π_ref kept the format;\nwarm-start better"
        )

    monkeypatch.setattr(driver, "train", stop)
    run_dir = tmp_path / "run"
    assert main(["train", f"run_dir={run_dir}"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "hierarl train: stopped: HISR: none of the 4 trajectories collected with π_ref kept the format; "
        f"warm-start better (what it wrote so far: {run_dir})\n"
    )

    def bug(cfg):
        raise KeyError("a bug")

    monkeypatch.setattr(driver, "train", bug)
    with pytest.raises(KeyError):
        main(["train", f"run_dir={tmp_path / 'other'}"])
