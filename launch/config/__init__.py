"""Run configuration: frozen dataclasses hold the one set of defaults; YAML presets and ``key=value`` overrides
only override them.

* ``schema``: the dataclasses (``TrainConfig`` and its sections);
* ``derived``: the values derived from them and the device (π_old's source, the decoupled-PPO cap);
* ``resolve``: defaults → preset (its ``base`` first) → command line, type-checked; the algorithm's ``algo.*`` keys
  against its own ``Config``; the saved form of a run's config;
* ``validate``: names, ranges and combinations, before Ray starts (one line, exit 2);
* ``run_dir``: the run folder against the config (continue, resume, ``bc.from_run``), before Ray starts;
* ``help``: every key with its default and doc.

The algorithm's own hyperparameters live in its file (``learners/algos/<name>.py``, a frozen ``Config`` that checks
its own values); ``algo`` names it and ``algo_overrides`` holds the ``algo.*`` keys (flat, dotted).
"""

from launch.config.derived import behaviour_is_cap, engine_old_logprobs, overlapping_loop
from launch.config.help import attribute_docs, config_help, config_keys
from launch.config.resolve import (
    apply_overrides,
    dump_yaml,
    flatten,
    load_preset,
    parse_cli_overrides,
    preset_chain,
    preset_layers,
    read_run_config,
    resolve_algo_config,
    resolve_config,
    resolved_text,
    to_dict,
)
from launch.config.run_dir import BC_KEYS, bc_eval_reusable, check_bc_source, check_run_dir
from launch.config.schema import (
    DEFAULT_PRESET,
    DTYPES,
    ENGINES,
    PRESET_DIR,
    WEIGHT_SYNCS,
    BCConfig,
    ConfigError,
    EnvConfig,
    LearnerConfig,
    LogConfig,
    ModelConfig,
    RolloutConfig,
    TrainConfig,
    one_line,
)
from launch.config.validate import validate

__all__ = [
    "BC_KEYS",
    "DEFAULT_PRESET",
    "DTYPES",
    "ENGINES",
    "PRESET_DIR",
    "WEIGHT_SYNCS",
    "BCConfig",
    "ConfigError",
    "EnvConfig",
    "LearnerConfig",
    "LogConfig",
    "ModelConfig",
    "RolloutConfig",
    "TrainConfig",
    "apply_overrides",
    "attribute_docs",
    "bc_eval_reusable",
    "behaviour_is_cap",
    "check_bc_source",
    "check_run_dir",
    "config_help",
    "config_keys",
    "dump_yaml",
    "engine_old_logprobs",
    "flatten",
    "load_preset",
    "one_line",
    "overlapping_loop",
    "parse_cli_overrides",
    "preset_chain",
    "preset_layers",
    "read_run_config",
    "resolve_algo_config",
    "resolve_config",
    "resolved_text",
    "to_dict",
    "validate",
]
