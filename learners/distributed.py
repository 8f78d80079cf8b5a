"""DeepSpeed plumbing of a learner worker: the process group, an engine's config, and trainable-only engine
checkpoints."""

from __future__ import annotations

import datetime
import os
import socket
from pathlib import Path
from typing import Any

import torch

from learners.learner_spec import LearnerSpec

_STORE: list[Any] = []
"""(TCPStore, its listening socket) of this process: alive as long as the process group."""


def init_dist(rank: int, world_size: int, port: int, device: str) -> None:
    import deepspeed
    import torch.distributed as dist

    if dist.is_initialized():
        return
    # Explicit, not setdefault: Ray workers inherit the driver's environment, and an inherited MASTER_PORT would
    # make every learner group rendezvous on one port.
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = (
        "0" if not device.startswith("cuda") else str(rank % max(1, torch.cuda.device_count()))
    )
    os.environ["WORLD_SIZE"] = str(world_size)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    # The group is one node (MASTER_ADDR is loopback): keep its sockets there. torch's TCPStore server listens on
    # every interface, so rank 0 hands it a socket bound to 127.0.0.1 (tests/ray/test_local_cluster.py). gloo's
    # pairs bind the address the hostname resolves to unless an interface is named; here the hostname resolves to
    # 127.0.0.1 so the test cannot tell, but on a host whose name resolves to a public address it would.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    listener = None
    if rank == 0:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
    store = dist.TCPStore(
        "127.0.0.1",
        port,
        world_size,
        is_master=rank == 0,
        timeout=datetime.timedelta(minutes=10),
        master_listen_fd=None if listener is None else listener.fileno(),
        wait_for_workers=False,
    )
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    _STORE.append((store, listener))  # the store serves the group for the process's lifetime
    deepspeed.init_distributed(dist_backend=backend)  # adopts the process group above


def ds_config(spec: LearnerSpec, world_size: int, bf16: bool) -> dict[str, Any]:
    # The caller owns the accumulation boundary: any number of micro-batch backward() calls, then one step() per
    # mini-batch (DeepSpeed's unmanaged gradient accumulation), so micro_batch_size only bounds memory.
    return {
        "train_micro_batch_size_per_gpu": spec.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": spec.micro_batch_size * world_size,
        "managed_gradient_accumulation": False,
        "gradient_clipping": spec.max_grad_norm,
        "zero_optimization": {"stage": spec.zero_stage},
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def drop_tied_frozen_weights(engine: Any) -> None:
    """DeepSpeed's ``exclude_frozen_parameters`` walks ``named_parameters()``, which skips tied duplicates, so a
    frozen ``lm_head`` tied to the embeddings (SmolLM2, the tiny model) stayed in every checkpoint (measured:
    25 MB of a 25 MB tiny-model checkpoint). Wrap the engine's ``module_state_dict`` to drop every frozen name."""
    original = engine.module_state_dict

    def module_state_dict(*args: Any, **kwargs: Any) -> dict[str, Any]:
        sd = original(*args, **kwargs)
        if kwargs.get("exclude_frozen_parameters"):
            for name, p in engine.module.named_parameters(remove_duplicate=False):
                if not p.requires_grad:
                    sd.pop(name, None)
        return sd

    engine.module_state_dict = module_state_dict


def load_engine(engine: Any, folder: Path) -> None:
    """Load a trainable-only engine checkpoint; every trainable tensor must be in it (the frozen ones are not)."""
    from deepspeed.checkpoint.constants import MODEL_FILE_PREFIX

    engine.load_checkpoint(str(folder), tag="ckpt", load_module_strict=False)
    files = sorted((folder / "ckpt").glob(f"{MODEL_FILE_PREFIX}*"))
    saved = torch.load(files[0], map_location="cpu", weights_only=False)["module"] if files else {}
    missing = [n for n, p in engine.module.named_parameters() if p.requires_grad and n not in saved]
    if missing:
        raise ValueError(f"checkpoint {folder} lacks {len(missing)} trainable tensors (e.g. {missing[0]})")
