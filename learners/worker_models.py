"""The models and DeepSpeed engines one learner rank holds, and the switches between them.

One rank holds
* the **policy**: the base model with a LoRA adapter (peft), in a DeepSpeed engine (ZeRO stage configurable; gloo on
  CPU, NCCL on GPU). The **reference policy** of a KL term is a frozen LoRA copy on the same base
  (``frozen_adapters``: no engine, no optimizer; the driver copies the policy into it as RL begins), or the same model
  with every adapter disabled — either way no second copy of the base weights;
* optionally the **critic**: its own LoRA adapter (``critic``) on the policy's frozen base (one copy of the base
  weights for policy, reference and critic: 14 GB less at every phase's peak, measured at a Llama-3-8B shape
  in bf16 on an H100, docs/results/gpu_learner_engine.md) and a value head with ``value_heads`` outputs (1 for
  PPO's V(s); 2 for HiPER's [V_high, V_low]), in its own DeepSpeed engine. Under ZeRO-3, which partitions the
  base per engine, the critic keeps a base of its own;
* optionally more value models the same way (``extra_critics``, each its adapter, head and engine on the shared
  base: HISR's segment reward model), and more trained adapters (``adapters``: Multi2's planner and executor,
  HISR's hindsight model).

What the learner group calls on them (forward passes, updates, checkpoints) is ``learners.worker.LearnerWorker``;
the value model and adapter switching are ``learners.value_model``; the process group, engine config and engine
checkpoints ``learners.distributed``; the spec ``learners.learner_spec``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from common.dtypes import pick_dtype
from learners.distributed import drop_tied_frozen_weights, ds_config, init_dist
from learners.learner_spec import CRITIC_ADAPTER, PACK_MODES, CriticSpec, LearnerSpec
from learners.packing import PackedRows
from learners.value_model import (
    TrunkValueHead,
    ValueModel,
    adapter_of,
    decoder_hidden,
    polyak_update_,
    tree_mask_kind,
    using_adapter,
)


class LearnerModels:
    """The adapters, critics and engines of one rank; ``LearnerWorker`` adds what the learner group calls."""

    def __init__(self, spec: LearnerSpec, *, rank: int = 0, world_size: int = 1) -> None:
        import deepspeed
        from peft import LoraConfig, get_peft_model

        self.spec, self.rank, self.world_size = spec, rank, world_size
        if spec.torch_threads:
            torch.set_num_threads(spec.torch_threads)
        torch.manual_seed(spec.seed + rank)
        init_dist(rank, world_size, spec.master_port, spec.device)
        dtype = pick_dtype(spec.dtype, spec.device)
        bf16 = dtype == torch.bfloat16
        lora_cfg = LoraConfig(
            r=spec.lora.rank,
            lora_alpha=spec.lora.alpha,
            target_modules=list(spec.lora.target_modules),
            lora_dropout=spec.lora.dropout,
        )
        base = self._base_model()
        self.tree_mask = ""
        """How the decoder takes a pack's tree mask (``learners.value_model.tree_mask_kind``); "": padded rows."""
        if spec.pack == "tree":
            self.tree_mask, why = tree_mask_kind(base.config)
            if not self.tree_mask and rank == 0:
                print(f"[hierarl] learner.pack=tree: {why}; the learner runs padded rows", flush=True)
        elif spec.pack not in PACK_MODES:
            raise ValueError(f"pack must be one of {', '.join(PACK_MODES)}, not {spec.pack!r}")
        adapters = spec.adapters or (("default", spec.actor_lr),)
        if len(adapters) > 1 and spec.zero_stage == 3:
            raise ValueError("several policy adapters need learner.zero_stage 0-2")
        self.adapter_names = [name for name, _ in adapters]
        self.frozen = list(spec.frozen_adapters)
        critics = [CriticSpec(CRITIC_ADAPTER, spec.value_heads, spec.value_head_hidden, spec.critic_lr)]
        critics = critics[: bool(spec.value_heads)] + list(spec.extra_critics)
        names = [*self.adapter_names, *self.frozen]
        every = [*names, *(c.name for c in critics)]
        if CRITIC_ADAPTER in names or len(set(every)) < len(every):
            raise ValueError(
                f"adapter and critic names must differ and no adapter may be {CRITIC_ADAPTER!r} (the critic's): "
                f"{every}"
            )
        if spec.extra_critics and spec.zero_stage == 3:
            raise ValueError("value models beside the critic (extra_critics) need learner.zero_stage 0-2")
        policy = get_peft_model(base, lora_cfg, adapter_name=self.adapter_names[0])
        for name in names[1:]:
            policy.add_adapter(name, lora_cfg)
        self.trunk_critic = spec.critic_trunk == "policy" and bool(spec.value_heads)
        """The critic is a head on the first policy adapter's hidden states (``TrunkValueHead``), no adapter."""
        if spec.critic_trunk not in ("own", "policy"):
            raise ValueError(f"critic_trunk must be 'own' or 'policy', not {spec.critic_trunk!r}")
        # the critics' adapters on the same base (ZeRO-3 partitions a module per engine: there the critic has its own)
        self.shared_base = bool(critics) and spec.zero_stage < 3
        if self.shared_base:
            for c in critics:
                if not self._on_trunk(c.name):
                    policy.add_adapter(c.name, lora_cfg)
        # every adapter but the frozen ones stays trainable (peft freezes all but the active one); the active one is
        # chosen per call (``_active``), so only its tensors get gradients, and each engine's optimizer holds its own
        for n, p in policy.named_parameters():
            p.requires_grad_(self._trainable(n))
        self.lrs = {**dict(adapters), **{c.name: c.lr for c in critics}}
        self.engines: dict[str, Any] = {}
        for name, lr in adapters:
            params = [p for n, p in policy.named_parameters() if adapter_of(n) == name]
            opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
            engine, _, _, _ = deepspeed.initialize(
                model=policy, optimizer=opt, config=ds_config(spec, world_size, bf16)
            )
            drop_tied_frozen_weights(engine)
            self.engines[name] = engine
        self.policy = self.engines[self.adapter_names[0]]
        self.critics: dict[str, Any] = {}
        self._critic_modules: dict[str, nn.Module] = {}
        for c in critics:
            cmodel: nn.Module
            if self._on_trunk(c.name):
                cmodel = TrunkValueHead(base.config.hidden_size, c.heads, c.mlp_hidden)
            else:
                cmodel = ValueModel(
                    policy if self.shared_base else get_peft_model(self._base_model(), lora_cfg),
                    base.config.hidden_size,
                    c.heads,
                    c.mlp_hidden,
                )
            self._critic_modules[c.name] = cmodel
            copt = torch.optim.AdamW(self._critic_params(c.name), lr=c.lr, weight_decay=0.0)
            engine, _, _, _ = deepspeed.initialize(
                model=cmodel, optimizer=copt, config=ds_config(spec, world_size, bf16)
            )
            drop_tied_frozen_weights(engine)
            self.critics[c.name] = engine
        self.critic = self.critics.get(CRITIC_ADAPTER)
        """The critic's engine (None: no critic); the other value models are in ``critics``."""
        self.critic_target: list[torch.Tensor] | None = None
        if spec.target_critic:
            if self.critic is None or spec.zero_stage == 3:
                raise ValueError(
                    "a target critic needs a critic (value_heads > 0) and learner.zero_stage 0-2"
                )
            self.critic_target = [p.detach().clone() for p in self._critic_params()]
        self.step_count = 0
        self.warmup: dict[str, tuple[int, int]] = {}
        """Policy adapter → (steps taken, steps) of its learning-rate warm-up after ``start_rl``."""

    def _base_model(self) -> nn.Module:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.spec.model_path, dtype=torch.float32)
        if self.spec.gradient_checkpointing:
            # non-reentrant: the recomputed layers see the LoRA tensors' requires_grad, the frozen inputs need none
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model

    # -- adapters and critics ---------------------------------------------------------------------------------

    def _trainable(self, param_name: str) -> bool:
        """Whether a parameter belongs to a trained adapter (a policy adapter or the critic's), not the base or a
        frozen copy."""
        return adapter_of(param_name) not in (None, *self.frozen)

    def _policy_or_frozen(self, adapter: str | None) -> str:
        """``adapter`` (None: the first policy adapter), checked to be a policy adapter or a frozen one."""
        name = adapter or self.adapter_names[0]
        if name not in self.frozen:
            self._engine(name)
        return name

    def _engine(self, adapter: str | None) -> Any:
        name = adapter or self.adapter_names[0]
        if name not in self.engines:
            raise ValueError(f"no policy adapter {name!r}; this learner has {', '.join(self.adapter_names)}")
        return self.engines[name]

    @contextmanager
    def _active(self, adapter: str | None) -> Iterator[None]:
        """Forward passes inside use adapter ``adapter`` (None: the first policy adapter; a frozen one allowed)."""
        with using_adapter(self.policy.module, self._policy_or_frozen(adapter)):
            yield

    def _on_trunk(self, name: str) -> bool:
        """Whether critic ``name`` is a head on the policy's trunk (the critic only, ``critic_trunk=policy``)."""
        return self.trunk_critic and name == CRITIC_ADAPTER

    def _critic_active(self, name: str) -> AbstractContextManager[None]:
        """Passes of critic ``name`` inside use its adapter on the shared base (the first policy adapter for a critic
        on the policy's trunk). Backward passes too: with gradient checkpointing they recompute the forward, which
        must see the same adapter."""
        if self._on_trunk(name):
            return using_adapter(self.policy.module, self.adapter_names[0])
        return using_adapter(self.policy.module, name if self.shared_base else None)

    def _decoder_hidden(
        self, ids: torch.Tensor, attn: torch.Tensor, packed: PackedRows | None = None
    ) -> torch.Tensor:
        """float[B, L, D]: the last hidden states of the base model under the active adapter (no LM head), of the
        rows or, with ``packed``, computed on their prefix tree (``learners.value_model.decoder_hidden``)."""
        decoder = self.policy.module.get_base_model().get_decoder()
        return decoder_hidden(decoder, ids, attn, packed, self.tree_mask)

    def _critic_forward(
        self, name: str, engine: Any, ids: torch.Tensor, attn: torch.Tensor, packed: PackedRows | None = None
    ) -> torch.Tensor:
        """float[B, L, H]: critic ``name``'s values over a micro-batch, inside ``_critic_active``. A head on the
        policy's trunk reads the policy's hidden states, computed without a graph (the head alone trains)."""
        if not self._on_trunk(name):
            return engine(ids, attn, packed, self.tree_mask)
        with torch.no_grad():
            hidden = self._decoder_hidden(ids, attn, packed)
        return engine(hidden)

    def _critic(self, name: str | None) -> tuple[str, Any]:
        """(name, engine) of critic ``name`` (None: the critic)."""
        name = name or CRITIC_ADAPTER
        if name not in self.critics:
            have = ", ".join(self.critics) or "none (value_heads=0)"
            raise RuntimeError(f"this learner has no critic {name!r}; it has {have}")
        return name, self.critics[name]

    @contextmanager
    def _reference(self) -> Iterator[None]:
        """The base model (every adapter disabled). peft re-enables adapters through ``set_adapter``, which freezes
        all but the active one: every trained adapter is made trainable again afterwards (each engine's optimizer and
        checkpoint expect its adapter's tensors to require gradients)."""
        with self.policy.module.disable_adapter():
            yield
        for n, p in self.policy.module.named_parameters():
            p.requires_grad_(self._trainable(n))

    def _dev(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Ray hands numpy arrays over read-only (zero-copy from the object store), which torch may not alias: those
        are copied (a batch's ids and masks, well under a MB)."""
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            x = x.copy()
        return torch.as_tensor(x).to(self.policy.device)

    def _critic_params(self, name: str = CRITIC_ADAPTER) -> list[torch.Tensor]:
        """Critic ``name``'s trainable tensors (its LoRA and head, not the other adapters on a shared base), in a
        fixed order."""
        own = (None, name) if self.shared_base else (None, "default")
        return [
            p
            for n, p in self._critic_modules[name].named_parameters()
            if p.requires_grad and adapter_of(n) in own
        ]

    @contextmanager
    def _target_weights(self) -> Iterator[None]:
        """The critic computes with the target copy's tensors inside the block (swapped in and back; no copy)."""
        assert self.critic_target is not None
        params = self._critic_params()
        own = [p.data for p in params]
        for p, t in zip(params, self.critic_target, strict=True):
            p.data = t
        try:
            yield
        finally:
            for p, o in zip(params, own, strict=True):
                p.data = o

    def soft_update_target(self, tau: float) -> None:
        """The target critic one Polyak step towards the critic (``polyak_update_``)."""
        assert self.critic_target is not None
        polyak_update_(self.critic_target, self._critic_params(), tau)

    def _all_engines(self) -> dict[str, tuple[Any, str]]:
        """Every trained adapter's and critic's engine with its checkpoint folder: ``policy_ds`` for the adapter
        ``default``, ``policy_ds_<name>`` for the others; ``critic_ds`` for the critic, ``critic_ds_<name>`` for
        the other value models."""
        out = {n: (e, "policy_ds" if n == "default" else f"policy_ds_{n}") for n, e in self.engines.items()}
        for n, e in self.critics.items():
            out[n] = (e, "critic_ds" if n == CRITIC_ADAPTER else f"critic_ds_{n}")
        return out

    @contextmanager
    def _own_tensors(self, name: str) -> Iterator[None]:
        """Inside, only adapter ``name``'s tensors (and the value head's, outside the peft model) require
        gradients: every engine wraps the one module that holds all adapters, so its trainable-only checkpoint
        would otherwise store every adapter's weights again (measured on Multi2's four: 119 MB per engine instead
        of 59)."""
        others = [
            p
            for n, p in self.policy.module.named_parameters()
            if self._trainable(n) and adapter_of(n) != name
        ]
        for p in others:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p in others:
                p.requires_grad_(True)
