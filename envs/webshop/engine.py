"""The WebShop site as a pure state machine: pages, clickables, ``search[...]`` / ``click[...]`` and text rendering.

Mirrors the official text environment (``web_agent_text_env.py``, observation mode ``"text"``): a page is the
visible text of its HTML template joined by `` [SEP] ``; clickables are the page's buttons, product links (ASINs)
and option radio values; option clicks store ``{option name: value}`` in the session; "Back to Search" clears
the session; "< Prev" goes from results to the previous results page, from an item to its results page and from
a sub-page (Description / Features / Reviews) to the item; "Buy Now" ends the episode with the reward of
``reward.get_reward``.  One difference: ``search[...]`` is accepted only where the search box is shown (the
official simulator also runs it from other pages, but never lists it there as available).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from envs.webshop.catalog import Catalog, tokenize
from envs.webshop.reward import get_reward

SEP = " [SEP] "
PRODUCT_WINDOW = 10  # official: 10 products per results page
MAX_ACTION_CHARS = 500  # longer strings are rejected (longest real action ~230 chars)
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, END_BUTTON = "Back to Search", "Next >", "< Prev", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
SEARCH_PAGE, RESULTS_PAGE, ITEM_PAGE, SUB_PAGE, DONE_PAGE = "search", "results", "item", "item_sub", "done"

_ACTION = re.compile(r"(search|click)\[(.*)\]", re.IGNORECASE | re.DOTALL)


@dataclass
class Session:
    """Everything one shopping episode remembers (the official ``user_sessions[id]`` plus the current page)."""

    page: str = SEARCH_PAGE
    keywords: str = ""
    results: list[str] = field(default_factory=list)  # ASINs returned by the last search, best first
    result_page: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str = ""
    searched: list[str] = field(default_factory=list)  # every query of the episode, in order
    reward: float = 0.0
    reward_info: dict[str, Any] | None = None


@dataclass(frozen=True)
class Clickable:
    """A clickable element: its display text, what it does (``kind``) and its payload (ASIN / option name)."""

    text: str
    kind: str  # "back" | "next" | "prev" | "product" | "option" | "sub" | "buy"
    payload: str = ""


def parse_action(action: Any) -> tuple[str, str] | str:
    """``(verb, argument)`` for a well-formed ``search[...]`` / ``click[...]``, else the reason it is invalid."""
    if not isinstance(action, str):
        return "the action must be a string"
    action = action.strip()
    if not action:
        return "empty action"
    if len(action) > MAX_ACTION_CHARS:
        return f"action longer than {MAX_ACTION_CHARS} characters"
    m = _ACTION.fullmatch(action)
    if m is None:
        return "actions are search[<query>] or click[<element>]"
    verb, arg = m.group(1).lower(), m.group(2).strip()
    if not arg:
        return f"{verb}[] needs an argument"
    if "[" in arg or "]" in arg or any(unicodedata.category(c).startswith("C") for c in arg):
        return "brackets and control characters are not allowed inside an action"
    return verb, arg


def clickables(s: Session, cat: Catalog) -> dict[str, Clickable]:
    """Lower-cased text -> clickable on the current page (official order: buttons and links, then options)."""
    items: list[Clickable] = []
    if s.page == RESULTS_PAGE:
        items.append(Clickable(BACK_TO_SEARCH, "back"))
        if s.result_page > 1:
            items.append(Clickable(PREV_PAGE, "prev"))
        if s.result_page * PRODUCT_WINDOW < len(s.results):
            items.append(Clickable(NEXT_PAGE, "next"))
        items += [Clickable(a, "product", a) for a in _page_asins(s)]
    elif s.page == ITEM_PAGE:
        items += [Clickable(BACK_TO_SEARCH, "back"), Clickable(PREV_PAGE, "prev")]
        items += [Clickable(name, "sub") for name in SUB_PAGES]
        items.append(Clickable(END_BUTTON, "buy"))
        for name, values in cat.by_asin[s.asin]["options"].items():
            items += [Clickable(v, "option", name) for v in values]
    elif s.page == SUB_PAGE:
        items += [Clickable(BACK_TO_SEARCH, "back"), Clickable(PREV_PAGE, "prev")]
    # Later entries win on equal text, as in the official dict (an option value shared by two groups).
    return {c.text.lower(): c for c in items}


def admissible_actions(s: Session, cat: Catalog) -> list[str]:
    """``search[<query>]`` where the search box is shown, plus ``click[<text>]`` for every clickable."""
    acts = ["search[<query>]"] if s.page == SEARCH_PAGE else []
    return acts + [f"click[{c.text}]" for c in clickables(s, cat).values()]


def _page_asins(s: Session) -> list[str]:
    start = (s.result_page - 1) * PRODUCT_WINDOW
    return s.results[start : start + PRODUCT_WINDOW]


def step_session(s: Session, cat: Catalog, goal: dict[str, Any], action: Any) -> str | None:
    """Apply one action to ``s`` in place; returns ``None`` if it was applied, else why it is invalid."""
    parsed = parse_action(action)
    if isinstance(parsed, str):
        return parsed
    verb, arg = parsed
    if s.page == DONE_PAGE:
        return "the purchase is done"
    if verb == "search":
        if s.page != SEARCH_PAGE:
            return "there is no search box on this page (click Back to Search first)"
        keywords = arg.lower()
        if not tokenize(keywords):
            return "the query has no searchable words"
        s.keywords, s.result_page, s.asin, s.options = keywords, 1, None, {}
        s.results = [p["asin"] for p in cat.search(keywords)]
        s.searched.append(keywords)
        s.page = RESULTS_PAGE
        return None
    target = clickables(s, cat).get(arg.lower())
    if target is None:
        return f"no clickable element {arg!r} on this page"
    if target.kind == "back":
        s.page, s.keywords, s.results, s.result_page, s.asin, s.options = SEARCH_PAGE, "", [], 1, None, {}
    elif target.kind == "next":
        s.result_page += 1
    elif target.kind == "prev" and s.page == RESULTS_PAGE:
        s.result_page -= 1
    elif target.kind == "prev" and s.page == ITEM_PAGE:
        s.page, s.asin, s.options = RESULTS_PAGE, None, {}  # the results page resets asin and options
    elif target.kind == "prev":
        s.page = ITEM_PAGE
    elif target.kind == "product":
        s.page, s.asin, s.options = ITEM_PAGE, target.payload, {}
    elif target.kind == "option":
        s.options[target.payload] = target.text
    elif target.kind == "sub":
        s.page, s.sub_page = SUB_PAGE, target.text
    elif target.kind == "buy":
        assert s.asin is not None
        s.reward, s.reward_info = get_reward(cat.by_asin[s.asin], goal, cat.prices[s.asin], dict(s.options))
        s.page = DONE_PAGE
    return None


def render(s: Session, cat: Catalog, instruction: str) -> str:
    """The page's visible texts joined by `` [SEP] `` (official ``convert_html_to_text(simple=True)``)."""
    head = ["Instruction:", instruction]
    if s.page == SEARCH_PAGE:
        parts = ["WebShop", *head, "Search"]
    elif s.page == RESULTS_PAGE:
        parts = [*head, BACK_TO_SEARCH, f"Page {s.result_page} (Total results: {len(s.results)})"]
        parts += [c.text for c in clickables(s, cat).values() if c.kind in ("prev", "next")]
        for asin in _page_asins(s):
            p = cat.by_asin[asin]
            parts += [asin, p["Title"], p["Price"]]
    elif s.page == ITEM_PAGE:
        p = cat.by_asin[s.asin]
        parts = [*head, BACK_TO_SEARCH, PREV_PAGE]
        for name, values in p["options"].items():
            parts += [name, *values]
        parts += [p["Title"], f"Price: {p['Price']}", f"Rating: {p['Rating']}", *SUB_PAGES, END_BUTTON]
    elif s.page == SUB_PAGE:
        p = cat.by_asin[s.asin]
        parts = [*head, BACK_TO_SEARCH, PREV_PAGE]
        if s.sub_page == "Description":
            parts.append(p["Description"])
        elif s.sub_page == "Features":
            parts += p["BulletPoints"]
        else:
            for r in p["Reviews"]:
                parts += [f'"{r.get("title", "")}"', str(r.get("score", "")), r.get("body", "")]
    else:
        parts = ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", str(s.reward)]
    return SEP.join(t for t in (str(x).strip() for x in parts) if t)
