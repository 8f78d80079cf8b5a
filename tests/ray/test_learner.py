"""LearnerWorker / LearnerGroup end to end on a tiny random Llama (DeepSpeed on CPU over gloo, peft LoRA, critic).

What is checked, and why it can fail:
* micro-batching only bounds memory: one step with micro_batch_size = B equals one with micro_batch_size = 2;
* data parallelism through Ray (2 ranks, gloo) equals the single-rank update on the same mini-batch;
* the reference policy is the base model (adapter disabled), checked against a plain HF forward pass;
* the trained adapter leaves the learner intact: HF engine, vLLM engine and ``peft.PeftModel.from_pretrained``
  reproduce the learner's log-probs;
* a checkpoint restores weights, optimizer state and RNG (LoRA dropout on, so RNG matters);
* ZeRO 1/2/3 equal ZeRO 0;
* the critic moves towards its targets and ignores invalid ones;
* a critic on the policy's trunk steps with the policy in one pass and never moves it (section 9).

Tolerances are fp32 on CPU; each constant says what was measured.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow

# Set before Ray starts (its workers inherit the driver's environment) and before DeepSpeed is imported.
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")
pytest.importorskip("peft")

from common.lora import LoraSpec  # noqa: E402
from learners.algos import grpo, hiper  # noqa: E402
from learners.batch import LearnerBatch, Sequences  # noqa: E402
from learners.losses import aggregation_weights  # noqa: E402

LORA = LoraSpec(rank=8, alpha=16, target_modules=("q_proj", "v_proj"))
LOSS_CFG = grpo.Config(kl_coef=0.0)
B, L = 6, 16

MICRO_TOL = 1e-5
"""micro_batch_size 6 vs 2 (2 AdamW steps, lr 1e-2): max |Δ logprob| measured 3.8e-6 (values 1.2e-7):
summation order of the accumulated gradients, amplified by AdamW's first steps."""
DP_TOL = 1e-5
"""1 vs 2 gloo ranks: max |Δ logprob| measured 3.8e-6 on AMD EPYC (AVX2) and on the CI machine (values 1.8e-7)."""
DP_WEIGHT_TOL = 1e-4
"""1 vs 2 gloo ranks, adapter weights: measured 1.29e-5 (AMD EPYC AVX2 and the CI machine alike, 2026-11-25; 3.5e-6
earlier). AdamW divides each element's gradient by its own running magnitude, so an element whose gradient is near
zero turns the all-reduce's summation-order noise into a weight change on the scale of lr (1e-2 per step). A rank
that trained on its half of the rows alone (no all-reduce) misses by 4.0e-2 (measured), 400x this bound."""
ENGINE_TOL = 2e-5
"""engine-reported logprobs vs the learner's: HF max gap 1.9e-6, vLLM 3.1e-6 (fp32; the
adapter itself moves them by 16.9)."""
REF_TOL = 1e-4
"""learner (decoder + lm_head on the selected rows) vs a full HF forward of the same weights: max |Δ logprob|
measured 2.9e-5 on log-probs of about −20 (the random tiny model), i.e. ~1e-6 relative fp32 rounding."""
ENTROPY_TOL = 1e-4
"""learner (fp32, selected rows) vs a full HF forward in float64: max |Δ entropy| measured 4.5e-5 on entropies of
0.02-0.08 (the learner's log-probs are REF_TOL-close; the fp32 form logsumexp − Σ p·z was 1e-3 off)."""
ZERO_TOL = 1e-5
"""ZeRO k vs ZeRO 0 after 2 steps: max |Δ logprob| measured 0 for stages 1 and 2 (values 3.6e-7)."""


def _free_port() -> int:
    """A port nobody listens on now: the default 29533 is shared by every learner on the machine."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


IN_PROCESS_PORT = _free_port()
"""All in-process workers share one world-size-1 gloo group (``learners.distributed.init_dist`` initialises once per process)."""


@pytest.fixture(scope="module")
def model_path(ray_local) -> str:
    """Ray starts before any in-process learner: ``learners.distributed.init_dist`` writes MASTER_PORT into ``os.environ`` and Ray's
    workers inherit the driver's environment at ``ray.init``, where MASTER_PORT would override
    ``LearnerSpec.master_port`` (``test_spec_master_port_beats_inherited_env``)."""
    from actors.models import resolve_model_path

    return resolve_model_path("tiny")


def _spec(model_path: str, **kw):
    from learners.learner_spec import PADDED_ROWS, LearnerSpec

    base = {
        "model_path": model_path,
        "lora": LORA,
        "dtype": "float32",
        "zero_stage": 0,
        "actor_lr": 1e-2,
        "critic_lr": 1e-2,
        "max_grad_norm": 1.0,
        "micro_batch_size": 2,
        "gradient_checkpointing": False,
        "value_heads": 2,
        "seed": 0,
        "critic_trunk": "own",
        "master_port": IN_PROCESS_PORT,
        **PADDED_ROWS,
    }
    base.update(kw)
    return LearnerSpec(**base)


def _worker(model_path: str, **kw):
    from learners.worker import LearnerWorker

    return LearnerWorker(_spec(model_path, **kw))


def _batch(seed: int, n: int = B) -> LearnerBatch:
    """Right-padded rows of random tokens: prompt 4–7 tokens, response 3–8; value slot 0 at the last prompt token
    (head 0), slot 1 at the last response token (head 1); the last row's slot 1 is an invalid target."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, L), np.int64)
    attn = np.zeros((n, L), np.int64)
    resp = np.zeros((n, L), bool)
    pos = np.zeros((n, 2), np.int64)
    for i in range(n):
        p, r = int(rng.integers(4, 8)), int(rng.integers(3, 9))
        ids[i, : p + r] = rng.integers(10, 2000, p + r)
        attn[i, : p + r] = 1
        resp[i, p : p + r] = True
        pos[i] = (p - 1, p + r - 1)
    valid = np.ones((n, 2), bool)
    valid[-1, 1] = False
    return LearnerBatch(
        seqs=Sequences(
            input_ids=ids, attention_mask=attn, response_mask=resp, value_pos=pos, value_head=np.array([0, 1])
        ),
        old_logprobs=np.zeros((n, L), np.float32),
        ref_logprobs=None,
        token_adv=(rng.normal(size=(n, L)) * resp).astype(np.float32),
        loss_mask=resp.copy(),
        value_target=rng.normal(size=(n, 2)).astype(np.float32),
        value_valid=valid,
        old_values=np.zeros((n, 2), np.float32),
        loss_weight=aggregation_weights(torch.from_numpy(resp), "token-mean").numpy().astype(np.float32),
        value_weight=(valid / valid.sum()).astype(np.float32),
    )


def _train(worker, batch: LearnerBatch, steps: int = 2, critic: bool = True) -> None:
    """``steps`` PPO-style steps: old log-probs are the policy's own before each step (ratio 1 at the start)."""
    for _ in range(steps):
        batch = dataclasses.replace(batch, old_logprobs=worker.logprobs(batch.seqs))
        worker.update_policy(batch, grpo.ALGORITHM.policy_loss, LOSS_CFG)
        if critic:
            worker.update_critic(batch, hiper.value_loss, hiper.Config())


def _group_step(group, batch: LearnerBatch, epochs: int = 1) -> dict[str, float]:
    """``epochs`` passes of one GRPO-loss + HiPER-critic mini-batch over ``batch`` through a ``LearnerGroup``, its
    old log-probs the group's own (ratio 1 at the start)."""
    return group.update(
        dataclasses.replace(batch, old_logprobs=group.logprobs(batch.seqs)),
        policy_loss=grpo.ALGORITHM.policy_loss,
        value_loss=hiper.value_loss,
        loss_cfg=LOSS_CFG,
        agg="token-mean",
        mini_batch_size=B,
        epochs=epochs,
        seed=0,
    )


def _max_gap(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float:
    return float(np.abs(a - b)[mask].max())


# -- 1. micro-batching ------------------------------------------------------------------------------------------


def test_micro_batching_is_exact(model_path):
    batch = _batch(0)
    whole, micro = _worker(model_path, micro_batch_size=B), _worker(model_path, micro_batch_size=2)
    seqs = batch.seqs
    lp0 = whole.logprobs(seqs)
    _train(whole, batch)
    _train(micro, batch)
    lp_w, lp_m = whole.logprobs(seqs), micro.logprobs(seqs)
    resp = seqs.response_mask
    gap_lp = _max_gap(lp_w, lp_m, resp)
    gap_v = float(np.abs(whole.values(seqs) - micro.values(seqs)).max())
    print(f"micro-batching: max |Δ logprob| {gap_lp:.2e}, max |Δ value| {gap_v:.2e}")
    assert _max_gap(lp_w, lp0, resp) > 1e-2, (
        "the update must move the policy for the comparison to mean anything"
    )
    assert gap_lp < MICRO_TOL
    assert gap_v < MICRO_TOL


def test_critic_passes_stop_where_the_value_slots_read_and_change_no_value(model_path):
    """The critic's micro-batches end one past the last value slot (``learners.batch.value_reach``): slot 1 moved to
    the response's second token leaves the rest of each row out of the pass, and the values equal those of the
    critic's forward over the whole rows."""
    from learners.batch import row_lengths, value_reach

    batch = _batch(3)
    seqs = batch.seqs
    prompt_last = seqs.value_pos[:, 0]
    seqs = dataclasses.replace(seqs, value_pos=np.stack([prompt_last, prompt_last + 2], axis=1))
    assert (value_reach(seqs) < row_lengths(seqs.attention_mask)).all()
    worker = _worker(model_path)
    _train(worker, dataclasses.replace(batch, seqs=seqs))  # a critic that is not 0 everywhere
    name, engine = worker._critic(None)
    with torch.no_grad(), worker._critic_active(name):
        whole = engine(torch.as_tensor(seqs.input_ids), torch.as_tensor(seqs.attention_mask)).numpy()
    want = whole[np.arange(len(seqs))[:, None], seqs.value_pos, seqs.value_head[None, :]]
    gap = float(np.abs(worker.values(seqs) - want).max())
    print(f"critic cut at its reach: max |Δ value| {gap:.2e} of values up to {np.abs(want).max():.2f}")
    assert gap < MICRO_TOL


def test_critic_and_policy_share_the_base_but_not_their_updates(model_path):
    """The critic is an adapter on the policy's base (one copy of the base weights): a critic step must leave every
    policy log-prob as it was, and a policy step every value (the critic's forward and backward run under its own
    adapter, the policy's under the policy's)."""
    worker = _worker(model_path)
    assert worker.critic.module.backbone is worker.policy.module
    batch = _batch(4)
    seqs, resp = batch.seqs, batch.seqs.response_mask
    batch = dataclasses.replace(batch, old_logprobs=worker.logprobs(seqs))
    lp0, v0 = worker.logprobs(seqs), worker.values(seqs)
    worker.update_critic(batch, hiper.value_loss, hiper.Config())
    lp1, v1 = worker.logprobs(seqs), worker.values(seqs)
    np.testing.assert_array_equal(lp1, lp0)
    assert float(np.abs(v1 - v0).max()) > 1e-3
    worker.update_policy(batch, grpo.ALGORITHM.policy_loss, LOSS_CFG)
    lp2, v2 = worker.logprobs(seqs), worker.values(seqs)
    np.testing.assert_array_equal(v2, v1)
    assert _max_gap(lp2, lp1, resp) > 1e-3


def test_update_entropy_metric_is_the_token_mean_it_samples(model_path, monkeypatch):
    """The update's ``entropy`` metric (before the step) is the mean token entropy of the response: exactly
    ``entropies``' token-weighted mean when ``ENTROPY_SAMPLE`` covers every position, an evenly spaced subset
    (a different number) when it does not."""
    import learners.worker as worker_mod

    batch = _batch(5)
    counts = batch.seqs.response_mask[:, 1:].sum(1)
    metric = {}
    for sample in (10_000, 2):
        monkeypatch.setattr(worker_mod, "ENTROPY_SAMPLE", sample)
        worker = _worker(model_path, micro_batch_size=B)
        exact = float((worker.entropies(batch.seqs) * counts).sum() / counts.sum())
        b = dataclasses.replace(batch, old_logprobs=worker.logprobs(batch.seqs))
        metric[sample] = worker.update_policy(b, grpo.ALGORITHM.policy_loss, LOSS_CFG)["entropy"]
    assert metric[10_000] == pytest.approx(exact, rel=1e-5)
    assert metric[2] != pytest.approx(exact, rel=1e-3)


def test_entropies_match_a_full_hf_forward(model_path):
    """``entropies`` (log-softmax over the selected rows only) against the mean token entropy of a plain HF forward
    over the whole vocabulary: a sign or a normalisation slip in the learner's formula fails this."""
    from transformers import AutoModelForCausalLM

    seqs = _batch(4).seqs
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = base(
            input_ids=torch.from_numpy(seqs.input_ids), attention_mask=torch.from_numpy(seqs.attention_mask)
        ).logits.float()
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    h = -(logp.exp() * logp).sum(-1).numpy()  # H = -Σ_v p_v log p_v per position
    where = seqs.response_mask[:, 1:]
    expected = (h * where).sum(1) / np.maximum(where.sum(1), 1)
    got = _worker(model_path).entropies(seqs)  # the adapter starts at B = 0: the base model's entropies
    print(f"entropies vs HF float64: max |Δ| {np.abs(got - expected).max():.1e}")
    assert expected.min() > 1e-2  # measured 0.024-0.075 on the tiny model: a flipped sign cannot pass
    np.testing.assert_allclose(got, expected, rtol=0, atol=ENTROPY_TOL)


def test_behaviour_weight_reaches_the_loss(model_path):
    """Decoupled PPO's weight (``LearnerBatch.behaviour_weight``) multiplies each token's surrogate: rows weighted 0
    must train exactly as rows with advantage 0 (the same aggregation weights), and unlike unweighted rows."""
    batch = _batch(3)
    batch = dataclasses.replace(batch, old_logprobs=_worker(model_path).logprobs(batch.seqs))
    weight = np.ones(batch.token_adv.shape, np.float32)
    weight[:3] = 0.0
    zero_adv = batch.token_adv.copy()
    zero_adv[:3] = 0.0
    runs = {
        "weighted": dataclasses.replace(batch, behaviour_weight=weight),
        "zero_adv": dataclasses.replace(batch, token_adv=zero_adv),
        "plain": batch,
    }
    lp = {}
    for name, b in runs.items():
        worker = _worker(model_path)
        worker.update_policy(b, grpo.ALGORITHM.policy_loss, LOSS_CFG)
        lp[name] = worker.logprobs(batch.seqs)
    resp = batch.seqs.response_mask
    assert _max_gap(lp["weighted"], lp["zero_adv"], resp) < MICRO_TOL
    assert _max_gap(lp["weighted"], lp["plain"], resp) > 1e-3


def test_gradient_checkpointing_wraps_the_training_passes_and_changes_no_update(model_path):
    """With ``gradient_checkpointing`` the policy's and the critic's decoder layers run through torch's checkpoint
    in training passes only (counted on each first layer: one call per training micro-batch; bench_memory.py
    measures what it saves), and the two updates match the plain worker's."""
    batch = _batch(0)
    plain, ckpt = _worker(model_path), _worker(model_path, gradient_checkpointing=True)
    calls = 0
    # policy and critic share one base (the critic is an adapter on it): one first layer serves both
    layer = ckpt.policy.module.get_base_model().model.layers[0]
    assert ckpt.critic.module.backbone.get_base_model().model.layers[0] is layer
    inner = layer._gradient_checkpointing_func

    def counting(*args, **kwargs):
        nonlocal calls
        calls += 1
        return inner(*args, **kwargs)

    layer._gradient_checkpointing_func = counting
    _train(plain, batch)
    _train(ckpt, batch)
    # (policy + critic) × 2 steps × ceil(6 rows / micro-batch 2) training micro-batches; eval passes not wrapped
    assert calls == 2 * 2 * 3
    seqs = batch.seqs
    gap_lp = _max_gap(plain.logprobs(seqs), ckpt.logprobs(seqs), seqs.response_mask)
    gap_v = float(np.abs(plain.values(seqs) - ckpt.values(seqs)).max())
    print(f"gradient checkpointing: max |Δ logprob| {gap_lp:.2e}, |Δ value| {gap_v:.2e}")
    assert gap_lp < MICRO_TOL
    assert gap_v < MICRO_TOL


# -- 2. data parallel through Ray ------------------------------------------------------------------------------


def test_data_parallel_group_equals_single_worker(ray_local, model_path):
    from cluster.ray_cluster import WorkerResources
    from learners.group import LearnerGroup

    batch = _batch(1)
    groups = {
        n: LearnerGroup(_spec(model_path, master_port=_free_port()), n, WorkerResources(0.5, 0))
        for n in (1, 2)
    }
    out = {}
    for n, g in groups.items():
        _group_step(g, batch, epochs=2)
        out[n] = (g.adapter_weights(), g.logprobs(batch.seqs), g.values(batch.seqs))
    for g in groups.values():
        g.shutdown()  # workers and placement groups: the next test's group needs the CPUs back
    (w1, lp1, v1), (w2, lp2, v2) = out[1], out[2]
    assert set(w1) == set(w2)
    gap_w = max(float(np.abs(w1[k] - w2[k]).max()) for k in w1)
    gap_lp = _max_gap(lp1, lp2, batch.seqs.response_mask)
    gap_v = float(np.abs(v1 - v2).max())
    print(f"data parallel: max |Δ adapter| {gap_w:.2e}, |Δ logprob| {gap_lp:.2e}, |Δ value| {gap_v:.2e}")
    assert max(float(np.abs(v).max()) for k, v in w1.items() if "lora_B" in k) > 1e-3
    assert gap_w < DP_WEIGHT_TOL
    assert gap_lp < DP_TOL
    assert gap_v < DP_TOL


def test_rows_come_back_in_order_each_as_if_computed_alone(ray_local, model_path):
    """The group sends rows longest first in chunks cut to their longest row; each worker splits its share into
    micro-batches of similar length, cut the same way. Every output must land on its own row and equal that row
    computed alone at its own length (a causal model's outputs do not depend on the padding after them)."""
    from cluster.ray_cluster import WorkerResources
    from learners.group import LearnerGroup

    batch = _batch(2, n=20)  # chunks of 4 micro-batches × 2 rows × 2 workers = 16 rows: two chunks
    seqs = batch.seqs
    group = LearnerGroup(_spec(model_path, master_port=_free_port()), 2, WorkerResources(0.5, 0))
    try:
        b = dataclasses.replace(batch, old_logprobs=group.logprobs(seqs))
        common = {"loss_cfg": LOSS_CFG, "agg": "token-mean", "mini_batch_size": 20, "epochs": 1, "seed": 0}
        group.update(b, policy_loss=grpo.ALGORITHM.policy_loss, value_loss=hiper.value_loss, **common)
        lp, v = group.logprobs(seqs), group.values(seqs)
        lengths = seqs.attention_mask.sum(1)
        alone_lp, alone_v = np.zeros_like(lp), np.zeros_like(v)
        for i, n in enumerate(lengths):
            one = seqs.rows(np.array([i])).narrow(int(n))
            alone_lp[i, :n] = group.logprobs(one)[0]
            alone_v[i] = group.values(one)[0]
    finally:
        group.shutdown()
    assert len(set(lengths.tolist())) > 3 and not np.all(np.diff(lengths) <= 0)  # lengths vary, unsorted
    assert float(np.abs(v).max()) > 1e-3  # the critic moved: values differ per row
    gap_lp = _max_gap(lp, alone_lp, seqs.response_mask)
    gap_v = float(np.abs(v - alone_v).max())
    print(f"rows batched vs alone: max |Δ logprob| {gap_lp:.2e}, |Δ value| {gap_v:.2e}")
    assert gap_lp < MICRO_TOL
    assert gap_v < MICRO_TOL
    assert not lp[~seqs.response_mask].any()  # nothing outside the response tokens


def test_the_groups_optimizer_steps_are_equal_or_whole_episode_groups(ray_local, model_path):
    """9 rows at mini_batch_size 4: rows one by one take ceil(9 / 4) = 3 steps of 3 rows (slicing at every 4 rows
    would take 4, 4 and 1); rows of episode groups of 2, 3 and 4 rows (``learner.minibatches=groups``) take 3 steps
    of one group each, 2 to 4 rows. What the group's steps ran on, reported by the update itself; packed passes
    through Ray (random rows share no prefix: a tree token per row token)."""
    from cluster.ray_cluster import WorkerResources
    from learners.group import LearnerGroup

    batch = _batch(3, n=9)
    grouped = dataclasses.replace(
        batch, seqs=dataclasses.replace(batch.seqs, group=np.repeat([5, 1, 7], [2, 3, 4]))
    )
    spec = _spec(model_path, master_port=_free_port(), pack="tree", pack_tokens=24, minibatches="groups")
    group = LearnerGroup(spec, 1, WorkerResources(0.5, 0))
    try:
        common = {"loss_cfg": LOSS_CFG, "agg": "token-mean", "mini_batch_size": 4, "epochs": 1, "seed": 0}
        losses = {"policy_loss": grpo.ALGORITHM.policy_loss, "value_loss": hiper.value_loss}
        by_rows = group.update(batch, **losses, **common)
        by_groups = group.update(grouped, **losses, **common)
    finally:
        group.shutdown()
    keys = ("optimizer_steps", "minibatch_rows_min", "minibatch_rows_max")
    assert [by_rows[k] for k in keys] == [3, 3, 3]
    assert [by_groups[k] for k in keys] == [3, 2, 4]
    assert by_groups["learner_tokens_ratio"] == 1.0


def test_a_rendezvous_port_taken_after_it_was_picked_is_replaced(ray_local, model_path, monkeypatch, capsys):
    """The group picks a free port, but another process may bind it before rank 0 does (a CI run failed so beside
    a training run's Ray cluster): the group is rebuilt on a fresh port."""
    import socket

    from cluster.ray_cluster import WorkerResources
    from learners import group as group_mod

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        ports = iter([taken.getsockname()[1], _free_port()])
        monkeypatch.setattr(group_mod, "_free_port", lambda: next(ports))
        group = group_mod.LearnerGroup(
            _spec(model_path, master_port=0, value_heads=0), 1, WorkerResources(1, 0)
        )
        try:
            assert group.spec.master_port != taken.getsockname()[1]
            assert group.logprobs(_batch(0).seqs).shape == (B, L)
        finally:
            group.shutdown()
    assert "was taken before rank 0 bound it" in capsys.readouterr().out


def test_spec_master_port_beats_inherited_env(ray_local, model_path):
    """A learner process that inherited MASTER_PORT (here: the port this test process's gloo store listens on)
    must still rendezvous on ``LearnerSpec.master_port``."""
    from learners.worker import LearnerWorker

    _worker(model_path)  # makes sure this process listens on IN_PROCESS_PORT
    actor = (
        ray_local.remote(LearnerWorker)
        .options(num_cpus=0.5, runtime_env={"env_vars": {"MASTER_PORT": str(IN_PROCESS_PORT)}})
        .remote(_spec(model_path, master_port=_free_port(), value_heads=0))
    )
    try:
        assert ray_local.get(actor.ping.remote(), timeout=120) == 0
    finally:
        ray_local.kill(actor)


# -- 3. reference policy ---------------------------------------------------------------------------------------


def _hf_logprobs(model, seqs: Sequences) -> np.ndarray:
    """float32[B, L]: a plain HF forward pass, log-softmax at the positions predicting each response token."""
    ids = torch.from_numpy(seqs.input_ids)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.from_numpy(seqs.attention_mask)).logits.float()
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    out = np.zeros(ids.shape, np.float32)
    out[:, 1:] = lp.numpy()
    return out * seqs.response_mask


def test_reference_is_base_model(model_path):
    from transformers import AutoModelForCausalLM

    batch = _batch(2)
    worker = _worker(model_path)
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    expected = _hf_logprobs(base, batch.seqs)
    resp = batch.seqs.response_mask
    before = worker.logprobs(batch.seqs, reference=True)
    _train(worker, batch, critic=False)
    after = worker.logprobs(batch.seqs, reference=True)
    gap = max(_max_gap(before, expected, resp), _max_gap(after, expected, resp))
    print(f"reference vs HF base: max |Δ logprob| {gap:.2e}")
    assert gap < REF_TOL
    assert _max_gap(worker.logprobs(batch.seqs), expected, resp) > 1e-2


def test_a_frozen_copy_is_the_policy_it_copied_never_trains_and_survives_a_checkpoint(model_path, tmp_path):
    """``frozen_adapters``: the KL reference as RL begins. Loaded with the policy's tensors it gives the policy's
    log-probs; updates (and the base-model pass, whose peft context re-enables gradients) leave it bit for bit as it
    was; a checkpoint restores it; loading the policy alone (``bc.from_run``) leaves it alone."""
    batch = _batch(5)
    resp = batch.seqs.response_mask
    worker = _worker(model_path, value_heads=0, frozen_adapters=("ref_default",))
    _train(worker, batch, critic=False)  # "BC": the policy moves away from the base
    worker.load_adapter_weights(worker.adapter_weights(), adapter="ref_default")
    start = worker.logprobs(batch.seqs)
    frozen = worker.logprobs(batch.seqs, adapter="ref_default")
    assert _max_gap(frozen, start, resp) < 1e-6
    assert _max_gap(frozen, worker.logprobs(batch.seqs, reference=True), resp) > 1e-2  # not the base model
    worker.save_checkpoint(str(tmp_path / "ckpt"))

    _train(worker, batch, critic=False)
    assert _max_gap(worker.logprobs(batch.seqs), start, resp) > 1e-2
    np.testing.assert_array_equal(worker.logprobs(batch.seqs, adapter="ref_default"), frozen)
    assert not any(p.requires_grad for n, p in worker.policy.module.named_parameters() if "ref_default" in n)

    fresh = _worker(model_path, value_heads=0, frozen_adapters=("ref_default",))
    fresh.load_checkpoint(str(tmp_path / "ckpt"), only=("default",))
    assert (
        _max_gap(fresh.logprobs(batch.seqs, adapter="ref_default"), frozen, resp) > 1e-2
    )  # untouched: zero B
    fresh.load_checkpoint(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(fresh.logprobs(batch.seqs, adapter="ref_default"), frozen)
    with pytest.raises(ValueError, match="no policy adapter 'ref_other'"):
        worker.logprobs(batch.seqs, adapter="ref_other")


# -- 4. adapter round trip -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(model_path):
    """A worker after three large updates (lora_A and lora_B both moved) and its adapter tensors."""
    worker = _worker(model_path, actor_lr=0.1)
    _train(worker, _batch(3), steps=3, critic=False)
    return worker, worker.adapter_weights()


def _engine_vs_learner(engine, worker, weights) -> tuple[float, float]:
    """Greedy generation with the adapter; max gap between the engine's log-probs of its responses and the
    learner's policy log-probs of the same tokens, and (to show the adapter was applied) the gap to the
    learner's reference log-probs."""
    from actors.inference import GenerationRequest, SamplingParams

    assert engine.load_adapter("policy", weights, 1)
    prompts = [
        tuple(int(t) for t in row[:n]) for row, n in zip(_batch(4).seqs.input_ids[:3], (5, 6, 7), strict=True)
    ]
    params = SamplingParams(temperature=0.0, max_tokens=6)
    tuned = engine.generate([GenerationRequest(p, "policy") for p in prompts], params)
    width = max(len(p) + len(r.response_ids) for p, r in zip(prompts, tuned, strict=True))
    ids = np.zeros((len(prompts), width), np.int64)
    attn = np.zeros_like(ids)
    resp = np.zeros(ids.shape, bool)
    eng = np.zeros(ids.shape, np.float32)
    for i, (p, r) in enumerate(zip(prompts, tuned, strict=True)):
        n = len(p) + len(r.response_ids)
        ids[i, :n] = list(p) + r.response_ids
        attn[i, :n] = 1
        resp[i, len(p) : n] = True
        eng[i, len(p) : n] = r.logprobs
    seqs = Sequences(
        ids, attn, resp, value_pos=np.zeros((len(ids), 0), np.int64), value_head=np.zeros(0, np.int64)
    )
    return _max_gap(worker.logprobs(seqs), eng, resp), _max_gap(
        worker.logprobs(seqs, reference=True), eng, resp
    )


def test_adapter_round_trip_hf_engine(model_path, trained):
    from actors.hf_engine import HFEngine

    worker, weights = trained
    gap, base_gap = _engine_vs_learner(HFEngine(model_path, LORA, dtype="float32"), worker, weights)
    print(f"HF engine vs learner: max |Δ logprob| {gap:.2e} (vs the base model {base_gap:.2e})")
    assert base_gap > 1e-2, "the engine must apply the adapter"
    assert gap < ENGINE_TOL


class _Remote:
    """Calls an engine actor's methods synchronously (what ``_engine_vs_learner`` needs)."""

    def __init__(self, actor) -> None:
        self.actor = actor

    def __getattr__(self, name: str):
        import ray

        return lambda *a, **kw: ray.get(getattr(self.actor, name).remote(*a, **kw))


def test_adapter_round_trip_vllm_engine(ray_local, model_path, trained):
    pytest.importorskip("vllm")
    from actors.vllm_engine import VLLMEngine

    worker, weights = trained
    # its own process: vLLM replaces this process's torch.distributed group, which breaks later learners here
    actor = (
        ray_local.remote(VLLMEngine)
        .options(num_cpus=0.5)
        .remote(model_path, LORA, dtype="float32", max_model_len=256)
    )
    try:
        gap, base_gap = _engine_vs_learner(_Remote(actor), worker, weights)
    finally:
        ray_local.kill(actor)
    print(f"vLLM engine vs learner: max |Δ logprob| {gap:.2e} (vs the base model {base_gap:.2e})")
    assert base_gap > 1e-2, "the engine must apply the adapter"
    assert gap < ENGINE_TOL


def test_adapter_files_load_in_peft(model_path, trained, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from actors.lora_weights import write_peft_adapter

    worker, weights = trained
    folder = write_peft_adapter(tmp_path / "adapter", weights, LORA)
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(folder)).eval()
    seqs = _batch(5).seqs
    gap = _max_gap(_hf_logprobs(model, seqs), worker.logprobs(seqs), seqs.response_mask)
    print(f"PeftModel.from_pretrained vs learner: max |Δ logprob| {gap:.2e}")
    assert gap < REF_TOL


def test_loaded_adapter_weights_reproduce_the_trained_policy(model_path, trained):
    """``model.init_adapter``'s path: a fresh worker given another's adapter computes the same log-probs, and a
    tensor set that does not fit is refused."""
    worker, weights = trained
    fresh = _worker(model_path)
    seqs = _batch(6).seqs
    assert _max_gap(fresh.logprobs(seqs), worker.logprobs(seqs), seqs.response_mask) > REF_TOL
    fresh.load_adapter_weights(weights)
    assert _max_gap(fresh.logprobs(seqs), worker.logprobs(seqs), seqs.response_mask) < REF_TOL
    partial = dict(list(weights.items())[1:])
    with pytest.raises(ValueError, match="does not fit the policy"):
        fresh.load_adapter_weights(partial)


# -- 5. checkpoint ---------------------------------------------------------------------------------------------


def test_checkpoint_restores_optimizer_and_rng(model_path, tmp_path):
    """LoRA dropout 0.1 makes the training forward use the torch RNG, so an unrestored RNG changes the update;
    AdamW moments after two steps differ from those after one, so an unrestored optimizer does too."""
    lora = LoraSpec(rank=8, alpha=16, target_modules=("q_proj", "v_proj"), dropout=0.1)
    worker = _worker(model_path, lora=lora)
    first, second = _batch(6), _batch(7)
    _train(worker, first, steps=1)
    worker.save_checkpoint(str(tmp_path / "ckpt"))
    _train(worker, second, steps=1)
    lp_a, v_a = worker.logprobs(second.seqs), worker.values(second.seqs)
    _train(worker, second, steps=1)  # a third step moves away from the state to be restored
    worker.load_checkpoint(str(tmp_path / "ckpt"))
    _train(worker, second, steps=1)
    lp_b, v_b = worker.logprobs(second.seqs), worker.values(second.seqs)
    np.testing.assert_array_equal(lp_a, lp_b)
    np.testing.assert_array_equal(v_a, v_b)


# -- 6. ZeRO stages --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zero0(model_path):
    worker = _worker(model_path, zero_stage=0)
    batch = _batch(8)
    _train(worker, batch)
    return worker.logprobs(batch.seqs), worker.values(batch.seqs), worker.adapter_weights()


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_stage_matches_stage0(model_path, zero0, stage):
    batch = _batch(8)
    worker = _worker(model_path, zero_stage=stage)
    _train(worker, batch)
    lp0, v0, w0 = zero0
    gap_lp = _max_gap(worker.logprobs(batch.seqs), lp0, batch.seqs.response_mask)
    gap_v = float(np.abs(worker.values(batch.seqs) - v0).max())
    w = worker.adapter_weights()
    gap_w = max(float(np.abs(w[k] - w0[k]).max()) for k in w0)
    print(f"ZeRO {stage} vs 0: max |Δ logprob| {gap_lp:.2e}, |Δ value| {gap_v:.2e}, |Δ adapter| {gap_w:.2e}")
    assert set(w) == set(w0)
    assert gap_lp < ZERO_TOL
    assert gap_v < ZERO_TOL
    assert gap_w < ZERO_TOL


def test_zero3_refuses_accumulation_over_micro_batches(model_path):
    """Measured: with DeepSpeed 0.19.8's unmanaged accumulation, ZeRO-3 kept only part of a gradient accumulated
    over 3 micro-batches (every LoRA tensor 2·lr off after one step; 1 micro-batch matched stage 0 to 5e-8).
    The worker refuses that combination instead of training on a wrong gradient."""
    batch = _batch(8)
    worker = _worker(model_path, zero_stage=3)
    with pytest.raises(ValueError, match="ZeRO-3"):
        _train(worker, batch)


# -- 7. critic -------------------------------------------------------------------------------------------------


def test_critic_fits_targets_and_ignores_invalid(model_path):
    batch = _batch(9)
    valid = batch.value_valid
    moved = dataclasses.replace(
        batch, value_target=np.where(valid, batch.value_target, 1e6).astype(np.float32)
    )
    a, b = _worker(model_path), _worker(model_path)
    err0 = float(np.abs(a.values(batch.seqs) - batch.value_target)[valid].mean())
    for _ in range(5):
        a.update_critic(batch, hiper.value_loss, hiper.Config())
        b.update_critic(moved, hiper.value_loss, hiper.Config())
    va, vb = a.values(batch.seqs), b.values(batch.seqs)
    err = float(np.abs(va - batch.value_target)[valid].mean())
    print(f"critic: mean |V − y| over valid targets {err0:.3f} -> {err:.3f}")
    assert err < 0.5 * err0
    np.testing.assert_array_equal(va, vb)


# -- 8. target critic ------------------------------------------------------------------------------------------


def test_target_critic_lags_by_soft_updates_and_survives_a_checkpoint(model_path, tmp_path):
    """IQL's target copy (STEP-HRL Eq. 11-12): slots flagged ``value_from_target`` read it, not the critic; it starts
    equal to the critic, stays put without ``target_tau`` and after a step with τ it sits between the old and the
    new critic: with τ = 1 it equals the new one. A checkpoint restores it."""
    batch = _batch(10)
    both = dataclasses.replace(
        batch.seqs,
        value_pos=np.concatenate([batch.seqs.value_pos, batch.seqs.value_pos], axis=1),
        value_head=np.array([0, 1, 0, 1]),
        value_from_target=np.array([False, False, True, True]),
    )
    w = _worker(model_path, target_critic=True)
    v0 = w.values(both)
    np.testing.assert_array_equal(v0[:, :2], v0[:, 2:])  # target = critic at the start
    w.update_critic(batch, hiper.value_loss, hiper.Config())  # no soft update
    v1 = w.values(both)
    np.testing.assert_array_equal(v1[:, 2:], v0[:, 2:])  # target untouched
    assert np.abs(v1[:, :2] - v0[:, :2]).max() > 1e-3  # the critic moved
    w.save_checkpoint(str(tmp_path / "ckpt"))
    w.soft_update_target(1.0)
    np.testing.assert_allclose(w.values(both)[:, 2:], v1[:, :2], atol=1e-6)  # τ = 1: a copy of the critic
    w.load_checkpoint(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(w.values(both), v1)
    w.update_critic(batch, hiper.value_loss, hiper.Config(), target_tau=0.5)
    v2 = w.values(both)
    # a half step moves the target off where it was, and not all the way to the critic
    moved = np.abs(v2[:, 2:] - v0[:, 2:])
    assert moved.max() > 1e-4 and np.abs(v2[:, 2:] - v2[:, :2]).max() > 1e-4


# -- 9. several policy adapters on one base --------------------------------------------------------------------

TWO = (("planner", 1e-2), ("executor", 1e-2))


def test_two_adapters_train_apart_and_each_equals_a_single_adapter_learner(model_path, tmp_path):
    """Multi2's planner and executor as two LoRA adapters on one base, each with its own engine and AdamW state:
    a step of one leaves the other bit-identical; the executor's step equals the single-adapter learner's step
    from the same start (so one adapter's optimizer never sees the other's gradients or moments); a request for
    each adapter returns that adapter's log-probs; a checkpoint restores both."""
    batch = _batch(11)
    two, one = _worker(model_path, adapters=TWO), _worker(model_path)
    start = one.adapter_weights()
    two.load_adapter_weights(start, adapter="executor")
    assert set(two.adapter_weights("planner")) == set(start)  # PEFT key names, no adapter name inside
    planner0 = two.adapter_weights("planner")
    lp_planner0 = two.logprobs(batch.seqs, adapter="planner")

    for _ in range(2):
        two.update_policy(batch, grpo.ALGORITHM.policy_loss, LOSS_CFG, adapter="executor")
        one.update_policy(batch, grpo.ALGORITHM.policy_loss, LOSS_CFG)
    after = two.adapter_weights("planner")
    assert all(np.array_equal(after[k], planner0[k]) for k in planner0)  # untouched, bit for bit
    np.testing.assert_array_equal(two.logprobs(batch.seqs, adapter="planner"), lp_planner0)
    lp_exec = two.logprobs(batch.seqs, adapter="executor")
    gap = _max_gap(lp_exec, one.logprobs(batch.seqs), batch.seqs.response_mask)
    print(f"two-adapter executor vs single-adapter learner after 2 steps: max |Δ logprob| {gap:.2e}")
    assert gap < MICRO_TOL
    assert _max_gap(lp_exec, lp_planner0, batch.seqs.response_mask) > 1e-2  # the adapters now differ

    two.save_checkpoint(str(tmp_path / "ckpt"))
    import torch

    for name in ("planner", "executor"):  # each engine stores its own adapter, not the module's every adapter
        (states,) = (tmp_path / "ckpt" / f"policy_ds_{name}" / "ckpt").glob("mp_rank_*")
        saved = torch.load(states, map_location="cpu", weights_only=False)["module"]
        assert saved and {k.split("lora_")[1].split(".")[1] for k in saved} == {name}, sorted(saved)[:3]
    two.logprobs(batch.seqs, reference=True)  # peft's disable_adapter re-freezes all but one adapter on exit
    two.update_policy(batch, grpo.ALGORITHM.policy_loss, LOSS_CFG, adapter="planner")
    two.update_policy(batch, grpo.ALGORITHM.policy_loss, LOSS_CFG, adapter="executor")
    two.load_checkpoint(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(two.logprobs(batch.seqs, adapter="planner"), lp_planner0)
    np.testing.assert_array_equal(two.logprobs(batch.seqs, adapter="executor"), lp_exec)
    with pytest.raises(ValueError, match="no policy adapter 'policy'"):
        two.logprobs(batch.seqs, adapter="policy")


def test_two_adapters_served_at_once_by_the_hf_engine(model_path, trained):
    """The rollout engine holds both adapters; a request names its adapter and gets that adapter's log-probs,
    equal to the learner's for the same adapter."""
    from actors.hf_engine import HFEngine

    _, weights = trained
    two = _worker(model_path, adapters=TWO)
    two.load_adapter_weights(weights, adapter="executor")
    two.load_adapter_weights({k: 0.5 * v for k, v in weights.items()}, adapter="planner")  # another adapter
    engine = HFEngine(model_path, LORA, dtype="float32", adapters=("planner", "executor"))
    assert engine.load_adapter("planner", two.adapter_weights("planner"), 1)
    gap_exec, base_gap = _engine_vs_learner(_Named(engine, "executor"), _Named(two, "executor"), weights)
    gap_plan, _ = _engine_vs_learner(
        _Named(engine, "planner"), _Named(two, "planner"), two.adapter_weights("planner")
    )
    print(f"two adapters, HF engine vs learner: executor {gap_exec:.2e}, planner {gap_plan:.2e}")
    planner = two.logprobs(_batch(4).seqs, adapter="planner")
    executor = two.logprobs(_batch(4).seqs, adapter="executor")
    assert _max_gap(planner, executor, _batch(4).seqs.response_mask) > 1e-2  # two different policies served
    assert base_gap > 1e-2 and gap_exec < ENGINE_TOL
    # the planner's (halved) weights: measured 4.95e-5, exactly what one adapter with these weights gives through
    # the single-adapter learner and engine (fp32 rounding on less confident tokens), hence REF_TOL's bound
    assert gap_plan < REF_TOL


class _Named:
    """An engine or learner seen through one adapter name (what ``_engine_vs_learner`` calls "policy")."""

    def __init__(self, inner, name: str) -> None:
        self.inner, self.name = inner, name

    def load_adapter(self, _name, weights, version):
        return self.inner.load_adapter(self.name, weights, version)

    def generate(self, requests, params):
        import dataclasses as dc

        return self.inner.generate([dc.replace(r, adapter=self.name) for r in requests], params)

    def logprobs(self, seqs, reference=False):
        return self.inner.logprobs(seqs, reference=reference, adapter=None if reference else self.name)


# -- 10. reward models on the policy's base (HISR) --------------------------------------------------------------


def test_a_value_model_beside_the_critic_trains_alone_and_each_engine_loads_by_name(model_path, tmp_path):
    """HISR's SPRM is a second value model on the policy's base (its own adapter, Eq. 2 head and AdamW) beside the
    PPO critic, and its hindsight model a second policy adapter. A step of the SPRM leaves the critic's values and
    both adapters' log-probs bit for bit as they were, and a critic step the SPRM's values; each engine's
    checkpoint holds only its own tensors; ``only`` restores just the named engines."""
    import torch

    from learners.learner_spec import CriticSpec

    batch = _batch(13)
    seqs, resp = batch.seqs, batch.seqs.response_mask
    sprm = CriticSpec("sprm", 2, 16, 1e-2)  # 2 heads: the batch's value slots read heads 0 and 1
    worker = _worker(model_path, adapters=(("default", 1e-2), ("hindsight", 1e-2)), extra_critics=(sprm,))
    assert worker.critics["sprm"].module.backbone is worker.policy.module  # one copy of the base
    lp0, h0 = worker.logprobs(seqs), worker.logprobs(seqs, adapter="hindsight")
    v0, s0 = worker.values(seqs), worker.values(seqs, critic="sprm")

    worker.update_critic(batch, hiper.value_loss, hiper.Config(), critic="sprm")
    s1 = worker.values(seqs, critic="sprm")
    assert float(np.abs(s1 - s0).max()) > 1e-3
    np.testing.assert_array_equal(worker.values(seqs), v0)
    np.testing.assert_array_equal(worker.logprobs(seqs), lp0)
    np.testing.assert_array_equal(worker.logprobs(seqs, adapter="hindsight"), h0)
    worker.update_critic(batch, hiper.value_loss, hiper.Config())
    v1 = worker.values(seqs)
    assert float(np.abs(v1 - v0).max()) > 1e-3
    np.testing.assert_array_equal(worker.values(seqs, critic="sprm"), s1)

    worker.save_checkpoint(str(tmp_path / "ckpt"))
    (states,) = (tmp_path / "ckpt" / "critic_ds_sprm" / "ckpt").glob("mp_rank_*")
    saved = torch.load(states, map_location="cpu", weights_only=False)["module"]
    lora = {k.split("lora_")[1].split(".")[1] for k in saved if "lora_" in k}
    assert lora == {"sprm"} and any(k.startswith("head.") for k in saved), sorted(saved)[:3]
    for critic in ("sprm", None):  # move both away from the checkpoint
        worker.update_critic(batch, hiper.value_loss, hiper.Config(), critic=critic)
    v2 = worker.values(seqs)
    worker.load_checkpoint(str(tmp_path / "ckpt"), only=("sprm",))
    np.testing.assert_array_equal(worker.values(seqs, critic="sprm"), s1)
    np.testing.assert_array_equal(worker.values(seqs), v2)  # not named: left as it was
    worker.load_checkpoint(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(worker.values(seqs), v1)
    np.testing.assert_allclose(worker.logprobs(seqs, adapter="hindsight"), h0, rtol=0, atol=0)
    assert _max_gap(worker.logprobs(seqs), lp0, resp) == 0.0
    with pytest.raises(RuntimeError, match="no critic 'nope'; it has critic, sprm"):
        worker.values(seqs, critic="nope")
    with pytest.raises(ValueError, match="no adapter or critic 'nope' to load"):
        worker.load_checkpoint(str(tmp_path / "ckpt"), only=("nope",))


# -- 9. the critic on the policy's trunk (``learner.critic_trunk=policy``) --------------------------------------
# What is checked, and why it can fail: its values are the head applied to the policy's last hidden states (no
# critic adapter exists); one joint step (the head's values from the policy's own forward) equals a critic step
# then a policy step, and the policy it leaves equals a policy step alone: the value loss trains the head and never
# the policy (drop the ``detach`` in ``TrunkValueHead`` and the value loss's gradient lands on the policy's LoRA);
# the learner group takes the joint step (a group that stepped the critic after the policy would read the stepped
# trunk and end with other values); the head fits its targets and survives a checkpoint.

TRUNK = {"critic_trunk": "policy"}


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
