"""DeepSpeed learner worker: the thin adapter between pure algorithm math and DeepSpeed/peft.

One worker = one data-parallel rank; the models and engines it holds (policy adapters, frozen reference copies,
critics on the shared base) are ``learners.worker_models.LearnerModels``. Where values are read
(``learners.batch``): head h of row b at the sequence position ``value_pos[b, h]``. HiPER reads V_high(s_t) and
V_low(s_t, o_{t-1}) at the last prompt token (the prompt holds the observation and the current subgoal o_{t-1}),
and V_low(s_t, o_t) at the last token of the new subgoal in the response.

The worker knows no algorithm: it receives typed batches (``learners.batch.Sequences`` for forward passes,
``LearnerBatch`` for updates) and the algorithm's pure policy and critic losses (``learners.algorithm``). Every
call names the adapter or critic it means; None is the policy's / the critic's.
"""

from __future__ import annotations

from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
import torch

from learners.algorithm import PolicyLossFn, ValueLossFn
from learners.batch import LearnerBatch, Sequences, micro_batches, row_lengths, value_reach
from learners.learner_spec import CRITIC_ADAPTER
from learners.losses import entropy_from_logprobs
from learners.packing import PackedRows, build_pack, plan_packs
from learners.targets import CriticInputs, PolicyInputs
from learners.worker_state import LearnerState

_Rows = TypeVar("_Rows", Sequences, LearnerBatch)


class Micro(NamedTuple, Generic[_Rows]):
    """One forward pass: the batch's ``rows``, cut to ``width`` columns (``part``), and their prefix tree when the
    learner packs (``learner.pack=tree``), else None (padded rows)."""

    rows: np.ndarray
    width: int
    part: _Rows
    packed: PackedRows | None
    tokens: int
    """Tokens the decoder computes: the pack's, or rows × width."""


ENTROPY_SAMPLE = 64
"""Response positions per training micro-batch whose entropy the ``entropy`` metric averages."""


class LearnerWorker(LearnerState):
    """Plain class; ``cluster.ray_cluster.place_workers`` wraps it with ``ray.remote``."""

    # -- forward passes ----------------------------------------------------------------------------------------

    def _response_logprobs(
        self,
        ids: torch.Tensor,
        attn: torch.Tensor,
        where: torch.Tensor,
        packed: PackedRows | None = None,
        *,
        entropy: bool = False,
        entropy_sample: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """float32[B, L]: log π(x_j | x_<j) at the positions ``where`` (bool[B, L]; 0 elsewhere).

        The decoder runs once and ``lm_head`` only at the positions that predict a wanted token: full-vocabulary
        logits over every prompt position (B × L × 49k floats) is what exhausted memory otherwise. With
        ``entropy`` also the token entropy at those positions (float32[N], no gradient); ``entropy_sample`` > 0:
        at most that many of them, evenly spaced (a metric's mean needs no more, and the full-vocabulary softmax
        cost ~19 % of a policy step on the tiny model). ``packed``: the rows' prefix tree, the decoder's input."""
        return self._logprobs_at(self._decoder_hidden(ids, attn, packed), ids, where, entropy, entropy_sample)

    def _logprobs_at(
        self, hidden: torch.Tensor, ids: torch.Tensor, where: torch.Tensor, entropy: bool, entropy_sample: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``_response_logprobs`` from the decoder's hidden states float[B, L, D]."""
        lm = self.policy.module.get_base_model()
        sel = where[:, 1:].bool()
        # log_softmax then gather, not logits − logsumexp: its fused forward and backward took ~40 % less time on
        # the CPU (fp32, 49k vocabulary), and the logits are not kept for backward (its own output is)
        logp = torch.log_softmax(lm.get_output_embeddings()(hidden[:, :-1][sel]).float(), dim=-1)
        picked = logp.gather(-1, ids[:, 1:][sel][:, None]).squeeze(-1)
        out = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        out[:, 1:][sel] = picked
        ent = None
        if entropy:
            with torch.no_grad():
                n = logp.shape[0]
                if 0 < entropy_sample < n:
                    logp = logp[torch.linspace(0, n - 1, entropy_sample, device=logp.device).long()]
                ent = entropy_from_logprobs(logp)
        return out, ent

    @torch.no_grad()
    def logprobs(self, seqs: Sequences, *, reference: bool = False, adapter: str | None = None) -> np.ndarray:
        """float32[B, L] log-probs of the response tokens (``response_mask``) under adapter ``adapter`` (None: the
        first policy adapter; a frozen reference copy allowed), or with every adapter disabled (``reference``)."""
        self.policy.eval()
        out = np.zeros(seqs.input_ids.shape, np.float32)
        for rows, width, s, packed, _ in self._micro_batches(seqs):
            ids, attn, where = self._dev(s.input_ids), self._dev(s.attention_mask), self._dev(s.response_mask)
            if reference:
                with self._reference():
                    lp, _ = self._response_logprobs(ids, attn, where, packed)
            else:
                with self._active(adapter):
                    lp, _ = self._response_logprobs(ids, attn, where, packed)
            out[rows, :width] = lp.cpu().numpy()
        return out

    @torch.no_grad()
    def greedy_match(self, seqs: Sequences, *, adapter: str | None = None) -> np.ndarray:
        """float32[B, L]: 1 where a response token is the policy's most likely next token given the text before it
        (under adapter ``adapter``; None: the first), 0 elsewhere. A response every token of which matches is what
        greedy decoding would write: the update replay splits its probe by whether the start policy already
        writes the expert's reply."""
        self.policy.eval()
        out = np.zeros(seqs.input_ids.shape, np.float32)
        lm = self.policy.module.get_base_model()
        for rows, width, s, packed, _ in self._micro_batches(seqs):
            ids, attn, where = self._dev(s.input_ids), self._dev(s.attention_mask), self._dev(s.response_mask)
            with self._active(adapter):
                hidden = self._decoder_hidden(ids, attn, packed)
                sel = where[:, 1:].bool()
                top = lm.get_output_embeddings()(hidden[:, :-1][sel]).argmax(dim=-1)
            match = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
            match[:, 1:][sel] = (top == ids[:, 1:][sel]).float()
            out[rows, :width] = match.cpu().numpy()
        return out

    @torch.no_grad()
    def entropies(self, seqs: Sequences) -> np.ndarray:
        """float32[B]: the policy's mean token entropy over each row's response tokens (0 for a row without any);
        HISR's entropy segmentation (``reward.segments.entropy_segments``) reads it per turn."""
        self.policy.eval()
        out = np.zeros(len(seqs), np.float32)
        for rows, _, s, packed, _ in self._micro_batches(seqs):
            where = self._dev(s.response_mask)
            _, ent = self._response_logprobs(
                self._dev(s.input_ids), self._dev(s.attention_mask), where, packed, entropy=True
            )
            assert ent is not None
            # ent lists the selected positions row by row; sum them back per row
            counts = where[:, 1:].sum(-1)
            row_of = torch.repeat_interleave(torch.arange(len(rows), device=ent.device), counts)
            sums = torch.zeros(len(rows), device=ent.device).index_add_(0, row_of, ent.float())
            out[rows] = (sums / counts.clamp(min=1)).cpu().numpy()
        return out

    @torch.no_grad()
    def values(self, seqs: Sequences, critic: str | None = None) -> np.ndarray:
        """float32[B, K] of critic ``critic`` (None: the critic): value slot k is head ``value_head[k]`` read at
        position ``value_pos[b, k]``, of the target critic where ``value_from_target[k]``."""
        name, engine = self._critic(critic)
        target = seqs.value_from_target
        if target is not None and target.any() and (self.critic_target is None or name != CRITIC_ADAPTER):
            raise RuntimeError("value slots read a target critic this learner does not keep (target_critic)")
        engine.eval()
        out = np.zeros((len(seqs), len(seqs.value_head)), np.float32)
        head = self._dev(seqs.value_head)
        with self._critic_active(name):
            for rows, _, s, packed, _ in self._micro_batches(seqs, critic=True):
                ids, attn, pos = self._dev(s.input_ids), self._dev(s.attention_mask), self._dev(s.value_pos)
                got = self._gather_values(self._critic_forward(name, engine, ids, attn, packed), pos, head)
                if target is not None and target.any():
                    with self._target_weights():
                        from_target = self._gather_values(
                            self._critic_forward(name, engine, ids, attn, packed), pos, head
                        )
                    got = torch.where(self._dev(target)[None, :], from_target, got)
                out[rows] = got.cpu().numpy()
        return out

    @staticmethod
    def _gather_values(v: torch.Tensor, pos: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
        """v float[B, L, H], pos int[B, K], head int[K] -> float[B, K]."""
        return v[torch.arange(v.shape[0], device=v.device)[:, None], pos, head[None, :]]

    # -- updates ---------------------------------------------------------------------------------------------

    def _micro_batches(
        self, record: _Rows, *, critic: bool = False, step: bool = False
    ) -> list[Micro[_Rows]]:
        """The forward passes over ``record``'s rows, a ``critic`` pass only as far as its value slots read
        (``learners.batch.value_reach``). Padded: ``micro_batch_size`` rows of similar length together, cut to
        their longest (``learners.batch.micro_batches``). Packed: rows in lexicographic order, each pass the prefix
        tree of as many as fit in ``pack_tokens`` tree tokens (``learners.packing.plan_packs``): the memory bound
        is the pack's tokens, not its rows. An optimizer ``step``'s passes under ZeRO-3 are one pack (it cannot
        accumulate over several, ``_check_zero3_accumulation``; its rows are one padded micro-batch otherwise)."""
        seqs = record.seqs if isinstance(record, LearnerBatch) else record
        reach = value_reach(seqs) if critic and self.spec.critic_reach else None
        if not self.tree_mask:
            chunks = micro_batches(seqs.attention_mask, self.spec.micro_batch_size, reach)
            return [
                Micro(rows, width, record.rows(rows).narrow(width), None, rows.size * width)
                for rows, width in chunks
            ]
        lengths = row_lengths(seqs.attention_mask) if reach is None else reach
        out = []
        budget = int(lengths.sum()) if step and self.spec.zero_stage == 3 else self.spec.pack_tokens
        for rows in plan_packs(seqs.input_ids, seqs.attention_mask, max(budget, 1), lengths):
            width = int(lengths[rows].max())
            part = record.rows(rows).narrow(width)
            pack = build_pack(seqs.input_ids[rows, :width], seqs.attention_mask[rows, :width], lengths[rows])
            out.append(Micro(rows, width, part, PackedRows.of(pack, self.policy.device), pack.tokens))
        return out

    def _check_zero3_accumulation(self, n_micro: int) -> None:
        """Measured here (tests/ray/test_learner.py): with DeepSpeed 0.19.8's unmanaged accumulation, ZeRO-3 drops
        part of a gradient accumulated over several backward() calls (stages 0-2 are exact). Refuse, don't corrupt."""
        if self.spec.zero_stage == 3 and n_micro > 1:
            raise ValueError(
                "ZeRO-3 with more than one micro-batch per step gives wrong gradients here; use learner.zero_stage "
                "1 or 2, or make learner.micro_batch_size >= the per-worker mini-batch"
            )

    def update_policy(
        self,
        batch: LearnerBatch,
        loss_fn: PolicyLossFn,
        loss_cfg: Any,
        adapter: str | None = None,
        value_loss: ValueLossFn | None = None,
        target_tau: float = 0.0,
    ) -> dict[str, float]:
        """One optimizer step of policy adapter ``adapter`` (None: the first) over ``batch`` (this rank's share of a
        mini-batch), in micro-batches. With ``value_loss`` (a critic on the policy's trunk only) the critic's head
        takes its step in the same pass: its values come from the policy's forward (``update_critic``'s loss and
        ``target_tau``, its ``value_loss`` metric returned beside the policy's).

        ``loss_fn(new_logprobs, PolicyInputs, cfg) -> (token_loss float[B, L], metrics)`` is the algorithm's pure
        per-token loss; it is aggregated with ``batch.loss_weight`` (float[B, L], computed once over the whole
        mini-batch by ``learners.losses.aggregation_weights``), so the accumulated gradient is the gradient of the
        mini-batch loss; × world size because DeepSpeed averages gradients over ranks.
        """
        if batch.loss_weight is None:
            raise ValueError("update_policy needs the mini-batch's loss_weight (set by the learner group)")
        engine = self._engine(adapter)
        engine.train()
        critic = None
        if value_loss is not None:
            if (
                not self._on_trunk(CRITIC_ADAPTER)
                or (adapter or self.adapter_names[0]) != self.adapter_names[0]
            ):
                raise ValueError("a joint policy and critic step needs the critic on this policy's trunk")
            if batch.value_weight is None:
                raise ValueError("update_policy with a value loss needs the mini-batch's value_weight")
            critic = self.critics[CRITIC_ADAPTER]
            critic.train()
            head = self._dev(batch.seqs.value_head)
        chunks = self._micro_batches(batch, step=True)
        self._check_zero3_accumulation(len(chunks))
        sums: dict[str, float] = {}
        tokens, value_total = 0.0, 0.0
        # forward and backward under the adapter: a checkpointed backward recomputes the forward
        with self._active(adapter):
            for _, _, micro, packed, _ in chunks:
                s = micro.seqs
                ids = self._dev(s.input_ids)
                hidden = self._decoder_hidden(ids, self._dev(s.attention_mask), packed)
                if critic is not None:
                    assert value_loss is not None
                    value_total += self._critic_backward(
                        critic, critic(hidden), micro, head, value_loss, loss_cfg
                    )
                new_lp, ent = self._logprobs_at(hidden, ids, self._dev(s.response_mask), True, ENTROPY_SAMPLE)
                inputs = PolicyInputs(
                    old_logprobs=self._dev(micro.old_logprobs),
                    token_adv=self._dev(micro.token_adv),
                    loss_mask=self._dev(micro.loss_mask),
                    ref_logprobs=None if micro.ref_logprobs is None else self._dev(micro.ref_logprobs),
                    behaviour_weight=None
                    if micro.behaviour_weight is None
                    else self._dev(micro.behaviour_weight),
                )
                token_loss, m = loss_fn(new_lp, inputs, loss_cfg)
                loss = (token_loss * self._dev(micro.loss_weight).float()).sum() * self.world_size
                engine.backward(loss)
                n = float(micro.loss_mask.sum())
                tokens += n
                m["entropy"] = float(ent.mean()) if ent is not None and ent.numel() else 0.0
                for k, v in m.items():
                    sums[k] = sums.get(k, 0.0) + float(v) * n
        lr = self._warm_up_lr(adapter or self.adapter_names[0])
        engine.step()
        self.step_count += 1
        metrics = {k: v / max(tokens, 1.0) for k, v in sums.items()}
        metrics["loss_tokens"] = tokens
        metrics["lr"] = lr
        metrics["learner_tokens_ratio"] = self._tokens_ratio(batch, chunks)
        if critic is not None:
            self._critic_step(critic, target_tau)
            metrics["value_loss"] = value_total
        return metrics

    def update_critic(
        self,
        batch: LearnerBatch,
        loss_fn: ValueLossFn,
        loss_cfg: Any,
        target_tau: float = 0.0,
        critic: str | None = None,
    ) -> dict[str, float]:
        """One optimizer step of critic ``critic`` (None: the critic) over the micro-batches of ``batch``.
        ``loss_fn(values float[B, K], CriticInputs, cfg)`` is the algorithm's pure critic loss
        (``learners.targets``' convention: weighted by ``batch.value_weight``, already normalised over the
        mini-batch, so micro-batch losses add up). ``target_tau`` > 0: the target copy is soft-updated after the
        step (the critic's only)."""
        name, engine = self._critic(critic)
        if batch.value_weight is None:
            raise ValueError("update_critic needs the mini-batch's value_weight (set by the learner group)")
        if target_tau > 0 and name != CRITIC_ADAPTER:
            raise ValueError(f"critic {name!r} keeps no target copy")
        engine.train()
        head = self._dev(batch.seqs.value_head)
        total = 0.0
        chunks = self._micro_batches(batch, critic=True, step=True)
        self._check_zero3_accumulation(len(chunks))
        with self._critic_active(name):
            for _, _, micro, packed, _ in chunks:
                s = micro.seqs
                values = self._critic_forward(
                    name, engine, self._dev(s.input_ids), self._dev(s.attention_mask), packed
                )
                total += self._critic_backward(engine, values, micro, head, loss_fn, loss_cfg)
        self._critic_step(engine, target_tau)
        return {"value_loss": total}

    @staticmethod
    def _tokens_ratio(batch: LearnerBatch, chunks: list[Micro[LearnerBatch]]) -> float:
        """The decoder tokens of a step's passes ÷ its rows' own tokens: below 1 where packs share prefixes, above
        1 where padded rows carry padding (``learner_tokens_ratio``)."""
        own = int(row_lengths(batch.seqs.attention_mask).sum())
        return sum(c.tokens for c in chunks) / max(own, 1)

    def _critic_backward(
        self,
        engine: Any,
        values: torch.Tensor,
        micro: LearnerBatch,
        head: torch.Tensor,
        loss_fn: ValueLossFn,
        loss_cfg: Any,
    ) -> float:
        """The critic loss of one micro-batch from its values float[B, L, H], backward through ``engine``."""
        v = self._gather_values(values, self._dev(micro.seqs.value_pos), head)
        inputs = CriticInputs(
            value_target=self._dev(micro.value_target),
            old_values=self._dev(micro.old_values),
            value_weight=self._dev(micro.value_weight),
        )
        loss, _ = loss_fn(v, inputs, loss_cfg)
        engine.backward(loss * self.world_size)
        return float(loss.detach())

    def _critic_step(self, engine: Any, target_tau: float) -> None:
        engine.step()
        if target_tau > 0:
            self.soft_update_target(target_tau)

    def ping(self) -> int:
        return self.rank
