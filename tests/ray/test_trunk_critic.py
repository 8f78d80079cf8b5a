"""The critic as a head on the policy's own trunk (``learner.critic_trunk=policy``), on the tiny random Llama.

What is checked, and why it can fail:
* its values are the head applied to the policy's last hidden states (no critic adapter exists);
* one joint step (the head's values from the policy's own forward) equals a critic step then a policy step, and the
  policy it leaves equals a policy step alone: the value loss trains the head and never the policy (drop the
  ``detach`` in ``TrunkValueHead`` and the value loss's gradient lands on the policy's LoRA);
* the learner group takes the joint step: a group that stepped the critic after the policy would read the stepped
  trunk and end with other values;
* the head fits its targets and survives a checkpoint.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.ray.test_learner import LOSS_CFG, MICRO_TOL, _batch, _free_port, _group_step, _spec, _worker

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")

from learners.algos import grpo, hiper  # noqa: E402

TRUNK = {"critic_trunk": "policy"}


@pytest.fixture(scope="module")
def model_path(ray_local) -> str:
    from actors.models import resolve_model_path

    return resolve_model_path("tiny")


def _with_old(worker, batch):
    return dataclasses.replace(batch, old_logprobs=worker.logprobs(batch.seqs))


def test_values_are_the_head_on_the_policys_hidden_states(model_path):
    worker = _worker(model_path, **TRUNK)
    batch = _batch(11)
    worker.update_critic(batch, hiper.value_loss, hiper.Config())  # a head that is not 0 everywhere
    assert "critic" not in worker.policy.module.peft_config
    seqs = batch.seqs
    with torch.no_grad(), worker._active(None):
        hidden = worker._decoder_hidden(torch.as_tensor(seqs.input_ids), torch.as_tensor(seqs.attention_mask))
        every = worker.critic.module.head(hidden).numpy()  # float[B, L, 2]
    want = every[np.arange(len(seqs))[:, None], seqs.value_pos, seqs.value_head[None, :]]
    got = worker.values(seqs)
    assert np.abs(want).max() > 1e-3
    assert float(np.abs(got - want).max()) < MICRO_TOL


def test_a_joint_step_equals_a_critic_step_then_a_policy_step_and_leaves_the_policy_alone(model_path):
    batch = _batch(12)
    joint, apart, policy_only = (_worker(model_path, **TRUNK) for _ in range(3))
    seqs = batch.seqs
    lp0, v0 = joint.logprobs(seqs), joint.values(seqs)
    for _ in range(2):
        got = joint.update_policy(
            _with_old(joint, batch), grpo.ALGORITHM.policy_loss, LOSS_CFG, value_loss=hiper.value_loss
        )
        b = _with_old(apart, batch)
        want = apart.update_critic(b, hiper.value_loss, hiper.Config())
        apart.update_policy(b, grpo.ALGORITHM.policy_loss, LOSS_CFG)
        policy_only.update_policy(_with_old(policy_only, batch), grpo.ALGORITHM.policy_loss, LOSS_CFG)
        assert got["value_loss"] == pytest.approx(want["value_loss"], rel=1e-5)
    lp, v = joint.logprobs(seqs), joint.values(seqs)
    resp = seqs.response_mask
    assert float(np.abs(lp - lp0)[resp].max()) > 1e-2 and float(np.abs(v - v0).max()) > 1e-2
    assert float(np.abs(lp - apart.logprobs(seqs))[resp].max()) < MICRO_TOL
    assert float(np.abs(v - apart.values(seqs)).max()) < MICRO_TOL
    assert float(np.abs(lp - policy_only.logprobs(seqs))[resp].max()) < MICRO_TOL


def test_the_group_steps_policy_and_head_in_one_pass(model_path):
    from cluster.ray_cluster import WorkerResources
    from learners.group import LearnerGroup

    batch = _batch(13)
    alone = _worker(model_path, **TRUNK)
    b = _with_old(alone, batch)
    alone.update_policy(b, grpo.ALGORITHM.policy_loss, LOSS_CFG, value_loss=hiper.value_loss)
    group = LearnerGroup(_spec(model_path, master_port=_free_port(), **TRUNK), 1, WorkerResources(0.5, 0))
    try:
        out = _group_step(group, batch)
        v = group.values(batch.seqs)
    finally:
        group.shutdown()
    assert out["value_loss"] > 0 and out["optimizer_steps"] == 1
    assert float(np.abs(v - alone.values(batch.seqs)).max()) < MICRO_TOL


def test_the_head_fits_its_targets_and_survives_a_checkpoint(model_path, tmp_path):
    batch = _batch(14)
    valid = batch.value_valid
    worker = _worker(model_path, **TRUNK)
    err0 = float(np.abs(worker.values(batch.seqs) - batch.value_target)[valid].mean())
    for _ in range(5):
        worker.update_critic(batch, hiper.value_loss, hiper.Config())
    v = worker.values(batch.seqs)
    err = float(np.abs(v - batch.value_target)[valid].mean())
    assert err < 0.5 * err0
    worker.save_checkpoint(str(tmp_path))
    fresh = _worker(model_path, **TRUNK)
    fresh.load_checkpoint(str(tmp_path))
    np.testing.assert_array_equal(fresh.values(batch.seqs), v)
