"""The arithmetic behind ``bench_iteration.py`` (numpy only, unit-tested): what an RL iteration computes, pass by
pass, in tokens and FLOPs, and the floor the machine's measured peak puts under it.

FLOPs are counted for a Llama-style decoder as the learner and the HF engine run it:
* per token, 2 × (the decoder's matmul weights + the LoRA matrices): q, k, v, o, gate, up, down in each layer;
* attention, 2 × 2 × heads × head_dim × (positions attended, causal: the mean is (width + 1) / 2) per token and
  layer (QKᵀ and AV);
* the output layer (2 × hidden × vocab) only where a log-prob is read (the learner computes ``lm_head`` at the
  positions that predict a response token) or a token is sampled (the engine, once per generated token);
* a training pass (forward and backward through a frozen base: dX only, plus the LoRA gradients) as 2 forwards.
A pass computes its micro-batches cut to their longest row, so ``computed`` counts padding and ``useful`` does not.
A packed pass (``learner.pack=tree``) computes each pack's tree tokens once, its attention over the whole N × N tree
mask (a kernel given an arbitrary mask computes every pair), so ``computed`` is the packs' tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: dict, lora_rank: int = 0, lora_targets: Sequence[str] = ()) -> Shape:
        """From a HF ``config.json`` (Llama keys)."""
        heads = int(config["num_attention_heads"])
        return cls(
            hidden=int(config["hidden_size"]),
            intermediate=int(config["intermediate_size"]),
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads", heads)),
            head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
            vocab=int(config["vocab_size"]),
            lora_rank=lora_rank,
            lora_targets=tuple(lora_targets),
        )

    def _io(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection of a layer."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, f = self.hidden, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, f),
            "up_proj": (h, f),
            "down_proj": (f, h),
        }

    @property
    def matmul_weights(self) -> int:
        """Decoder weights every token multiplies (the embedding is a lookup; the output layer is counted apart)."""
        return self.layers * sum(i * o for i, o in self._io().values())

    @property
    def lora_weights(self) -> int:
        return self.layers * sum(
            self.lora_rank * (i + o) for n, (i, o) in self._io().items() if n in self.lora_targets
        )

    @property
    def weight_bytes_fp32(self) -> int:
        """What a decode step reads: the decoder's weights and the (tied) output layer, 4 bytes each."""
        return 4 * (self.matmul_weights + self.hidden * self.vocab)

    def forward_flops(self, rows: int, width: int, logit_positions: int, *, lora: bool = True) -> float:
        """One forward over ``rows`` rows cut to ``width`` columns, the output layer at ``logit_positions``."""
        per_token = 2 * (self.matmul_weights + (self.lora_weights if lora else 0))
        attention = 2 * 2 * self.heads * self.head_dim * (width + 1) / 2 * self.layers
        return rows * width * (per_token + attention) + logit_positions * 2 * self.hidden * self.vocab


@dataclass(frozen=True)
class Pass:
    """One named learner pass over some rows of the batch."""

    name: str
    phase: str
    """The updater's timed phase it runs in (``logprobs``, ``values``, ``update``, ``measure``)."""
    rows: int
    useful_tokens: int
    computed_tokens: int
    flops: float
    """Computed, padding included, × 2 for a training pass."""
    needed: bool
    """False when its output cannot change the update: π_old recomputed where the engine's log-probs are the same,
    π_ref while the reference is the policy, the diagnostic measure."""


def pass_cost(
    shape: Shape,
    lengths: np.ndarray,
    logits: np.ndarray,
    micro: list[np.ndarray],
    *,
    widths: np.ndarray | None = None,
    train: bool = False,
) -> tuple[int, int, float]:
    """(useful tokens, computed tokens, FLOPs) of a pass over micro-batches ``micro`` (row indices) of rows with
    ``lengths`` (int[B]) and ``logits`` output positions each (int[B]); ``widths``: the columns a row is computed to
    when fewer than its length (a critic's ``value_reach``)."""
    cols = lengths if widths is None else widths
    useful = computed = 0
    flops = 0.0
    for rows in micro:
        if rows.size == 0:
            continue
        width = int(cols[rows].max())
        useful += int(cols[rows].sum())
        computed += rows.size * width
        flops += shape.forward_flops(rows.size, width, int(logits[rows].sum()))
    return useful, computed, flops * (2 if train else 1)


def pack_flops(shape: Shape, tokens: int, logit_positions: int) -> float:
    """One forward over a pack of ``tokens`` tree tokens: each token's matmuls, attention to all ``tokens`` (the
    dense tree mask), the output layer at ``logit_positions``."""
    per_token = 2 * (shape.matmul_weights + shape.lora_weights)
    attention = 2 * 2 * shape.heads * shape.head_dim * tokens * shape.layers
    return tokens * (per_token + attention) + logit_positions * 2 * shape.hidden * shape.vocab


def packed_pass_cost(
    shape: Shape,
    lengths: np.ndarray,
    logits: np.ndarray,
    packs: list[tuple[np.ndarray, int]],
    *,
    train: bool = False,
) -> tuple[int, int, float]:
    """(useful tokens, computed tokens, FLOPs) of a pass over ``packs``, each (its rows, its tree tokens), of rows
    of ``lengths`` (the columns each row is packed to) and ``logits`` output positions each."""
    useful = int(sum(int(lengths[rows].sum()) for rows, _ in packs))
    computed = int(sum(tokens for _, tokens in packs))
    flops = sum(pack_flops(shape, tokens, int(logits[rows].sum())) for rows, tokens in packs)
    return useful, computed, flops * (2 if train else 1)


def sorted_micro_batches(cols: np.ndarray, size: int, rows: np.ndarray | None = None) -> list[np.ndarray]:
    """``learners.batch.micro_batches`` on lengths: ``rows`` (default all) longest first, in ⌈n / size⌉ near-equal
    parts."""
    rows = np.arange(len(cols)) if rows is None else np.asarray(rows)
    if rows.size == 0:
        return []
    order = rows[np.argsort(-cols[rows], kind="stable")]
    return list(np.array_split(order, -(-order.size // size)))


def group_pass_micro(
    cols: np.ndarray, micro: int, chunk: int, rows: np.ndarray | None = None
) -> list[np.ndarray]:
    """A forward pass through the learner group: chunks of ``chunk`` rows (longest first), each cut again into the
    worker's micro-batches (``LearnerGroup._map_rows``, one worker)."""
    out: list[np.ndarray] = []
    for part in sorted_micro_batches(cols, chunk, rows):
        out += sorted_micro_batches(cols, micro, part)
    return out


@dataclass(frozen=True)
class Round:
    """One ``engine.generate`` call of a turn-synchronous rollout: each row's prompt and response token counts."""

    prompts: tuple[int, ...]
    responses: tuple[int, ...]

    @property
    def batch(self) -> int:
        return len(self.prompts)

    @property
    def decode_steps(self) -> int:
        """The longest response: a static batch (HF ``generate``) decodes until every row has ended."""
        return max(self.responses)

    def active(self) -> list[int]:
        """Rows still decoding at each step (what a continuously batched engine computes)."""
        r = np.array(self.responses)
        return [int((r > s).sum()) for s in range(self.decode_steps)]


def rollout_rounds(episodes: Sequence[Sequence[tuple[int, int]]], slots: int) -> list[Round]:
    """The generate calls of a rollout whose episodes (each a list of (prompt, response) token counts per model
    call, in start order) run in ``slots`` env slots: every round each active episode makes its next call, and a slot
    an episode leaves takes the next episode at the following round (``actors.episodes.iter_episodes``)."""
    waiting = [list(e) for e in episodes if len(e)]
    active: list[list[tuple[int, int]]] = []
    rounds: list[Round] = []
    while waiting or active:
        while waiting and len(active) < slots:
            active.append(waiting.pop(0))
        calls = [e.pop(0) for e in active]
        rounds.append(Round(tuple(c[0] for c in calls), tuple(c[1] for c in calls)))
        active = [e for e in active if e]
    return rounds


def shared_prefix_tokens(prompts: Sequence[np.ndarray]) -> int:
    """Prompt tokens an ideal prefix cache would not compute again: each prompt's longest common prefix with any
    earlier prompt of the collection."""
    total = 0
    for i, p in enumerate(prompts):
        best = 0
        for q in prompts[:i]:
            n = min(p.size, q.size)
            diff = np.flatnonzero(p[:n] != q[:n])
            best = max(best, int(diff[0]) if diff.size else n)
        total += best
    return total


def rollout_floor_s(
    rounds: Sequence[Round], shape: Shape, peak_flop_s: float, read_b_s: float
) -> dict[str, float]:
    """Seconds the rollout's generation needs at the machine's bounds (merged weights: no LoRA): every prompt's own
    tokens at the matmul peak, and each decode step of a continuously batched engine at the larger of its compute
    (the rows still decoding; their attention left out, ~2 % at these lengths) and one read of the weights."""
    prefill = sum(shape.forward_flops(1, p, 0, lora=False) for r in rounds for p in r.prompts) / peak_flop_s
    step_flops = shape.forward_flops(1, 1, 1, lora=False)
    read = shape.weight_bytes_fp32 / read_b_s
    decode = sum(max(a * step_flops / peak_flop_s, read) for r in rounds for a in r.active())
    return {"prefill_s": prefill, "decode_s": decode, "total_s": prefill + decode}


def static_batch_work(rounds: Sequence[Round]) -> dict[str, int]:
    """Token slots a static left-padded batch computes (HF ``generate``) beside the tokens the rows own: prefill
    pads every prompt to the round's longest, decode runs every row for the round's longest response."""
    return {
        "prompt_tokens": sum(sum(r.prompts) for r in rounds),
        "prefill_slots": sum(r.batch * max(r.prompts) for r in rounds),
        "response_tokens": sum(sum(r.responses) for r in rounds),
        "decode_slot_steps": sum(r.batch * r.decode_steps for r in rounds),
    }
