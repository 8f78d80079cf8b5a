"""Bad input fails at start, before Ray, with one line naming the key and the allowed values.

``launch.config.validate`` checks a resolved config (pure: no Ray, no model, no env built), and
``launch.driver.stage_kinds.check_run`` adds the rules of the algorithm's driver stage kind; ``hierarl train`` calls it
before anything heavy and turns a ``ConfigError`` into ``hierarl train: <message>`` and exit code 2. ``_error`` reads
what ``hierarl train`` refuses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch.cli.main import main
from launch.config import (
    DEFAULT_PRESET,
    PRESET_DIR,
    ConfigError,
    check_run_dir,
    resolve_config,
    resolved_text,
    validate,
)
from launch.driver.stage_kinds import check_run
from reward.shaping import HIPIF_TERMS

ROOT = Path(__file__).resolve().parents[3]


def _error(overrides: list[str], preset: str | None = DEFAULT_PRESET) -> str:
    with pytest.raises(ConfigError) as e:
        check_run(resolve_config(preset, overrides))
    message = str(e.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("preset", [None, *sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))])
def test_every_preset_and_the_defaults_validate(preset):
    algo_cfg = check_run(resolve_config(preset))
    assert hasattr(algo_cfg, "reward_terms")


@pytest.mark.parametrize(
    ("override", "key", "allowed"),
    [
        (
            "algo=nonsense",
            "algo",
            "gigpo, grpo, hiper, hipif, hipif_gigpo, hisr, multi2, ppo, rft, rloo, sft, step_hrl",
        ),
        ("rollout.agent=reactt", "rollout.agent", "react, plan_execute, hipif, step_hrl, multi2"),
        (
            "env.name=alfwrld",
            "env.name",
            "alfworld, scienceworld, synthetic, textcraft, virtualhome, webshop",
        ),
        ("rollout.engine=sglang", "rollout.engine", "auto, vllm, hf"),
        ("model.dtype=fp16", "model.dtype", "auto, float32, bfloat16"),
        ("learner.dtype=half", "learner.dtype", "auto, float32, bfloat16"),
    ],
)
def test_unknown_names(override, key, allowed):
    message = _error([override])
    assert message.startswith(f"{key}: ") and message.endswith(f"allowed: {allowed}")


def test_an_algorithm_defined_with_its_own_agent_refuses_another():
    """HIPIF is its folded-history protocol as much as its advantage (HIPIF Sec. 3.1)."""
    message = _error(["algo=hipif", "rollout.agent=plan_execute"])
    assert message.startswith("rollout.agent: 'plan_execute' is not a protocol algo=hipif")
    assert message.endswith("allowed: hipif")
    assert validate(resolve_config(None, ["algo=hipif", "rollout.agent=hipif"])).reward_terms == HIPIF_TERMS


def test_hisr_segmentation_is_checked_against_the_agent():
    """Subgoal segmentation needs a protocol that states subgoals; ReAct does not."""
    message = _error(["algo=hisr", "rollout.agent=react", "algo.segmentation=subgoal"])
    assert message.startswith("algo.segmentation: 'subgoal' needs a protocol that states subgoals")
    assert message.endswith("or segmentation entropy / turn / auto")
    message = _error(["algo=hisr", "algo.segmentation=gpt4o"])
    assert message.startswith("algo.segmentation: ") and message.endswith(
        "allowed: auto, subgoal, entropy, turn"
    )
    assert _error(["algo=hisr", "algo.collect_per_task=0"]).startswith("algo.collect_per_task: ")
    assert (
        _error(["algo=hisr", "algo.outcome_coef=-1"]) == "algo.outcome_coef: got -1.0; allowed: a number >= 0"
    )
    ok = validate(
        resolve_config(None, ["algo=hisr", "rollout.agent=plan_execute", "algo.segmentation=subgoal"])
    )
    assert ok.segmentation == "subgoal"


def test_the_kl_reference_is_checked_before_ray_and_sets_the_learners_frozen_copies():
    """``learner.kl_reference``: start (a frozen copy of each policy adapter, ``ref_<name>``) or base (none); ZeRO-3
    would partition the copy. Algorithms without a KL term keep none."""
    from learners.algos.registry import get_algo

    assert _error(["learner.kl_reference=bc"]) == "learner.kl_reference: got 'bc'; allowed: start, base"
    zero3 = ["learner.zero_stage=3", "learner.micro_batch_size=32", "learner.critic_trunk=own"]
    assert _error(["algo=ppo", *zero3]).startswith("learner.zero_stage: 3 partitions the frozen copy")
    validate(resolve_config(None, ["algo=ppo", *zero3, "learner.kl_reference=base"]))
    hisr = ["algo=hisr", "rollout.agent=react", *zero3, "learner.kl_reference=base"]
    assert _error(hisr).startswith("learner.zero_stage: algo=hisr's SPRM shares the policy's base")

    def refs(overrides: list[str]) -> tuple[str, ...]:
        cfg = resolve_config(None, overrides)
        return get_algo(cfg.algo).reference_adapters(
            validate(cfg), cfg.learner.kl_reference, cfg.model.adapter_names
        )

    assert refs(["algo=ppo"]) == ("ref_default",)
    assert refs(["algo=ppo", "learner.kl_reference=base"]) == ()
    assert refs(["algo=ppo", "algo.kl_coef=0"]) == ()
    two = ["rollout.agent=multi2", 'model.role_adapters={"planner": "planner", "executor": "executor"}']
    assert refs(["algo=multi2", *two, "algo.online_groups=2"]) == ("ref_executor", "ref_planner")
    assert refs(["algo=multi2", *two]) == ()  # no online phase: no KL term


def test_step_hrl_is_checked_before_ray(expertless_env):
    """STEP-HRL's own agent, an env with an expert for its dataset, no one-step-off, its ranges and choices."""
    sh = ["algo=step_hrl", "rollout.agent=step_hrl"]
    assert _error(["algo=step_hrl", "rollout.agent=react"]).endswith("allowed: step_hrl")
    message = _error([*sh, f"env.name={expertless_env}", "bc.enabled=false"])
    assert message.startswith("env.name: algo=step_hrl's dataset starts from expert demonstrations")
    assert _error([*sh, "one_step_off=true"]).startswith(
        "one_step_off: algo=step_hrl trains on a stored dataset"
    )
    assert _error([*sh, "algo.expectile=1.0"]) == "algo.expectile: got 1.0; allowed: a number in (0, 1)"
    assert _error([*sh, "algo.target_tau=0"]).startswith("algo.target_tau: ")
    assert _error([*sh, "algo.actor_loss=awac"]).endswith("allowed: awr, advantage")
    assert validate(resolve_config("step_hrl_synthetic_multi", [])).warmup_steps == 20


def test_multi2_is_checked_before_ray():
    """Multi2's own agent, its ranges, and its online phase's KL reference (π_off, never the base model)."""
    m2 = ["algo=multi2", "rollout.agent=multi2"]
    assert _error(["algo=multi2", "rollout.agent=step_hrl"]).endswith("allowed: multi2")
    assert _error([*m2, "algo.anchor_fraction=1.5"]) == (
        "algo.anchor_fraction: got 1.5; allowed: a number in [0, 1]"
    )
    assert _error([*m2, "algo.offline_iterations=-1"]).startswith("algo.offline_iterations: ")
    assert _error([*m2, "algo.kl_kind=k4"]).startswith("algo.kl_kind: ")
    assert _error([*m2, "algo.online_groups=2", "learner.kl_reference=base"]).startswith(
        "learner.kl_reference: algo=multi2's KL term is to π_off"
    )
    zero3 = ["learner.zero_stage=3", "learner.micro_batch_size=32", "learner.critic_trunk=own"]
    assert _error([*m2, *zero3]).startswith("learner.zero_stage: algo=multi2 keeps a target copy")
    cfg = validate(resolve_config("multi2_synthetic_multi", []))
    assert (cfg.offline_iterations, cfg.online_groups, cfg.anchor_fraction) == (2, 4, 0.25)


def test_role_adapters_name_every_role_and_refuse_single_adapter_features():
    m2 = ["rollout.agent=multi2", "rollout.weight_sync=lora"]  # the main job merges its one adapter
    both = 'model.role_adapters={"planner": "planner", "executor": "executor"}'
    assert validate(resolve_config(None, [*m2, both, 'learner.adapter_lr={"planner": 1e-5}'])) is not None
    message = _error([*m2, 'model.role_adapters={"planner": "p"}'])
    assert message == (
        "model.role_adapters: multi2 role(s) executor have no adapter; allowed: a mapping of every role (planner, "
        "executor) to an adapter name"
    )
    assert _error([*m2, 'model.role_adapters={"planner": "p", "executor": "e", "agent": "e"}']).endswith(
        "allowed: planner, executor"
    )
    for bad in ("one_step_off=true", "bc.from_run=/x", "model.init_adapter=/x", "learner.zero_stage=3"):
        key = bad.split("=")[0]
        assert _error([*m2, both, bad]).startswith(f"{key}: "), bad
    assert _error([*m2, 'model.role_adapters={"planner": "critic", "executor": "e"}']).startswith(
        "model.role_adapters.planner: got 'critic'"
    )
    assert _error(['learner.adapter_lr={"x": 1e-5}']).startswith("learner.adapter_lr: unknown value 'x'")
    assert _error([*m2, both, 'learner.adapter_lr={"planner": -1}']).startswith(
        "learner.adapter_lr.planner: "
    )


def test_unknown_reward_term():
    """Before: accepted, Ray and both workers started, failed at the first RL update."""
    message = _error(["algo.reward_terms=format,nonsense"])
    assert message.startswith("algo.reward_terms: unknown value 'nonsense'")
    assert "allowed: action_grounding, format, invalid_action, keep, keep_consistency, repeat" in message
    assert _error(["algo.reward_terms=format,format"]).startswith("algo.reward_terms: ")


def test_unknown_protocol_and_env_options():
    message = _error(['rollout.agent_options={"compactt": true}'])
    assert message == (
        "rollout.agent_options: plan_execute has no option 'compactt' (did you mean compact?); allowed: compact"
    )
    message = _error(['env.options={"depth": [1]}'])
    assert message.startswith(
        "env.options: textcraft has no option 'depth' (did you mean depths?); allowed: "
    )
    # the CPU default's {"compact": true} is accepted by every protocol
    for agent in ("react", "hipif", "step_hrl", "multi2"):
        validate(resolve_config(DEFAULT_PRESET, [f"rollout.agent={agent}"]))


def test_every_listed_protocol_option_is_an_agent_field():
    import dataclasses

    from actors.protocols import AGENTS

    for protocol, spec in AGENTS.items():
        assert spec.name == protocol and set(spec.acting_roles) <= set(spec.roles), protocol
        assert set(spec.options) <= {f.name for f in dataclasses.fields(spec.agent)}, protocol


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("rollout.group_size=0", "rollout.group_size"),
        ("rollout.groups_per_iter=0", "rollout.groups_per_iter"),
        ("iterations=-1", "iterations"),
        ("eval_episodes=-1", "eval_episodes"),
        ("eval_panel=", "eval_panel"),
        ("eval_every=-2", "eval_every"),
        ("learner.actor_lr=0", "learner.actor_lr"),
        ("learner.critic_lr=-1e-5", "learner.critic_lr"),
        ("bc.lr=0", "bc.lr"),
        ("learner.micro_batch_size=64", "learner.micro_batch_size"),
        ("rollout.temperature=0", "rollout.temperature"),
        ("rollout.eval_temperature=-0.1", "rollout.eval_temperature"),
        ("rollout.top_p=1.5", "rollout.top_p"),
        ("rollout.gpu_memory_utilization=1", "rollout.gpu_memory_utilization"),
        ("rollout.gpu_memory_utilization=0", "rollout.gpu_memory_utilization"),
        ("env.max_steps=0", "env.max_steps"),
        ("env.workers_per_rollout=0", "env.workers_per_rollout"),
        ("rollout.max_new_tokens=0", "rollout.max_new_tokens"),
        ("rollout.num_workers=0", "rollout.num_workers"),
        ("learner.zero_stage=4", "learner.zero_stage"),
        ("learner.behaviour_is_cap=0.5", "learner.behaviour_is_cap"),
        ("cpu_threads=-1", "cpu_threads"),
        ("learner.ppo_epochs=0", "learner.ppo_epochs"),
        ("model.lora_rank=0", "model.lora_rank"),
        ("model.lora_dropout=1.0", "model.lora_dropout"),
        ("bc.episodes=0", "bc.episodes"),
        ("bc.eval_epochs=[4]", "bc.eval_epochs"),  # the 4th of 4 passes is evaluated anyway
        ("bc.eval_epochs=[0]", "bc.eval_epochs"),
        ("learner.rl_optimizer=reset", "learner.rl_optimizer"),
        ("learner.rl_warmup_steps=-1", "learner.rl_warmup_steps"),
        ("learner.advantage_scale=0.5", "learner.advantage_scale"),
        ("learner.old_logprobs=vllm", "learner.old_logprobs"),
        ("learner.measure_rows=-1", "learner.measure_rows"),
        ("learner.pack_tokens=0", "learner.pack_tokens"),
        ("env.train_tasks=-1", "env.train_tasks"),
        ("eval_samples=0", "eval_samples"),
        ("eval_train_samples=0", "eval_train_samples"),
    ],
)
def test_numeric_ranges(override, key):
    message = _error([override])
    assert message.startswith(f"{key}: got ") and "; allowed: " in message


def test_the_learners_packing_and_minibatch_layout_are_checked_before_ray():
    assert _error(["learner.pack=flat"]) == "learner.pack: unknown value 'flat'; allowed: tree, padded"
    assert _error(["learner.pack=tre"]).startswith("learner.pack: unknown value 'tre' (did you mean tree?)")
    message = _error(["learner.minibatches=episodes"])
    assert message == "learner.minibatches: unknown value 'episodes'; allowed: groups, rows"
    validate(resolve_config(DEFAULT_PRESET, ["learner.pack=padded", "learner.minibatches=rows"]))


def test_greedy_evaluation_is_allowed():
    validate(resolve_config(DEFAULT_PRESET, ["rollout.eval_temperature=0"]))


def test_zero3_with_gradient_accumulation_fails_at_start():
    """learners.worker refuses it at the first update; now it fails before Ray."""
    message = _error(["learner.zero_stage=3"], preset="hiper_alfworld")
    assert message.startswith("learner.zero_stage: 3 needs learner.micro_batch_size (8) >= the per-worker")
    zero3 = ["learner.zero_stage=3", "learner.micro_batch_size=64", "learner.kl_reference=base"]
    validate(resolve_config("hiper_alfworld", zero3))


@pytest.mark.parametrize(
    ("overrides", "start"),
    [
        (["algo.lam_low=2"], "algo.lam_low: got 2.0; allowed: a number in [0, 1]"),
        (["algo.shaping.format_penalty=-0.1"], "algo.shaping.format_penalty: got -0.1; allowed: a cost >= 0"),
        (
            ["algo.shaping.repeat_threshold=0"],
            "algo.shaping.repeat_threshold: got 0; allowed: an integer >= 1",
        ),
        (
            ["algo.shaping.grounding_alpha=1.5"],
            "algo.shaping.grounding_alpha: got 1.5; allowed: a number in [0, 1]",
        ),
        (["algo.kl_kind=k9"], "algo.kl_kind: unknown value 'k9'; allowed: k1, k2, k3, low_var_kl"),
        (["algo.agg=sum"], "algo.agg: unknown value 'sum'"),
        (["algo.adv_norm=pooled"], "algo.adv_norm: unknown value 'pooled'; allowed: per_type, joint"),
        (
            ["algo.truncation=terminated"],
            "algo.truncation: unknown value 'terminated' (did you mean terminal?); allowed: bootstrap, terminal",
        ),
        (
            ["algo=grpo", "rollout.group_size=4", "algo.truncation=terminal"],
            "unknown config key 'algo.truncation'",
        ),
        (["algo=gigpo", "algo.mode=median", "rollout.group_size=4"], "algo.mode: unknown value 'median'"),
        (["algo=ppo", "algo.lam_low=0.9"], "unknown config key 'algo.lam_low'"),
        (["algo.c_kep=0.1"], "unknown config key 'algo.c_kep' (did you mean algo.shaping.c_keep?)"),
        (["algo.c_keep=0.1"], "unknown config key 'algo.c_keep' (did you mean algo.shaping.c_keep?)"),
        (
            ["algo.shaping.c_kep=0.1"],
            "unknown config key 'algo.shaping.c_kep' (did you mean algo.shaping.c_keep?)",
        ),
        (["algo.shaping=0.1"], "algo.shaping: expected a mapping of its fields, got 0.1"),
        (["algo.gamma=high"], "algo.gamma: expected a number"),
    ],
)
def test_algo_overrides_are_checked_against_the_algorithm(overrides, start):
    assert _error(overrides).startswith(start)


@pytest.mark.parametrize("algo", ["grpo", "rloo", "gigpo"])
def test_group_relative_algorithms_need_groups(algo):
    message = _error([f"algo={algo}", "rollout.group_size=1"])
    assert message.startswith(f"rollout.group_size: {algo} needs groups of >= 2 trajectories")
    assert message.endswith("allowed: an integer >= 2")


@pytest.fixture
def expertless_env(monkeypatch):
    """A registered env without ``expert_plan`` (every benchmark has one now): ``counter``, tests/fake_envs.py."""
    import envs.base

    monkeypatch.setitem(envs.base._REGISTRY, "counter", ("tests.fake_envs:CounterEnv", "(test fake)"))
    return "counter"


def test_bc_stratify_needs_an_env_with_kinds_of_task():
    """``bc.stratify`` draws across ``task_stratum``'s kinds: TextCraft has them; the synthetic env does not."""
    assert _error(["env.name=synthetic", "bc.stratify=true"]) == (
        "bc.stratify: env 'synthetic' has no kinds of task to stratify by (task_stratum, envs/base.py); allowed: "
        "bc.stratify=false"
    )
    validate(resolve_config(DEFAULT_PRESET, ["bc.stratify=true"]))


def test_bc_needs_an_env_with_an_expert(expertless_env):
    """Before: BC on ALFWorld crashed in actors/demos.py after Ray had started: its ALFRED high-level plan (now
    ``pddl_plan``) has no text actions to clone. (ScienceWorld crashed the same way until it got ``expert_plan``;
    ALFWorld has one: the hand-coded expert's commands cut by that plan.)"""
    message = _error([f"env.name={expertless_env}"])
    assert message == (
        "bc.enabled: env 'counter' has no expert plan to clone (actors/demos.py); allowed: "
        "bc.enabled=false, or an env with one: alfworld, scienceworld, synthetic, textcraft, virtualhome, webshop"
    )
    validate(resolve_config(DEFAULT_PRESET, [f"env.name={expertless_env}", "bc.enabled=false"]))
    # the main job's draw across TextCraft's kinds of goal does not carry over to another env
    validate(resolve_config(DEFAULT_PRESET, ["env.name=alfworld", "bc.stratify=false"]))
    validate(resolve_config(DEFAULT_PRESET, ["env.name=scienceworld", "bc.stratify=false"]))


def test_an_existing_run_is_continued_never_overwritten(tmp_path, capsys):
    """Before: ``hierarl train`` into a folder that held a run deleted its metrics.jsonl and started over."""
    run = tmp_path / "run"
    run.mkdir()
    check_run_dir(resolve_config(None, [f"run_dir={run}"]))  # an empty folder is fine
    (run / "metrics.jsonl").write_text('{"iteration": 0}\n')
    capsys.readouterr()
    assert main(["train", f"run_dir={run}"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"hierarl train: run_dir: {run} already holds a run (metrics.jsonl); allowed: resume=true to continue it, "
        "another run_dir, or remove the folder\n"
    )
    assert (run / "metrics.jsonl").read_text() == '{"iteration": 0}\n'
    check_run_dir(resolve_config(None, [f"run_dir={run}", "resume=true"]))
    assert main(["train", "--dry-run", f"run_dir={run}"]) == 0  # a dry run writes nothing


def test_a_resume_keeps_the_settings_its_checkpoints_hold(tmp_path, capsys):
    """Before: resuming an fp32 run with learner.dtype=bfloat16 died in DeepSpeed's checkpoint loader
    (``KeyError: 'dynamic_loss_scale'``) after Ray, the engines and the learner had started."""
    run = tmp_path / "run"
    run.mkdir()
    saved = resolve_config(DEFAULT_PRESET, [f"run_dir={run}"])  # what `hierarl train` below resolves
    (run / "config.yaml").write_text(resolved_text(saved, validate(saved)))
    (run / "metrics.jsonl").write_text('{"iteration": 0}\n')
    check_run_dir(
        resolve_config(DEFAULT_PRESET, [f"run_dir={run}", "resume=true", "iterations=9"])
    )  # more iterations: fine
    capsys.readouterr()
    assert main(["train", f"run_dir={run}", "resume=true", "learner.dtype=bfloat16"]) == 2
    assert capsys.readouterr().err == (
        f"hierarl train: resume: {run} was run with learner.dtype='auto', this run has 'bfloat16'; "
        "allowed: the saved run's value (its checkpoints hold that setting)\n"
    )
    with pytest.raises(ConfigError, match=r"model\.lora_rank=16, this run has 8"):
        check_run_dir(resolve_config(DEFAULT_PRESET, [f"run_dir={run}", "resume=true", "model.lora_rank=8"]))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["rollout.weight_sync=merge"], "rollout.weight_sync: unknown value 'merge' (did you mean merged?)"),
        (
            ["rollout.weight_sync=merged", 'model.role_adapters={"planner": "p", "executor": "e"}'],
            "'merged' serves one adapter, got model.role_adapters",
        ),
    ],
)
def test_merged_weight_sync_needs_one_adapter(overrides, needle):
    assert needle in _error(overrides)
    for engine in ("vllm", "hf", "auto"):
        validate(resolve_config(DEFAULT_PRESET, ["rollout.weight_sync=merged", f"rollout.engine={engine}"]))


def test_asynchronous_rollouts_are_checked_before_ray():
    """``max_staleness``: an integer >= 0, not beside one_step_off (its synchronous-barrier form), not for an
    algorithm that trains on a stored dataset, not with several adapters."""
    assert _error(["max_staleness=-1"]) == "max_staleness: got -1; allowed: an integer >= 0 (0: off)"
    assert _error(["max_staleness=1", "one_step_off=true"]).startswith(
        "max_staleness: got 1; allowed: 0 with one_"
    )
    step_hrl = ["algo=step_hrl", "rollout.agent=step_hrl", "max_staleness=1"]
    assert _error(step_hrl).startswith("max_staleness: algo=step_hrl trains on a stored dataset")
    adapters = [
        "rollout.agent=multi2",
        'model.role_adapters={"planner": "p", "executor": "e"}',
        "rollout.weight_sync=lora",
        "max_staleness=2",
    ]
    assert _error(adapters).startswith("max_staleness: 2 is not supported with several adapters")
    validate(resolve_config(DEFAULT_PRESET, ["max_staleness=2"]))


@pytest.mark.parametrize("key", ["rollout.gpus_per_worker", "learner.gpus_per_worker"])
def test_a_gpu_share_is_a_fraction_of_one_gpu_or_whole_gpus(key):
    """Ray places a worker on part of one GPU or on whole GPUs; 1.5 GPUs or none would fail or hang at placement."""
    for bad in ("0", "1.5", "-1"):
        assert _error([f"{key}={bad}"]).startswith(f"{key}: got ")
    for good in ("0.25", "1", "2"):
        validate(resolve_config(None, [f"{key}={good}"]))


def test_bc_agg_is_checked_shared_and_reaches_the_bc_loss():
    """``bc.agg`` (STEP-HRL Eq. 9-10's per-response sum, or the authors' per-response mean) is one of the loss's
    aggregations, shapes BC (``bc.from_run`` needs it equal) and is what the BC phase trains with.
    Catches: the BC loss built without it (the default token-mean would stand in silently)."""
    from launch.config import BC_KEYS
    from launch.driver.warm_start import bc_loss_config

    cfg = resolve_config(DEFAULT_PRESET, ["bc.agg=seq-mean-token-sum"])
    validate(cfg)
    assert bc_loss_config(cfg.bc).agg == "seq-mean-token-sum"
    assert bc_loss_config(resolve_config(DEFAULT_PRESET).bc).agg == "token-mean"
    assert "bc.agg" in BC_KEYS
    assert _error(["bc.agg=seq-sum"]).startswith("bc.agg: unknown value 'seq-sum'")


def test_hisr_value_clip_is_a_number_or_null():
    """HISR's default is no value clip (null); a number clips; a negative one fails in one line."""
    validate(resolve_config("hisr_synthetic_multi", ["algo.value_clip=null"]))
    validate(resolve_config("hisr_synthetic_multi", ["algo.value_clip=0.2"]))
    assert _error(["algo.value_clip=-1"], "hisr_synthetic_multi") == (
        "algo.value_clip: got -1.0; allowed: a number >= 0 (null: no clipping)"
    )


RATIO_ALGOS = ["gigpo", "grpo", "hiper", "hipif", "hipif_gigpo", "hisr", "ppo", "rloo"]


def test_the_ratio_algorithms_are_the_ones_that_read_old_logprobs():
    from learners.algos.registry import ALGOS

    assert sorted(n for n, a in ALGOS.items() if a.uses_old_logprobs) == RATIO_ALGOS


@pytest.mark.parametrize(
    ("overrides", "key", "value"),
    [
        (["algo=grpo", "rollout.temperature=0.7"], "rollout.temperature", "0.7"),
        (["algo=ppo", "rollout.top_p=0.9"], "rollout.top_p", "0.9"),
        (["rollout.temperature=1.3"], "rollout.temperature", "1.3"),  # hiper, the default preset's
    ],
)
def test_a_ppo_ratio_needs_temperature_and_top_p_1(overrides, key, value, capsys):
    """The engines report log-probs before temperature and top-p (``actors.inference``) and the learner computes
    them at T = 1: with a PPO ratio every ratio would be biased, so ``hierarl train`` refuses before Ray (exit 2)."""
    message = _error(overrides)
    assert message.startswith(f"{key}: got {value}, but algo=") and "allowed: 1 " in message
    assert "multi2, rft, sft, step_hrl" in message
    capsys.readouterr()
    assert main(["train", "--dry-run", *overrides]) == 2
    err = capsys.readouterr().err
    assert err == f"hierarl train: {message}\n"


def test_sampling_temperature_is_free_without_a_ratio_and_in_evaluation():
    """T = 1 passes; evaluation's temperature is not sampling for training; offline AWR (STEP-HRL, Multi2, whose
    presets collect at 0.7) and behaviour cloning read no π_old."""
    at_1 = ["rollout.temperature=1.0", "rollout.top_p=1", "rollout.eval_temperature=0.7"]
    validate(resolve_config(DEFAULT_PRESET, at_1))
    assert resolve_config("step_hrl_scienceworld").rollout.temperature == 0.7
    validate(resolve_config("step_hrl_scienceworld"))
    validate(resolve_config("multi2_scienceworld", ["rollout.top_p=0.9"]))
    validate(resolve_config(DEFAULT_PRESET, ["algo=sft", "rollout.temperature=0.7"]))


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (
            [
                "rollout.agent=multi2",
                "rollout.weight_sync=lora",
                'model.role_adapters={"planner": "planner", "executor": "executor"}',
            ],
            "model.role_adapters gives the policy several trunks",
        ),
        (
            ["learner.zero_stage=3", "learner.micro_batch_size=32"],
            "learner.zero_stage 3 partitions the trunk",
        ),
    ],
)
def test_a_critic_on_the_policys_trunk_needs_a_critic_and_one_trunk(overrides, needle):
    message = _error(["learner.critic_trunk=policy", *overrides])
    assert message.startswith("learner.critic_trunk: 'policy' refused") and needle in message
    assert "learner.critic_trunk: got 'shared'" in _error(["learner.critic_trunk=shared"])
    validate(resolve_config(DEFAULT_PRESET, ["learner.critic_trunk=policy"]))
    # an algorithm without a critic ignores it: the main job's preset sets it, and algo=rft / grpo still run there
    validate(resolve_config(DEFAULT_PRESET, ["learner.critic_trunk=policy", "algo=grpo"]))
