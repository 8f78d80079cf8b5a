"""Round trips of the trajectory schema through its two wire forms, and its validation."""

import numpy as np
import pytest

from actors.trajectory import (
    Decision,
    Trajectory,
    TrajectoryGroup,
    Turn,
    from_numpy_dict,
    read_jsonl,
    to_jsonl,
    to_numpy_dict,
)


def _turn(rng: np.random.Generator, i: int, *, last: bool = False) -> Turn:
    p, r = int(rng.integers(3, 9)), int(rng.integers(1, 6))
    masks = {"action_mask": rng.random(r) < 0.5}
    if i % 2 == 0:
        masks["switch_mask"] = rng.random(r) < 0.3
    return Turn(
        prompt_ids=rng.integers(0, 1000, p),
        response_ids=rng.integers(0, 1000, r),
        logprobs=-rng.random(r).astype(np.float32),
        masks=masks,
        decision=Decision(
            action=f"go to {i}",
            valid=i != 1,
            switch=i % 2 == 0,
            subgoal=f"sg{i // 2}",
            extra={"keep_changed_subgoal": False},
        ),
        observation=f"obs {i} — ünïcode",
        response_text="<action>x</action>",
        env_reward=float(last),
        shaped={"format": -0.1 * (i == 1)},
        terminated=last,
        policy_version=3,
        adapter="policy",
        anchor_key=f"obs{i % 2}",
        segment_index=i // 2,
        info={"valid_action": True},
    )


def _trajs(seed: int = 0) -> list[Trajectory]:
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate([3, 1, 4]):
        turns = [_turn(rng, i, last=i == n - 1) for i in range(n)]
        out.append(
            Trajectory(
                traj_id=f"t{k}",
                group_id="g0",
                task_id="task-1",
                env_name="synthetic",
                turns=turns,
                task="do it",
                status="finished",
                won=k == 0,
                score=1.0,
            )
        )
    return out


def _assert_same(a: list[Trajectory], b: list[Trajectory]) -> None:
    assert len(a) == len(b)
    for ta, tb in zip(a, b, strict=True):
        assert (ta.traj_id, ta.status, ta.won, ta.score, ta.task) == (
            tb.traj_id,
            tb.status,
            tb.won,
            tb.score,
            tb.task,
        )
        assert len(ta.turns) == len(tb.turns)
        for ua, ub in zip(ta.turns, tb.turns, strict=True):
            np.testing.assert_array_equal(ua.prompt_ids, ub.prompt_ids)
            np.testing.assert_array_equal(ua.response_ids, ub.response_ids)
            np.testing.assert_array_equal(ua.logprobs, ub.logprobs)
            assert ua.masks.keys() == ub.masks.keys()
            for k in ua.masks:
                np.testing.assert_array_equal(ua.masks[k], ub.masks[k])
                assert ub.masks[k].dtype == bool
            assert ua.decision == ub.decision
            for name in (
                "observation",
                "env_reward",
                "shaped",
                "terminated",
                "truncated",
                "policy_version",
                "adapter",
                "anchor_key",
                "segment_index",
                "info",
                "role",
            ):
                assert getattr(ua, name) == getattr(ub, name), name


def test_numpy_dict_round_trip():
    trajs = _trajs()
    packed = to_numpy_dict(trajs)
    assert all(isinstance(v, np.ndarray) for k, v in packed.items() if k != "meta")
    _assert_same(trajs, from_numpy_dict(packed))


def test_jsonl_round_trip(tmp_path):
    trajs = _trajs(1)
    path = tmp_path / "t.jsonl"
    to_jsonl(trajs[:2], path)
    to_jsonl(trajs[2:], path, append=True)
    _assert_same(trajs, list(read_jsonl(path)))


def test_empty_round_trip():
    assert from_numpy_dict(to_numpy_dict([])) == []


def test_reward_is_env_plus_shaping():
    t = Turn(
        prompt_ids=[1],
        response_ids=[2, 3],
        logprobs=[-0.5, -0.25],
        env_reward=10.0,
        shaped={"format": -0.1, "keep": -0.3},
    )
    assert t.reward == pytest.approx(10.0 - 0.1 - 0.3, abs=1e-12)


def test_terminated_and_truncated_are_apart():
    trajs = _trajs()
    assert trajs[0].terminated and not trajs[0].truncated
    trajs[0].turns[-1].terminated, trajs[0].turns[-1].truncated = False, True
    assert trajs[0].truncated and not trajs[0].terminated


def test_switches_force_turn_zero_boundary():
    trajs = _trajs()
    trajs[0].turns[0].decision.switch = False
    q = trajs[0].switches()
    assert q.dtype == bool and q[0]


@pytest.mark.parametrize("field", ["logprobs", "mask"])
def test_shape_mismatch_is_rejected(field):
    kwargs = {"prompt_ids": [1], "response_ids": [1, 2, 3], "logprobs": [0.0, 0.0, 0.0]}
    if field == "logprobs":
        kwargs["logprobs"] = [0.0]
    else:
        kwargs["masks"] = {"action_mask": [True]}
    with pytest.raises(ValueError, match="response tokens"):
        Turn(**kwargs)


def test_group_failed_flag():
    trajs = _trajs()
    g = TrajectoryGroup("g0", "task-1", trajs)
    assert not g.failed
    trajs[1].status = "failed"
    assert g.failed
