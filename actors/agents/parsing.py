"""Shared machinery of every agent protocol: tag parsing, char-span → token masks, chat-template rendering.

All protocols in the seeds write their decisions as XML-like blocks (``<think>``, ``<switch>``, ``<subgoal>``,
``<action>``, ``<reflection>``, ``<progress>``, ``<completion>``).  One scanner reads them all, with these rules
(the same for every protocol, so format penalties mean the same thing everywhere):

* Tag names match case-insensitively and tolerate inner whitespace (``< Action >``); contents are stripped.
* A block is an opening tag plus the *nearest* closing tag after it.  An opening tag with no closing tag after it
  is **unclosed**: its field stays ``None`` but its span runs to the end of the text (the tokens the model spent on
  it), and the parse is invalid.
* A tag that appears more than once is **repeated**: the *first* block is used (the model's first commitment) and
  the parse is invalid.  This is HiPER's "You MUST output EXACTLY THREE blocks" (001, App. C.3) applied to every
  protocol; a stray closing tag or an opening tag nested inside a block of the same name also invalidates.
* Required tags must be present, non-empty, in the protocol's order and not inside one another.  Text outside the blocks (whitespace, a
  polite preamble) does not invalidate; it is kept in ``ParseResult.outside_text``.
* Parsers never raise, whatever the input.

Spans are half-open character ranges ``(start, end)`` over the response text and include the tags themselves.
``char_spans_to_token_mask`` turns them into ``bool[R]`` masks over response tokens (``actors.trajectory``).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Message = dict[str, str]
"""One chat message: ``{"role": "system"|"user"|"assistant", "content": str}``."""

TAG_TO_MASK: dict[str, str] = {
    "think": "think_mask",
    "switch": "switch_mask",
    "subgoal": "subgoal_mask",
    "action": "action_mask",
    "reflection": "reflection_mask",
    "progress": "progress_mask",
    "completion": "completion_mask",
}
"""Tag name → mask name in ``actors.trajectory.MASK_NAMES``."""

_BOOL_WORDS = {"true": True, "false": False}
_QUOTES = "\"'`“”‘’"


@dataclass(frozen=True)
class TagFormat:
    """The blocks one protocol's response must contain, in order; ``optional`` tags may be absent."""

    tags: tuple[str, ...]
    optional: frozenset[str] = frozenset()


@dataclass
class ParseResult:
    """What a parser read from one response.  Never raised; ``valid`` False means a format violation.

    ``fields`` maps each tag found (closed) to its stripped content (first occurrence); ``spans`` maps each tag
    found to the span of that first block, tags included (unclosed: to the end of the text); ``errors`` lists every
    violation.  ``switch`` / ``completion`` are the typed readings of those tags (None when absent or not a legal
    word).  ``tags`` is the protocol's tag list, so masks for absent tags can still be emitted (all False).
    """

    text: str
    tags: tuple[str, ...]
    fields: dict[str, str] = field(default_factory=dict)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    outside_text: str = ""
    switch: bool | None = None
    completion: bool | None = None

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def error(self) -> str:
        return "; ".join(self.errors)

    def get(self, tag: str) -> str | None:
        return self.fields.get(tag)

    @property
    def action(self) -> str | None:
        return self.fields.get("action")

    @property
    def subgoal(self) -> str | None:
        return self.fields.get("subgoal")


@dataclass(frozen=True)
class _Block:
    start: int
    end: int
    content: str | None  # None when unclosed


@functools.cache
def _tag_regexes(name: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    esc = re.escape(name)
    return (
        re.compile(rf"<\s*{esc}\s*>", re.IGNORECASE),
        re.compile(rf"<\s*/\s*{esc}\s*>", re.IGNORECASE),
    )


def _scan(text: str, name: str) -> tuple[list[_Block], list[str]]:
    """All blocks of one tag, left to right, plus the violations met while pairing them."""
    open_re, close_re = _tag_regexes(name)
    opens = [(m.start(), m.end()) for m in open_re.finditer(text)]
    closes = [(m.start(), m.end()) for m in close_re.finditer(text)]
    blocks: list[_Block] = []
    errors: list[str] = []
    ci = 0
    pos = 0
    oi = 0
    while oi < len(opens):
        o_start, o_end = opens[oi]
        if o_start < pos:  # an opening tag inside the previous block's content
            errors.append(f"nested <{name}>")
            oi += 1
            continue
        while ci < len(closes) and closes[ci][0] < o_end:
            if closes[ci][0] >= pos:
                errors.append(f"stray </{name}>")
            ci += 1
        if ci == len(closes):
            blocks.append(_Block(o_start, len(text), None))
            errors.append(f"unclosed <{name}>")
            break
        c_start, c_end = closes[ci]
        blocks.append(_Block(o_start, c_end, text[o_end:c_start].strip()))
        pos = c_end
        ci += 1
        oi += 1
    if any(c[0] >= pos for c in closes[ci:]):
        errors.append(f"stray </{name}>")
    return blocks, errors


def parse_tagged(text: str, fmt: TagFormat) -> ParseResult:
    """Read ``fmt``'s blocks from ``text`` under the rules in the module docstring."""
    text = text if isinstance(text, str) else str(text)
    res = ParseResult(text=text, tags=fmt.tags)
    covered: list[tuple[int, int]] = []
    first_starts: list[tuple[int, str]] = []
    for name in fmt.tags:
        blocks, errors = _scan(text, name)
        res.errors.extend(errors)
        covered.extend((b.start, b.end) for b in blocks)
        if len(blocks) > 1:
            res.errors.append(f"repeated <{name}> ({len(blocks)} blocks)")
        if not blocks:
            if name not in fmt.optional:
                res.errors.append(f"missing <{name}>")
            continue
        first = blocks[0]
        res.spans[name] = (first.start, first.end)
        first_starts.append((first.start, name))
        if first.content is None:
            continue
        if not first.content:
            res.errors.append(f"empty <{name}>")
        res.fields[name] = first.content
    used = sorted((res.spans[name], name) for name in res.spans)
    for ((_, a_end), a), ((b_start, _), b) in itertools.pairwise(used):
        if b_start < a_end:
            res.errors.append(f"<{b}> inside <{a}>")
    order = [name for _, name in sorted(first_starts)]
    expected = [t for t in fmt.tags if t in res.spans]
    if order != expected:
        res.errors.append(f"blocks out of order: got {order}, expected {expected}")
    res.outside_text = _outside(text, covered)
    return res


def _outside(text: str, covered: Iterable[tuple[int, int]]) -> str:
    pieces: list[str] = []
    pos = 0
    for s, e in sorted(covered):
        if s > pos:
            pieces.append(text[pos:s])
        pos = max(pos, e)
    pieces.append(text[pos:])
    return " ".join(p.strip() for p in pieces if p.strip())


def _word(value: str) -> str:
    return value.strip().strip(_QUOTES).strip().rstrip(".").strip()


def read_switch(res: ParseResult) -> None:
    """HiPER q_t (001 Eq. 4): only KEEP or SWITCH (any case, quotes and a trailing period tolerated)."""
    raw = res.fields.get("switch")
    if raw is None:
        return
    word = _word(raw).upper()
    if word in ("KEEP", "SWITCH"):
        res.switch = word == "SWITCH"
    else:
        res.errors.append(f"<switch> must be KEEP or SWITCH, got {raw[:40]!r}")


def read_completion(res: ParseResult) -> None:
    """STEP-HRL / Multi2 completion flag: True or False (any case)."""
    raw = res.fields.get("completion")
    if raw is None:
        return
    word = _word(raw).lower()
    if word in _BOOL_WORDS:
        res.completion = _BOOL_WORDS[word]
    else:
        res.errors.append(f"<completion> must be True or False, got {raw[:40]!r}")


def format_blocks(fields: Mapping[str, str], order: Sequence[str], sep: str = "") -> str:
    """Canonical response text for ``fields`` (tags in ``order``, absent ones skipped): BC targets and tests."""
    return sep.join(f"<{t}>{fields[t]}</{t}>" for t in order if t in fields)


def normalize_ws(s: str | None) -> str:
    """Collapse whitespace runs; used to compare subgoals ("copy the exact current subgoal", 001 App. C.3)."""
    return " ".join((s or "").split())


def fallback_action(res: ParseResult, mode: str = "empty") -> str:
    """The env command sent for a parse: the ``<action>`` content when one was read (even if the parse is invalid
    for another reason); otherwise ``""`` (``mode="empty"``, the default: every adapter answers an empty command as
    an invalid action, ``envs/base.py``) or the whole raw response (``mode="raw"``, sent as-is to the env)."""
    action = res.fields.get("action")
    if action:
        return action
    return res.text.strip() if mode == "raw" else ""


# ---------------------------------------------------------------------------------------------------------------
# Char spans → token masks
# ---------------------------------------------------------------------------------------------------------------


def token_offsets_from_pieces(pieces: Sequence[str]) -> np.ndarray:
    """int64[R, 2] (start, end) char offsets of tokens whose decoded strings are ``pieces``, laid end to end.

    Exact when ``"".join(pieces)`` equals the response text the parser saw (decode pieces incrementally so that
    multi-byte characters split across tokens land on one token and the others get empty pieces).
    """
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    ends = np.cumsum(lengths)
    return np.stack([ends - lengths, ends], axis=1) if len(pieces) else np.zeros((0, 2), dtype=np.int64)


def char_spans_to_token_mask(
    token_offsets: Sequence[tuple[int, int]] | np.ndarray, spans: Iterable[tuple[int, int]], n_tokens: int
) -> np.ndarray:
    """bool[n_tokens]: True on every token whose chars ``[start, end)`` overlap any span ``[s, e)``.

    Overlap means ``start < e and s < end``, so a token straddling a tag boundary counts.  A zero-width token at
    position p (a byte-fallback piece of a multi-byte character decodes to "") counts when ``s <= p < e``, so it
    goes with the character that follows it.  Offsets beyond ``n_tokens`` are ignored; tokens without offsets
    (a trailing EOS the caller did not decode) are False.
    """
    n_tokens = max(int(n_tokens), 0)
    mask = np.zeros(n_tokens, dtype=bool)
    off = np.asarray(token_offsets, dtype=np.int64).reshape(-1, 2)[:n_tokens]
    span_arr = np.asarray(list(spans), dtype=np.int64).reshape(-1, 2)
    if off.size == 0 or span_arr.size == 0:
        return mask
    tok_start, tok_end = off[:, None, 0], np.maximum(off[:, None, 1], off[:, None, 0] + 1)
    hit = (tok_start < span_arr[None, :, 1]) & (span_arr[None, :, 0] < tok_end)
    mask[: off.shape[0]] = hit.any(axis=1)
    return mask


def masks_for_parse(
    res: ParseResult, token_offsets: Sequence[tuple[int, int]] | np.ndarray, n_tokens: int
) -> dict[str, np.ndarray]:
    """``{mask_name: bool[n_tokens]}`` for every tag of the protocol (all-False for a tag that is absent)."""
    return {
        TAG_TO_MASK.get(tag, f"{tag}_mask"): char_spans_to_token_mask(
            token_offsets, [res.spans[tag]] if tag in res.spans else [], n_tokens
        )
        for tag in res.tags
    }


# ---------------------------------------------------------------------------------------------------------------
# Prompt helpers
# ---------------------------------------------------------------------------------------------------------------


def render_prompt(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Prompt token ids: the tokenizer's own chat template plus the generation prompt (duck-typed: anything with
    ``apply_chat_template``).  The only function in ``actors.agents`` that touches a tokenizer."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def format_admissible(actions: Sequence[str]) -> str:
    """``'a', 'b', 'c'``: the list that goes between the brackets of ``[{admissible_actions}]`` (001 App. C.3)."""
    return ", ".join(f"'{a}'" for a in actions)


def strip_period(s: str) -> str:
    """Task text without a trailing period, for templates that add their own ("Your task is to: {task}.")."""
    return s.strip().rstrip(".").strip()
