"""What a learner worker is built from (``learners.worker.LearnerWorker``): records the driver fills from the run
config, importable without torch or DeepSpeed."""

from __future__ import annotations

from dataclasses import dataclass

from common.lora import LoraSpec

CRITIC_ADAPTER = "critic"
"""The critic's LoRA adapter on the policy's base (a policy adapter may not take this name)."""
PACK_MODES: tuple[str, ...] = ("tree", "padded")
"""``learner.pack``: prefix-tree packs (``learners.packing``) or padded rows."""
MINIBATCH_LAYOUTS: tuple[str, ...] = ("groups", "rows")
"""``learner.minibatches``: whole episode groups per optimizer step, or rows one by one (``learners.schedule``)."""
PADDED_ROWS: dict[str, str | int] = {"pack": "padded", "pack_tokens": 0, "minibatches": "rows"}
"""The ``LearnerSpec`` fields of a learner as it was before packing (padded rows, rows shuffled one by one): the
benchmarks that measure that learner and the tests that compare against it."""


@dataclass(frozen=True)
class CriticSpec:
    """A value model beside the critic: LoRA adapter ``name`` on the policy's base, a head of ``heads`` outputs
    (``mlp_hidden`` > 0: W₂·SiLU(W₁h) with W₁ of that width, HISR Eq. 2), its own AdamW at ``lr``."""

    name: str
    heads: int
    mlp_hidden: int
    lr: float


@dataclass(frozen=True)
class LearnerSpec:
    """What one learner worker needs. Built from a run config (``launch.config.LearnerConfig``) by the driver: the
    fields the run config holds have no default here; only the worker-specific ones do."""

    model_path: str
    lora: LoraSpec
    dtype: str
    zero_stage: int
    actor_lr: float
    critic_lr: float
    max_grad_norm: float
    micro_batch_size: int
    """Rows per forward/backward with ``pack`` "padded" (memory bound); gradients accumulate over a whole mini-batch
    before a step."""
    gradient_checkpointing: bool
    """Recompute each decoder layer's activations in backward instead of keeping them (training passes only)."""
    seed: int
    critic_trunk: str
    """Where the critic's head reads its hidden states: "own" (its LoRA adapter on the shared base, its own decoder
    passes) or "policy" (the first policy adapter's, detached: one decoder pass gives log-probs and values,
    ``learners.value_model.TrunkValueHead``)."""
    pack: str
    """"tree": every decoder pass runs on the prefix tree of its rows (``learners.packing``); "padded": on
    padded rows. The run config's ``learner.pack``."""
    pack_tokens: int
    """With ``pack`` "tree": tree tokens per forward/backward (the memory bound in place of ``micro_batch_size``)."""
    minibatches: str
    """"groups": whole episode groups per optimizer step (``learners.schedule.group_minibatch_rows``); "rows": rows
    shuffled one by one. The run config's ``learner.minibatches``."""
    device: str = "cpu"
    value_heads: int = 0
    """0: no critic; 1: V(s); 2: HiPER [V_high, V_low]."""
    value_head_hidden: int = 0
    """0: a linear value head; > 0: W₂·SiLU(W₁h) with W₁ of this width (HISR Eq. 2's SPRM head)."""
    adapters: tuple[tuple[str, float], ...] = ()
    """Policy LoRA adapters on the one base, (name, learning rate) each, every one with its own DeepSpeed engine and
    AdamW state (Multi2's planner and executor); empty: one adapter ``default`` at ``actor_lr``."""
    frozen_adapters: tuple[str, ...] = ()
    """LoRA adapters on the same base that are never trained (no engine, no optimizer): the KL terms' reference
    policies. Written by ``load_adapter_weights`` (a copy of a policy adapter), kept in checkpoints."""
    extra_critics: tuple[CriticSpec, ...] = ()
    """Value models beside the critic, on the same base (zero_stage 0-2; HISR's SPRM); checkpointed with it."""
    target_critic: bool = False
    """Keep a soft-updated copy of the critic's trainable tensors (IQL's target networks, STEP-HRL Eq. 11-12);
    value slots with ``value_from_target`` read it."""
    master_port: int = 0
    """torch.distributed rendezvous port; 0: ``LearnerGroup`` picks a free one."""
    torch_threads: int = 0
    """Torch threads of the worker process (``cpu_threads``, resolved by the driver); 0: as the process started."""
    critic_reach: bool = True
    """The critic's passes stop one past the last position its value slots read (``learners.batch.value_reach``),
    exact for a causal model; False computes whole rows (as before the cut: the iteration bench's baseline)."""
