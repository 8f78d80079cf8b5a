"""The process RNGs a checkpoint keeps: one format for the driver's and each learner rank's state."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def process_rngs() -> dict[str, Any]:
    """Python's, numpy's and torch's (CPU) generator states, for ``restore_process_rngs``."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_process_rngs(state: dict[str, Any]) -> None:
    """Set the three generators to what ``process_rngs`` returned: what follows draws what it would have drawn."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
