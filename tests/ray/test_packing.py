"""Prefix-tree packing is the same computation as padded rows, on the real SmolLM2 in a real learner worker.

The rows are shaped like a group's (``_group_rows``): four turn-0 rows with one prompt, two of whose responses begin
alike, and two turn-1 rows with longer prompts. Each test runs one worker both ways, switching only how its decoder
is fed (``LearnerModels.tree_mask``: "" is the padded path the learner falls back to), so the weights are the same:

* every pass (π_old / π_ref log-probs, greedy match, entropies, values) gives each row the numbers it gets padded;
* one policy step (a PPO loss with each row's own advantage and old log-probs; BC's NLL) and one critic step
  accumulate the same LoRA and value-head gradients, and the joint step of a critic on the policy's trunk too.

What fails them (each applied and watched failing): a branch's positions one off and a mask that lets a node see
its sibling branch (causal over the pack's order) fail every test; a gather whose shared nodes carry their first
row's gradient only, and a shared response token that takes one row's advantage and old log-prob for every row
(``GRAD_TOL``), fail the step tests. ``test_the_tree_mask_is_what_the_model_applies`` shows that the model applies
the mask it is given rather than its own causal one.

Tolerances are fp32 on CPU: a pack multiplies other matrix shapes than padded rows (other summation orders).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

pytestmark = pytest.mark.slow

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")
pytest.importorskip("peft")

from common.lora import LoraSpec  # noqa: E402
from learners.algos import grpo, hiper, sft  # noqa: E402
from learners.batch import LearnerBatch, Sequences  # noqa: E402
from learners.losses import aggregation_weights  # noqa: E402
from learners.packing import build_pack, learner_tokens_ratio, plan_packs  # noqa: E402
from learners.value_model import adapter_of  # noqa: E402

LORA = LoraSpec(rank=8, alpha=16, target_modules=("q_proj", "v_proj"))

LOGPROB_TOL = 1e-4
"""|Δ log-prob| (and entropy) packed vs padded: measured 7.6e-6 (SmolLM2, fp32, AMD EPYC): the float rounding of
other matrix shapes through 30 layers."""
VALUE_TOL = 1e-4
"""|Δ value|: measured 3.6e-6 (a random head)."""
GRAD_TOL = 1e-3
"""max |Δ grad| ÷ max |grad| over the LoRA (and head) tensors: measured 4.2e-6 (PPO step), 1.4e-6 (BC), 1.0e-7
(critic), 3.8e-7 (joint) with this file alone, and the PPO step's 1.5e-4 inside the whole suite (the process's
torch state after the tests before it; the threshold sits below the smallest mutation's gap, 5.2e-3). A shared response token that takes one row's advantage and old log-prob for every row
moved it by 0.72 (PPO) and 5.2e-3 (joint); a shared node with its first row's gradient only, by 0.53 (PPO), 0.18
(BC), 1.6e-2 (critic) and 5.5e-3 (joint)."""


def _group_rows(tok) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, attention_mask, response_mask, value_pos) of six rows: turn 0 of four episodes (one prompt;
    episodes 0 and 1 answer with the same first words), turn 1 of episodes 0 and 1 (longer prompts that share the
    system text)."""
    system = "You craft items in Minecraft. Reply with one command.\nGoal: craft 4 sticks.\n"
    turn0 = system + "Inventory: nothing.\n"
    rows = [
        (turn0, "get 2 oak planks"),
        (turn0, "get 2 oak logs from the tree"),
        (turn0, "craft sticks"),
        (turn0, "inventory"),
        (system + "You did: get 2 oak planks. Got 2 oak planks.\n", "craft 4 sticks using 2 oak planks"),
        (system + "You did: get 2 oak logs. Could not find it.\n", "get 1 oak log"),
    ]
    eos = tok.eos_token_id
    seqs = [
        (tok.encode(p, add_special_tokens=False), [*tok.encode(r, add_special_tokens=False), eos])
        for p, r in rows
    ]
    width = max(len(p) + len(r) for p, r in seqs)
    ids = np.full((len(seqs), width), eos, np.int64)
    attn = np.zeros((len(seqs), width), bool)
    resp = np.zeros((len(seqs), width), bool)
    pos = np.zeros((len(seqs), 2), np.int64)
    for i, (p, r) in enumerate(seqs):
        ids[i, : len(p) + len(r)] = p + r
        attn[i, : len(p) + len(r)] = True
        resp[i, len(p) : len(p) + len(r)] = True
        pos[i] = (len(p) - 1, len(p) + len(r) - 1)
    return ids, attn, resp, pos


@pytest.fixture(scope="module")
def rows(tok):
    ids, attn, resp, pos = _group_rows(tok)
    # the rows are what the test claims: episodes 0 and 1 share response tokens, and the tree saves tokens
    assert (ids[0, resp[0]][:3] == ids[1, resp[1]][:3]).all() and not np.array_equal(ids[0], ids[1])
    assert learner_tokens_ratio(ids, attn, [np.arange(len(ids))]) < 0.6
    return ids, attn, resp, pos


def _seqs(rows) -> Sequences:
    ids, attn, resp, pos = rows
    return Sequences(ids, attn, resp, pos, np.array([0, 1]))


def _batch(rows, old_logprobs: np.ndarray) -> LearnerBatch:
    """Each row its own advantage (+1.5, −0.7, ...) and old log-probs off the current ones by its own amount, so a
    shared response token's loss differs per row (clipped on some, not others)."""
    ids, _, resp, _ = rows
    n = len(ids)
    adv = np.array([1.5, -0.7, 0.4, -1.2, 0.9, -0.3], np.float32)[:, None] * resp
    shift = np.array([0.05, -0.3, 0.0, 0.1, -0.05, 0.25], np.float32)[:, None] * resp
    valid = np.ones((n, 2), bool)
    return LearnerBatch(
        seqs=_seqs(rows),
        old_logprobs=(old_logprobs + shift).astype(np.float32),
        ref_logprobs=None,
        token_adv=adv.astype(np.float32),
        loss_mask=resp.copy(),
        value_target=np.linspace(-1, 1, 2 * n, dtype=np.float32).reshape(n, 2),
        value_valid=valid,
        old_values=np.zeros((n, 2), np.float32),
        loss_weight=aggregation_weights(torch.from_numpy(resp), "token-mean").numpy().astype(np.float32),
        value_weight=(valid / valid.sum()).astype(np.float32),
    )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = _free_port()
"""Every in-process worker's: they share one world-size-1 gloo group (``learners.distributed.init_dist``)."""


def _worker(model_path: str, **kw):
    from learners.learner_spec import LearnerSpec
    from learners.worker import LearnerWorker

    spec = {
        "model_path": model_path,
        "lora": LORA,
        "dtype": "float32",
        "zero_stage": 0,
        "actor_lr": 0.0,  # steps that move nothing: both paths take theirs from the same weights
        "critic_lr": 0.0,
        "max_grad_norm": 1e9,
        "micro_batch_size": 2,
        "pack": "tree",
        "pack_tokens": 48,  # three packs over these rows: several passes, cuts between them
        "minibatches": "groups",
        "gradient_checkpointing": False,
        "value_heads": 2,
        "seed": 0,
        "critic_trunk": "own",
        "master_port": PORT,
        **kw,
    }
    worker = LearnerWorker(LearnerSpec(**spec))
    assert worker.tree_mask == "bool"  # SmolLM2 runs SDPA: packs, not the fallback
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a LoRA and a head that compute something (B and the head start at 0)
        for n, p in worker.policy.module.named_parameters():
            if adapter_of(n) is not None:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
        for p in worker._critic_params():
            p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    return worker


@pytest.fixture(scope="module")
def model_path() -> str:
    from actors.models import resolve_model_path

    return resolve_model_path("smollm2")


@pytest.fixture(scope="module")
def worker(model_path):
    return _worker(model_path)


@contextmanager
def _padded(worker) -> Iterator[None]:
    """The worker's padded path (what it falls back to when a model takes no tree mask)."""
    mask, worker.tree_mask = worker.tree_mask, ""
    try:
        yield
    finally:
        worker.tree_mask = mask


def test_every_pass_gives_each_row_its_padded_numbers(worker, rows):
    seqs = _seqs(rows)
    resp = seqs.response_mask
    assert len(plan_packs(seqs.input_ids, seqs.attention_mask, 48)) == 3  # several passes, a cut in the group
    packed = {
        "logprobs": worker.logprobs(seqs),
        "reference": worker.logprobs(seqs, reference=True),
        "greedy": worker.greedy_match(seqs),
        "entropies": worker.entropies(seqs),
        "values": worker.values(seqs),
    }
    with _padded(worker):
        padded = {
            "logprobs": worker.logprobs(seqs),
            "reference": worker.logprobs(seqs, reference=True),
            "greedy": worker.greedy_match(seqs),
            "entropies": worker.entropies(seqs),
            "values": worker.values(seqs),
        }
    gaps = {k: float(np.abs(packed[k] - padded[k]).max()) for k in packed}
    print(f"packed vs padded: {gaps}")
    assert float(np.abs(packed["logprobs"] - packed["reference"])[resp].max()) > 0.1  # the LoRA computes
    assert float(np.abs(packed["values"]).min()) > 1e-2
    assert gaps["logprobs"] < LOGPROB_TOL and gaps["reference"] < LOGPROB_TOL
    assert gaps["entropies"] < LOGPROB_TOL and gaps["values"] < VALUE_TOL
    assert gaps["greedy"] == 0
    assert not packed["logprobs"][~resp].any()


def test_the_tree_mask_is_what_the_model_applies(worker, rows):
    """The same pack with the model's own causal mask over the pack's order (what a model that dropped the given
    mask would compute) is far from the padded rows: the tree mask is applied, not replaced."""
    from learners.packing import PackedRows

    ids, attn, _, _ = rows
    packed = PackedRows.of(build_pack(ids, attn), "cpu")
    decoder = worker.policy.module.get_base_model().get_decoder()
    with torch.no_grad(), worker._active(None):
        tree = worker._decoder_hidden(torch.from_numpy(ids), torch.from_numpy(attn), packed)
        causal = packed.rows(
            decoder(input_ids=packed.input_ids, position_ids=packed.position_ids).last_hidden_state
        )
        padded = worker._decoder_hidden(torch.from_numpy(ids), torch.from_numpy(attn))
    own = torch.from_numpy(attn)
    assert float((tree - padded)[own].abs().max()) < 1e-3
    assert float((causal - padded)[own].abs().max()) > 1.0


def _grads(params: list, step) -> list:
    """The gradients ``step`` accumulates into ``params`` over all its backward passes (hooks, summed)."""
    acc = [torch.zeros_like(p) for p in params]
    hooks = [p.register_hook(lambda g, a=a: a.add_(g)) for p, a in zip(params, acc, strict=True)]
    try:
        step()
    finally:
        for h in hooks:
            h.remove()
    return acc


def _rel_gap(a: list, b: list) -> float:
    scale = max(float(x.abs().max()) for x in a)
    assert scale > 0
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True)) / scale


@pytest.mark.parametrize("loss", ["ppo", "bc"])
def test_a_policy_step_accumulates_the_padded_gradient(worker, rows, loss):
    """GRPO's clipped loss with each row's own advantage and old log-probs, and BC's NLL (``update_policy`` with
    the sft loss, as the BC warm start runs it): the same LoRA gradient from the packs as from padded rows."""
    fn, cfg = (
        (grpo.ALGORITHM.policy_loss, grpo.Config(kl_coef=0.0))
        if loss == "ppo"
        else (sft.policy_loss, sft.Config())
    )
    batch = _batch(rows, worker.logprobs(_seqs(rows)))
    params = [p for n, p in worker.policy.module.named_parameters() if adapter_of(n) == "default"]
    before = [p.detach().clone() for p in params]
    metrics = {}

    def step():
        metrics.update(worker.update_policy(batch, fn, cfg))

    packed = _grads(params, step)
    ratio = metrics["learner_tokens_ratio"]
    with _padded(worker):
        padded = _grads(params, step)
    gap = _rel_gap(padded, packed)
    print(f"{loss} step: relative |Δ grad| {gap:.2e}, tree tokens ÷ row tokens {ratio:.3f}")
    assert all(torch.equal(p, b) for p, b in zip(params, before, strict=True))  # lr 0: the same weights
    assert ratio < 0.8 and metrics["learner_tokens_ratio"] > 1.0  # padded rows compute their padding
    assert gap < GRAD_TOL


def test_a_critic_step_accumulates_the_padded_gradient(worker, rows):
    batch = _batch(rows, np.zeros(rows[0].shape, np.float32))
    params = worker._critic_params()

    def step():
        worker.update_critic(batch, hiper.value_loss, hiper.Config())

    packed = _grads(params, step)
    with _padded(worker):
        padded = _grads(params, step)
    gap = _rel_gap(padded, packed)
    print(f"critic step: relative |Δ grad| {gap:.2e}")
    assert gap < GRAD_TOL


def test_a_joint_step_of_a_critic_on_the_policys_trunk_accumulates_the_padded_gradients(model_path, rows):
    worker = _worker(model_path, critic_trunk="policy")
    batch = _batch(rows, worker.logprobs(_seqs(rows)))
    params = [p for n, p in worker.policy.module.named_parameters() if adapter_of(n) == "default"]
    params += worker._critic_params()

    def step():
        worker.update_policy(
            batch, grpo.ALGORITHM.policy_loss, grpo.Config(kl_coef=0.0), None, hiper.value_loss
        )

    packed = _grads(params, step)
    with _padded(worker):
        padded = _grads(params, step)
    gap = _rel_gap(padded, packed)
    print(f"joint step: relative |Δ grad| {gap:.2e}")
    assert gap < GRAD_TOL
    assert float(packed[-1].abs().max()) > 0  # the head's gradient is in the comparison
