"""Validation: everything checkable before Ray, a model or an env starts (names, ranges, combinations of keys,
BC feasibility, the run folder); a bad value raises a one-line ``ConfigError`` that ``hierarl train`` prints and
exits 2 with."""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from launch.config.resolve import resolve_algo_config, unknown_algo
from launch.config.schema import (
    DTYPES,
    ENGINES,
    OLD_LOGPROBS,
    RL_OPTIMIZERS,
    WEIGHT_SYNCS,
    ConfigError,
    TrainConfig,
)

GPU_SHARE = "a fraction in (0, 1] or a whole number of GPUs"


def _gpu_share(n: float) -> bool:
    """Ray gives a worker part of one GPU or whole GPUs, never 1.5."""
    return n > 0 and (n <= 1 or float(n).is_integer())


def _need(ok: bool, key: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: got {value!r}; allowed: {allowed}")


def _choice(key: str, value: Any, allowed: Any) -> None:
    allowed = list(allowed)
    if value not in allowed:
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"{key}: unknown value {value!r}{hint}; allowed: {', '.join(map(str, allowed))}")


def _options(key: str, options: dict[str, Any], allowed: Any, owner: str) -> None:
    for name in options:
        if name not in allowed:
            close = difflib.get_close_matches(str(name), list(allowed), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(
                f"{key}: {owner} has no option {name!r}{hint}; allowed: {', '.join(allowed) or '(none)'}"
            )


def _check_ranges(cfg: TrainConfig) -> None:
    m, e, r, lr, bc = cfg.model, cfg.env, cfg.rollout, cfg.learner, cfg.bc
    ge1, ge0, gt0 = "an integer >= 1", "a number >= 0", "a number > 0"
    checks: list[tuple[bool, str, Any, str]] = [
        (m.lora_rank >= 1, "model.lora_rank", m.lora_rank, ge1),
        (m.lora_alpha > 0, "model.lora_alpha", m.lora_alpha, gt0),
        (0.0 <= m.lora_dropout < 1.0, "model.lora_dropout", m.lora_dropout, "a number in [0, 1)"),
        (len(m.lora_targets) >= 1, "model.lora_targets", m.lora_targets, "one or more module names"),
        (m.max_model_len >= 1, "model.max_model_len", m.max_model_len, ge1),
        (bool(m.path), "model.path", m.path, "an HF folder, a hub name or 'smollm2'"),
        (e.max_steps >= 1, "env.max_steps", e.max_steps, ge1),
        (e.workers_per_rollout >= 1, "env.workers_per_rollout", e.workers_per_rollout, ge1),
        (e.step_timeout_s > 0, "env.step_timeout_s", e.step_timeout_s, gt0),
        (e.train_tasks >= 0, "env.train_tasks", e.train_tasks, "an integer >= 0 (0: every train task)"),
        (cfg.eval_samples >= 1, "eval_samples", cfg.eval_samples, ge1),
        (cfg.eval_train_samples >= 1, "eval_train_samples", cfg.eval_train_samples, ge1),
        (bool(e.train_split), "env.train_split", e.train_split, "a split name of the env"),
        (bool(e.eval_split), "env.eval_split", e.eval_split, "a split name of the env"),
        (bool(cfg.eval_panel), "eval_panel", cfg.eval_panel, "auto or a panel name (hierarl panel list)"),
        (cfg.cpu_threads >= 0, "cpu_threads", cfg.cpu_threads, "an integer >= 0 (0: auto)"),
        (cfg.max_staleness >= 0, "max_staleness", cfg.max_staleness, "an integer >= 0 (0: off)"),
        (
            not (cfg.max_staleness and cfg.one_step_off),
            "max_staleness",
            cfg.max_staleness,
            "0 with one_step_off=true (max_staleness=1 is its asynchronous form: choose one)",
        ),
        (r.num_workers >= 1, "rollout.num_workers", r.num_workers, ge1),
        (r.cpus_per_worker >= 0, "rollout.cpus_per_worker", r.cpus_per_worker, ge0),
        (_gpu_share(r.gpus_per_worker), "rollout.gpus_per_worker", r.gpus_per_worker, GPU_SHARE),
        (r.group_size >= 1, "rollout.group_size", r.group_size, ge1),
        (r.groups_per_iter >= 1, "rollout.groups_per_iter", r.groups_per_iter, ge1),
        (
            0 < r.gpu_memory_utilization < 1,
            "rollout.gpu_memory_utilization",
            r.gpu_memory_utilization,
            "a number in (0, 1)",
        ),
        (r.temperature > 0, "rollout.temperature", r.temperature, gt0),
        (0 < r.top_p <= 1, "rollout.top_p", r.top_p, "a number in (0, 1]"),
        (r.max_new_tokens >= 1, "rollout.max_new_tokens", r.max_new_tokens, ge1),
        (r.history_length >= 0, "rollout.history_length", r.history_length, "an integer >= 0"),
        (
            r.eval_temperature >= 0,
            "rollout.eval_temperature",
            r.eval_temperature,
            "a number >= 0 (0: greedy)",
        ),
        (r.max_group_retries >= 0, "rollout.max_group_retries", r.max_group_retries, "an integer >= 0"),
        (r.max_restarts >= 0, "rollout.max_restarts", r.max_restarts, "an integer >= 0"),
        (
            r.max_empty_iterations >= 1,
            "rollout.max_empty_iterations",
            r.max_empty_iterations,
            "an integer >= 1",
        ),
        (lr.num_workers >= 1, "learner.num_workers", lr.num_workers, ge1),
        (lr.cpus_per_worker >= 0, "learner.cpus_per_worker", lr.cpus_per_worker, ge0),
        (_gpu_share(lr.gpus_per_worker), "learner.gpus_per_worker", lr.gpus_per_worker, GPU_SHARE),
        (lr.zero_stage in (0, 1, 2, 3), "learner.zero_stage", lr.zero_stage, "0, 1, 2, 3"),
        (lr.kl_reference in ("start", "base"), "learner.kl_reference", lr.kl_reference, "start, base"),
        (lr.actor_lr > 0, "learner.actor_lr", lr.actor_lr, gt0),
        (lr.critic_lr > 0, "learner.critic_lr", lr.critic_lr, gt0),
        (lr.critic_trunk in ("own", "policy"), "learner.critic_trunk", lr.critic_trunk, "own, policy"),
        (
            lr.critic_warmup_passes >= 0,
            "learner.critic_warmup_passes",
            lr.critic_warmup_passes,
            "an integer >= 0 (0: no warm-up)",
        ),
        (
            lr.advantage_scale in (1, -1, 0),
            "learner.advantage_scale",
            lr.advantage_scale,
            "1 (as computed), -1 (negated) or 0 (none): benchmark controls",
        ),
        (lr.old_logprobs in OLD_LOGPROBS, "learner.old_logprobs", lr.old_logprobs, ", ".join(OLD_LOGPROBS)),
        (lr.measure_rows >= 0, "learner.measure_rows", lr.measure_rows, "an integer >= 0 (0: every row)"),
        (lr.rl_optimizer in RL_OPTIMIZERS, "learner.rl_optimizer", lr.rl_optimizer, ", ".join(RL_OPTIMIZERS)),
        (lr.rl_warmup_steps >= 0, "learner.rl_warmup_steps", lr.rl_warmup_steps, "an integer >= 0 (0: none)"),
        (
            lr.behaviour_is_cap is None or lr.behaviour_is_cap == 0 or lr.behaviour_is_cap >= 1,
            "learner.behaviour_is_cap",
            lr.behaviour_is_cap,
            "null (2 where the loop lags), 0 (off) or a number >= 1 (below 1 would down-weight on-policy tokens)",
        ),
        (lr.micro_batch_size >= 1, "learner.micro_batch_size", lr.micro_batch_size, ge1),
        (lr.pack_tokens >= 1, "learner.pack_tokens", lr.pack_tokens, ge1),
        (lr.mini_batch_size >= 1, "learner.mini_batch_size", lr.mini_batch_size, ge1),
        (
            lr.micro_batch_size <= lr.mini_batch_size,
            "learner.micro_batch_size",
            lr.micro_batch_size,
            f"an integer <= learner.mini_batch_size ({lr.mini_batch_size})",
        ),
        (lr.ppo_epochs >= 1, "learner.ppo_epochs", lr.ppo_epochs, ge1),
        (lr.max_grad_norm > 0, "learner.max_grad_norm", lr.max_grad_norm, gt0),
        (lr.max_restarts >= 0, "learner.max_restarts", lr.max_restarts, "an integer >= 0"),
        (lr.max_seq_len >= 1, "learner.max_seq_len", lr.max_seq_len, ge1),
        (bc.episodes >= 1, "bc.episodes", bc.episodes, ge1),
        (bc.epochs >= 0, "bc.epochs", bc.epochs, "an integer >= 0"),
        (bc.mini_batch_size >= 1, "bc.mini_batch_size", bc.mini_batch_size, ge1),
        (bc.lr > 0, "bc.lr", bc.lr, gt0),
        (
            all(0 < e < bc.epochs for e in bc.eval_epochs),
            "bc.eval_epochs",
            list(bc.eval_epochs),
            f"epochs in [1, bc.epochs - 1] ([1, {bc.epochs - 1}]; the last is always evaluated)",
        ),
        (cfg.iterations >= 0, "iterations", cfg.iterations, "an integer >= 0"),
        (cfg.eval_every >= 0, "eval_every", cfg.eval_every, "an integer >= 0 (0: never)"),
        (cfg.eval_episodes >= 0, "eval_episodes", cfg.eval_episodes, "an integer >= 0 (0: the whole panel)"),
        (cfg.checkpoint_every >= 0, "checkpoint_every", cfg.checkpoint_every, "an integer >= 0 (0: never)"),
        (
            cfg.checkpoint_keep_last >= 0,
            "checkpoint_keep_last",
            cfg.checkpoint_keep_last,
            "an integer >= 0 (0: all)",
        ),
        (cfg.keep_episodes >= 0, "keep_episodes", cfg.keep_episodes, "an integer >= 0 (0: none)"),
        (bool(cfg.run_dir), "run_dir", cfg.run_dir, "a folder path"),
    ]
    for ok, key, value, allowed in checks:
        _need(ok, key, value, allowed)
    from learners.learner_spec import MINIBATCH_LAYOUTS, PACK_MODES
    from learners.losses import AGG_MODES

    _choice("bc.agg", bc.agg, AGG_MODES)
    _choice("learner.pack", lr.pack, PACK_MODES)
    _choice("learner.minibatches", lr.minibatches, MINIBATCH_LAYOUTS)
    for backend in cfg.log.backends:
        _choice("log.backends", backend, ("tensorboard", "wandb"))
    _choice("log.wandb_mode", cfg.log.wandb_mode, ("offline", "online", "disabled"))
    if "wandb" in cfg.log.backends:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ConfigError(
                "log.backends: wandb is not installed; allowed: pip install wandb, or tensorboard only"
            )
    if lr.zero_stage == 3:
        # learners.worker refuses ZeRO-3 with more than one micro-batch per step (wrong gradients): say so now
        minis = [("learner.mini_batch_size", lr.mini_batch_size)]
        minis += [("bc.mini_batch_size", bc.mini_batch_size)] if bc.enabled else []
        for key, mini in minis:
            per_worker = math.ceil(mini / lr.num_workers)
            if lr.micro_batch_size < per_worker:
                raise ConfigError(
                    f"learner.zero_stage: 3 needs learner.micro_batch_size ({lr.micro_batch_size}) >= the "
                    f"per-worker {key} ({per_worker}); allowed: zero_stage 0, 1, 2, or a larger micro batch"
                )


def _check_sampling(cfg: TrainConfig, algo: Any) -> None:
    """An algorithm whose loss reads π_old (a PPO ratio) samples at temperature 1 and top-p 1: the engines report
    the raw log-softmax of the sampled tokens (``actors.inference``), so any other value would bias every ratio.
    Evaluation (``rollout.eval_temperature``) trains nothing and is free."""
    if not algo.uses_old_logprobs:
        return
    from learners.algos.registry import ALGOS

    ratio_free = ", ".join(sorted(n for n, a in ALGOS.items() if not a.uses_old_logprobs))
    for key, value in (
        ("rollout.temperature", cfg.rollout.temperature),
        ("rollout.top_p", cfg.rollout.top_p),
    ):
        if value != 1:
            raise ConfigError(
                f"{key}: got {value!r}, but algo={cfg.algo}'s PPO ratio reads the engine's log-probs, which are "
                "taken before temperature and top-p, so every ratio would be biased; allowed: 1 (evaluation has "
                f"rollout.eval_temperature), or an algorithm without a ratio ({ratio_free})"
            )


def _check_algo(cfg: TrainConfig) -> Any:
    """The ``algo.*`` keys against the algorithm's Config (which checks its own ranges and choices), then what the
    algorithm's record needs of the rest of the run (its agent protocols, the learner's ZeRO stage, groups of the
    size it needs). Its driver stage's own rules are the stage kind's (``launch.driver.stage_kinds.check_run``)."""
    from learners.algos.registry import get_algo

    algo = get_algo(cfg.algo)
    # the Config checks its own fields as it is built (``learners.algo_config``): a bad value fails here
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    _check_sampling(cfg, algo)
    if algo.agents and cfg.rollout.agent not in algo.agents:
        raise ConfigError(
            f"rollout.agent: {cfg.rollout.agent!r} is not a protocol algo={cfg.algo} is defined with (an "
            f"ablation on another agent: a baseline algorithm with algo.reward_terms); allowed: "
            f"{', '.join(algo.agents)}"
        )
    # an algorithm without a critic ignores where a critic would read (a preset's choice survives algo=grpo)
    for refused, why in (
        (bool(cfg.model.role_adapters), "model.role_adapters gives the policy several trunks"),
        (cfg.learner.zero_stage == 3, "learner.zero_stage 3 partitions the trunk per engine"),
    ):
        if refused and algo.value_heads and cfg.learner.critic_trunk == "policy":
            raise ConfigError(f"learner.critic_trunk: 'policy' refused, {why}; allowed: own")
    if algo.target_critic and cfg.learner.zero_stage == 3:
        raise ConfigError(
            f"learner.zero_stage: algo={cfg.algo} keeps a target copy of the critic, which ZeRO-3 would partition; "
            "allowed: 0, 1, 2"
        )
    if cfg.learner.zero_stage == 3 and algo.reference_adapters(
        algo_cfg, cfg.learner.kl_reference, cfg.model.adapter_names
    ):
        raise ConfigError(
            f"learner.zero_stage: 3 partitions the frozen copy of the policy that algo={cfg.algo}'s KL term reads; "
            "allowed: zero_stage 0, 1, 2, or learner.kl_reference=base"
        )
    need = algo.min_group_size
    if cfg.rollout.group_size < need:
        raise ConfigError(
            f"rollout.group_size: {cfg.algo} needs groups of >= {need} trajectories (a group of "
            f"{cfg.rollout.group_size} has no baseline: every advantage is 0); allowed: an integer >= {need}"
        )
    return algo_cfg


def _check_role_adapters(cfg: TrainConfig, roles: Sequence[str]) -> None:
    """``model.role_adapters`` names every role of the protocol and nothing else; the features that assume one
    adapter (a warm start from one adapter folder, one-step-off's behaviour adapter, ZeRO-3) are refused with it."""
    ra, lrs = cfg.model.role_adapters, cfg.learner.adapter_lr
    names = cfg.model.adapter_names
    for key in lrs:
        _choice("learner.adapter_lr", key, names or ["(no model.role_adapters)"])
        _need(lrs[key] > 0, f"learner.adapter_lr.{key}", lrs[key], "a number > 0")
    if not ra:
        return
    for role, name in ra.items():
        _choice("model.role_adapters", role, list(roles))
        _need(
            isinstance(name, str) and name.isidentifier() and name != "critic",
            f"model.role_adapters.{role}",
            name,
            "an adapter name other than 'critic' (the critic's adapter on the shared base)",
        )
    missing = [r for r in roles if r not in ra]
    if missing:
        raise ConfigError(
            f"model.role_adapters: {cfg.rollout.agent} role(s) {', '.join(missing)} have no adapter; allowed: a "
            f"mapping of every role ({', '.join(roles)}) to an adapter name"
        )
    for ok, key, value in (
        (not cfg.model.init_adapter, "model.init_adapter", cfg.model.init_adapter),
        (not cfg.bc.from_run, "bc.from_run", cfg.bc.from_run),
        (not cfg.one_step_off, "one_step_off", cfg.one_step_off),
        (not cfg.max_staleness, "max_staleness", cfg.max_staleness),
        (cfg.learner.zero_stage <= 2, "learner.zero_stage", cfg.learner.zero_stage),
    ):
        if not ok:
            raise ConfigError(
                f"{key}: {value!r} is not supported with several adapters (model.role_adapters); allowed: its "
                "default, or one adapter for every role"
            )


def _options_allowed(factory: Any) -> list[str] | None:
    """Keyword parameters of an env factory (None: it takes ``**kwargs``, anything goes)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def env_factory(name: str) -> Any:
    """The env class without building it (its module imports no benchmark package); None if it cannot load."""
    from envs.base import resolve

    try:
        return resolve(name)
    except ImportError:
        return None


def expert_envs() -> list[str]:
    from envs.base import env_names

    return [n for n in env_names() if hasattr(env_factory(n), "expert_plan")]


def validate(cfg: TrainConfig) -> Any:
    """Check a resolved config before anything heavy starts (no Ray, no model, no env built): the algorithm,
    agent protocol and env names, engines and dtypes, protocol and env options, numeric ranges, the ``algo.*``
    keys against the algorithm's Config (enumerations, ranges, reward terms, group size), and that a BC warm start
    has an expert. Raises a one-line ``ConfigError`` naming the key and what is allowed; returns the resolved
    algorithm config. Pure: reads no files beyond importing the modules that define the allowed names."""
    from actors.protocols import AGENTS
    from envs.base import env_names
    from learners.algos.registry import ALGOS

    if cfg.algo not in ALGOS:
        raise unknown_algo(cfg.algo)
    _choice("rollout.agent", cfg.rollout.agent, list(AGENTS))
    _choice("env.name", cfg.env.name, env_names())
    _choice("rollout.engine", cfg.rollout.engine, ENGINES)
    _choice("rollout.weight_sync", cfg.rollout.weight_sync, WEIGHT_SYNCS)
    if cfg.rollout.weight_sync == "merged" and cfg.model.role_adapters:
        raise ConfigError(
            "rollout.weight_sync: 'merged' serves one adapter, got model.role_adapters; allowed: lora"
        )
    _choice("model.dtype", cfg.model.dtype, DTYPES)
    _choice("learner.dtype", cfg.learner.dtype, DTYPES)
    _options(
        "rollout.agent_options",
        cfg.rollout.agent_options,
        AGENTS[cfg.rollout.agent].options,
        cfg.rollout.agent,
    )
    factory = env_factory(cfg.env.name)
    allowed_options = _options_allowed(factory) if factory is not None else None
    if allowed_options is not None:
        _options("env.options", cfg.env.options, allowed_options, cfg.env.name)
    _check_ranges(cfg)
    _check_role_adapters(cfg, AGENTS[cfg.rollout.agent].roles)
    if cfg.bc.enabled and factory is not None and not hasattr(factory, "expert_plan"):
        raise ConfigError(
            f"bc.enabled: env {cfg.env.name!r} has no expert plan to clone (actors/demos.py); allowed: "
            f"bc.enabled=false, or an env with one: {', '.join(expert_envs())}"
        )
    if cfg.bc.enabled and cfg.bc.stratify and factory is not None and not hasattr(factory, "task_stratum"):
        raise ConfigError(
            f"bc.stratify: env {cfg.env.name!r} has no kinds of task to stratify by (task_stratum, envs/base.py); "
            "allowed: bc.stratify=false"
        )
    return _check_algo(cfg)
