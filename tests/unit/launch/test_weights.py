"""The rollout side's adapter versions (``launch/driver/weights.py``'s ``AdapterSync``), without Ray: the push counter, the
history of two a one-step-off checkpoint reads, the zero adapter of the base-model evaluation, and the two restores
a resume uses, checked against the versions the uninterrupted run records."""

from __future__ import annotations

import numpy as np
import pytest

from launch.driver.weights import AdapterSync


def pushed(n: int) -> tuple[AdapterSync, list[dict]]:
    """An ``AdapterSync`` after ``n`` pushes of distinguishable adapters (push k carries ``{"k": k}``)."""
    sync, adapters = AdapterSync(), [{None: {"k": k}} for k in range(1, n + 1)]
    for w in adapters:
        sync.push(w)
    return sync, adapters


def test_each_push_is_numbered_one_more_starting_at_one():
    """Version 0 means nothing pushed (the trainer pushes before its first evaluation then)."""
    sync = AdapterSync()
    assert sync.version == 0 and sync.history == () and sync.behaviour() is None
    assert [sync.push({None: {"k": k}}) for k in (1, 2, 3)] == [1, 2, 3]
    assert sync.version == 3
    with pytest.raises(AttributeError):
        sync.version = 7  # type: ignore[misc]  # read-only: only the named operations change it


def test_the_history_keeps_the_last_two_pushes_oldest_first():
    sync, w = pushed(1)
    assert sync.history == (w[0],) and sync.current() is w[0] and sync.behaviour() is None
    sync, w = pushed(5)
    assert sync.history == (w[3], w[4])  # pushes 4 and 5
    assert sync.current() is w[4] and sync.behaviour() is w[3]


def test_current_and_zero_before_any_push_raise():
    with pytest.raises(LookupError):
        AdapterSync().current()
    with pytest.raises(LookupError):
        AdapterSync().zero()


def test_zero_has_the_newest_pushs_names_shapes_and_dtypes_and_is_all_zeros():
    """LoRA with B = 0 is the base model: every tensor of every adapter zeroed, the pushed tensors left alone."""
    sync = AdapterSync()
    sync.push({"planner": {"a": np.ones((2, 3), np.float32)}})  # an older push's names do not count
    newest = {
        "planner": {"lora_A": np.full((4, 8), 0.5, np.float32), "lora_B": np.ones((8, 4), np.float16)},
        "executor": {"lora_B": np.arange(6, dtype=np.float32).reshape(2, 3)},
    }
    sync.push(newest)
    zero = sync.zero()
    assert list(zero) == ["planner", "executor"]
    for name, tensors in newest.items():
        assert list(zero[name]) == list(tensors)
        for k, v in tensors.items():
            assert zero[name][k].shape == v.shape and zero[name][k].dtype == v.dtype
            assert not zero[name][k].any()
    assert newest["executor"]["lora_B"][1, 2] == 5.0  # untouched


def test_a_resume_numbers_its_first_push_as_the_checkpoints_version():
    """A checkpoint saved after push 5 records version 5. The resumed run's fresh counter is restored, then the
    checkpoint's adapter pushed: 5 - 1 = 4, + 1 = 5 (the pre-refactor ``version = state["version"] - 1``); the next
    iteration's push is 6, as in the uninterrupted run. The history is not touched (the fresh one is empty)."""
    sync = AdapterSync()
    sync.restore(5)
    assert sync.version == 4 and sync.history == ()
    assert sync.push({None: {"k": 5}}) == 5
    assert sync.push({None: {"k": 6}}) == 6


def test_a_one_step_off_resume_replays_the_behaviour_adapter_under_its_own_version():
    """The uninterrupted run: pushes 1..5, iteration 5's checkpoint saves version 5 and behaviour push 4 (iteration
    6's rollouts, in flight, were started from it and carry version 4). The resume: restore(5) and push 5 (as
    above), then step_back: 5 - 2 = 3 (the pre-refactor ``version -= 2``), push the behaviour adapter = 4, start
    the rollouts (they record 4, as before), push the current adapter again = 5. The history then equals the
    uninterrupted run's, so the next checkpoint saves the same behaviour adapter."""
    uninterrupted, w = pushed(5)
    assert uninterrupted.version == 5 and uninterrupted.behaviour() is w[3]

    resumed = AdapterSync()
    resumed.restore(uninterrupted.version)
    resumed.push(w[4])
    current = resumed.current()
    resumed.step_back()
    assert resumed.version == 3 and resumed.history == (w[4],)
    assert resumed.push(uninterrupted.behaviour()) == 4  # what the in-flight rollouts record
    assert resumed.push(current) == 5
    assert resumed.history == uninterrupted.history == (w[3], w[4])
    assert resumed.push({None: {"k": 6}}) == uninterrupted.push({None: {"k": 6}}) == 6
    assert resumed.behaviour() is uninterrupted.behaviour() is w[4]
