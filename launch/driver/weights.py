"""The rollout side's adapter versions, owned in one place: the push counter and the last two pushes' tensors.

``RolloutPool`` (``launch/driver/rollout_pool.py``) holds one ``AdapterSync`` and does the transport (``ray.put``, loading
into every worker, a replacement's adapter); everything else reads versions and adapters here and changes them only
through the named operations below, so a resume numbers its pushes exactly as the uninterrupted run did. Pure: no
Ray, vLLM or DeepSpeed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Weights = dict[str | None, Any]
"""Adapter tensors (or their object refs) by adapter name; None: the one adapter every role uses."""


class AdapterSync:
    """The push counter and history of one run's rollout workers.

    ``version`` is the number of the newest push (0: none yet), the version every turn played with it records; the
    last two pushes are kept because a one-step-off checkpoint saves the older one (``behaviour``)."""

    def __init__(self) -> None:
        self._version = 0
        self._pushed: list[Weights] = []  # oldest first, at most two

    @property
    def version(self) -> int:
        return self._version

    @property
    def history(self) -> tuple[Weights, ...]:
        """The pushes kept, oldest first (none, one or two)."""
        return tuple(self._pushed)

    def push(self, weights: Weights) -> int:
        """Record a new push of ``weights``; returns its version."""
        self._version += 1
        self._pushed = [*self._pushed[-1:], weights]
        return self._version

    def current(self) -> Weights:
        """The newest push's weights: what the workers serve, and what a replaced worker gets."""
        if not self._pushed:
            raise LookupError("no adapter pushed yet")
        return self._pushed[-1]

    def behaviour(self) -> Weights | None:
        """The push before the newest (None with fewer than two): under one-step-off the next iteration's rollouts,
        in flight while the newest was pushed, were generated with it, so a checkpoint saves it for a resume to
        regenerate them exactly."""
        return self._pushed[0] if len(self._pushed) == 2 else None

    def zero(self) -> Weights:
        """A zero adapter with the newest push's names and shapes: LoRA with B = 0 (every tensor 0) is exactly the
        base model, so loading it lets the workers play the zero-shot base model without a second engine."""
        return {name: {k: np.zeros_like(v) for k, v in w.items()} for name, w in self.current().items()}

    def restore(self, version: int) -> None:
        """A resume from a checkpoint saved at ``version``: its adapter is pushed again next, and that push must be
        numbered ``version`` again (not 1), so the versions in metrics rows, turns and later checkpoints continue
        the uninterrupted run's. The counter is set to ``version - 1``; the history is left as it is."""
        self._version = version - 1

    def step_back(self) -> None:
        """A resumed one-step-off run re-plays its in-flight rollouts: the next push (the saved behaviour adapter)
        must be numbered as the newest push's predecessor, ``version - 1``, the version the uninterrupted run
        generated them under, and the push after it (the newest adapter again) ``version`` once more. The counter
        goes back two, since each push adds one; the history is left as it is."""
        self.restore(self._version - 1)
