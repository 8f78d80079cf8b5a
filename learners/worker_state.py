"""A learner rank's state beside its forward passes and updates: the adapters' weights (pushed to the rollout
engines, copied into reference adapters), checkpoints of every engine, and the optimizer's learning rate through BC,
RL's fresh start and its warm-up. ``learners.worker.LearnerWorker`` adds the passes and updates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from common.rng import process_rngs, restore_process_rngs
from learners.distributed import load_engine
from learners.learner_spec import CRITIC_ADAPTER
from learners.schedule import warmup_lr
from learners.value_model import adapter_of
from learners.worker_models import LearnerModels


class LearnerState(LearnerModels):
    """Weights, checkpoints and learning rates of one rank's adapters and critics."""

    # -- weights and checkpoints -----------------------------------------------------------------------------

    def adapter_weights(self, adapter: str | None = None) -> dict[str, np.ndarray]:
        """Policy adapter ``adapter``'s LoRA tensors (None: the first) under PEFT's saved key names (what vLLM and
        peft load)."""
        from peft import get_peft_model_state_dict

        module = self.policy.module
        name = adapter or self.adapter_names[0]
        self._engine(name)
        params = [p for p in module.parameters() if p.requires_grad]
        if self.spec.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(params):
                state = get_peft_model_state_dict(module, adapter_name=name)
        else:
            state = get_peft_model_state_dict(module, adapter_name=name)
        return {k: v.detach().float().cpu().numpy().copy() for k, v in state.items()}

    def save_checkpoint(self, path: str) -> None:
        """The trainable state only: every adapter's and critic's engine without the frozen base weights (LoRA
        tensors, value heads and optimizer state, DeepSpeed format; the base is ``spec.model_path``), the PEFT
        adapters (rank 0), and RNG. ~1 % of a full engine checkpoint for a LoRA run."""
        root = Path(path)
        for name, (engine, folder) in self._all_engines().items():
            with self._own_tensors(name):
                engine.save_checkpoint(str(root / folder), tag="ckpt", exclude_frozen_parameters=True)
        if self.rank == 0:
            self.policy.module.save_pretrained(
                str(root / "adapter"), selected_adapters=[*self.adapter_names, *self.frozen]
            )
        torch.save(
            {
                "rng": process_rngs(),
                "step_count": self.step_count,
                "critic_target": self.critic_target,
                "warmup": self.warmup,
            },
            root / f"learner_rank{self.rank}.pt",
        )

    def load_checkpoint(self, path: str, *, only: Sequence[str] | None = None) -> None:
        """Restore ``save_checkpoint``'s state. ``only``: the engines of those adapters and critics, and RNG; the
        rest stays as it is (``bc.from_run``: the policy adapters, as BC never trains a critic and another
        algorithm's may have other heads; the frozen reference copies are the driver's to copy. HISR's cached
        stages: the reward models)."""
        from peft.utils import load_peft_weights

        root = Path(path)
        engines = self._all_engines()
        unknown = sorted(set(only or ()) - set(engines))
        if unknown:
            raise ValueError(
                f"no adapter or critic {unknown[0]!r} to load; this learner has {', '.join(engines)}"
            )
        # not strict: the frozen base weights are not in the checkpoint (they come from spec.model_path)
        for name in engines if only is None else only:
            engine, folder = engines[name]
            with self._own_tensors(name):
                load_engine(engine, root / folder)
            # the optimizer state carries the saving run's learning rate; the run's config decides it (a resume
            # under the same config is unchanged; an update replay with another lr gets that lr)
            for group in engine.optimizer.param_groups:
                group["lr"] = self.lrs[name]
        for name in self.frozen if only is None else []:
            folder = root / "adapter" / name
            if not folder.is_dir():
                raise ValueError(
                    f"checkpoint {path} has no frozen reference adapter {name!r} (written before the run kept one); "
                    "allowed: resume it with learner.kl_reference=base, as it ran"
                )
            weights = load_peft_weights(str(folder), device="cpu")
            self.load_adapter_weights({k: v.float().numpy() for k, v in weights.items()}, adapter=name)
        state = torch.load(root / f"learner_rank{self.rank}.pt", weights_only=False)
        restore_process_rngs(state["rng"])
        self.step_count = state["step_count"]
        loaded = state.get("warmup", {})  # a checkpoint from before the warm-up existed: none in progress
        names = set(self.adapter_names if only is None else only)
        self.warmup = {n: w for n, w in self.warmup.items() if n not in names}
        self.warmup.update({n: tuple(w) for n, w in loaded.items() if n in names})
        if self.critic_target is not None and (only is None or CRITIC_ADAPTER in only):  # part of the critic
            saved = state.get("critic_target")
            if saved is None:
                raise ValueError(f"checkpoint {path} has no target critic to restore")
            self.critic_target = [t.to(p.device) for t, p in zip(saved, self._critic_params(), strict=True)]

    def load_adapter_weights(self, weights: dict[str, np.ndarray], adapter: str | None = None) -> None:
        """Set adapter ``adapter``'s LoRA tensors (None: the first policy adapter; a frozen one allowed; PEFT key
        names, as ``adapter_weights`` returns them): a warm start, or a copy of the policy as the KL reference."""
        from peft import set_peft_model_state_dict

        if self.spec.zero_stage == 3:
            raise ValueError(
                "model.init_adapter needs learner.zero_stage 0-2 (ZeRO-3 partitions the adapter)"
            )
        name = self._policy_or_frozen(adapter)
        result = set_peft_model_state_dict(
            self.policy.module,
            {k: torch.from_numpy(np.array(v)) for k, v in weights.items()},
            adapter_name=name,
        )
        missing = [k for k in result.missing_keys if adapter_of(k) == name]
        if missing or result.unexpected_keys:
            raise ValueError(
                f"adapter does not fit the policy: {len(missing)} missing, "
                f"{len(result.unexpected_keys)} unexpected LoRA tensors (e.g. {(missing + result.unexpected_keys)[0]})"
            )

    def set_lr(self, lr: float, adapter: str | None = None) -> None:
        """Behaviour cloning runs at its own learning rate through the same optimizer."""
        for group in self._engine(adapter).optimizer.param_groups:
            group["lr"] = lr

    def start_rl(self, adapter: str | None = None, *, fresh: bool = True, warmup_steps: int = 0) -> None:
        """RL begins for policy adapter ``adapter`` (None: the first): ``fresh`` forgets its AdamW moments, and its
        learning rate warms up over its next ``warmup_steps`` steps (``learners.schedule.warmup_lr``). After
        behaviour cloning, BC's moments would otherwise make most of every RL step (BC's squared gradients in the
        denominator, its direction in the numerator); verl, OpenRLHF and TRL give RL a fresh optimizer too."""
        name = adapter or self.adapter_names[0]
        if fresh:
            inner = self._engine(name).optimizer
            while not hasattr(inner, "state") and hasattr(inner, "optimizer"):  # DeepSpeed's wrappers
                inner = inner.optimizer
            inner.state.clear()  # torch's AdamW starts a parameter's moments and step count anew when absent
        self.warmup[name] = (0, warmup_steps)

    def _warm_up_lr(self, name: str) -> float:
        """Set and return the learning rate of adapter ``name``'s next step: ``warmup_lr`` while it warms up after
        ``start_rl``, else whatever its param groups hold (the run's, or BC's ``set_lr``)."""
        groups = self._engine(name).optimizer.param_groups
        if name in self.warmup:
            done, total = self.warmup[name]
            for group in groups:
                group["lr"] = warmup_lr(self.lrs[name], done, total)
            self.warmup[name] = (done + 1, total)
            if done + 1 >= total:
                del self.warmup[name]
        return float(groups[0]["lr"])
