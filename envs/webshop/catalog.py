"""WebShop catalogue: product loading, synthetic/human goals and the BM25 search engine.

Follows WebShop (Yao et al. 2022, §3 and App. A) and the loader described in
``$HIERARL_SHARED/data/webshop/README.md``: products are cleaned the way the official ``load_products`` does
(Title/Description/BulletPoints/pricing/Price/options/Attributes), goals are built like ``get_synthetic_goals``
(one goal per option combination, price budget drawn from the next four multiples of $10 above the price) and
search is BM25 over ``title + description + first bullet point + option text`` (the official Lucene document).

Data files (looked up in this order inside the data folder):

* products: ``products.json`` (our 122-product excerpt), ``items_shuffle_1000.json`` (official small set),
  ``items_shuffle.json`` (official full catalogue, 1.18 M products).
* attributes: ``items_ins_v2_1000.json`` or ``items_ins_v2.json``.
* human goals (optional): ``items_human_ins.json``.

The official files come from princeton-nlp/WebShop's ``setup.sh``: ``./setup.sh -d small`` downloads the
1000-product files, ``./setup.sh -d all`` the full catalogue (Google Drive links inside that script); copy the
``data/*.json`` it writes into your ``WEBSHOP_DATA`` folder.  BM25 here is ``rank_bm25`` (pure Python): fine for
thousands of products; for the full catalogue use a Lucene index (pyserini) instead.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

SEARCH_RETURN_N = 50  # official SEARCH_RETURN_N: the engine returns at most 50 products
PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # official price-budget grid ($10 .. $990)
GOAL_SEED = 233  # AgentGym / official SimServer seed for goal sampling and shuffling
# Pyserini's default BM25 parameters (the official engine is a pyserini LuceneSearcher).
BM25_K1 = 0.9
BM25_B = 0.4

PRODUCT_FILES = ("products.json", "items_shuffle_1000.json", "items_shuffle.json")
ATTR_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_FILE = "items_human_ins.json"


def _words(text: str) -> list[str]:
    """Whitespace-separated word list (keeps long vocabularies readable)."""
    return text.split()


_STOPWORDS = frozenset(
    _words(
        "a an and are as at be but by for from if in into is it its no not of on or such that the their then "
        "there these they this to was will with i me my we our you your he she him her them what which who whom "
        "am been being have has had do does did would should could can may might must shall than too very just "
        "also only own same so some any each few more most other both all nor up down out over under again "
        "further once here when where why how about above below between through during before after off"
    )
)
_TOKEN = re.compile(r"[a-z0-9]+")


def default_data_dir() -> Path:
    """``WEBSHOP_DATA`` if set, else ``$HIERARL_SHARED/data/webshop`` (HIERARL_SHARED defaults to /work/shared)."""
    if os.environ.get("WEBSHOP_DATA"):
        return Path(os.environ["WEBSHOP_DATA"])
    return Path(os.environ.get("HIERARL_SHARED", "/work/shared")) / "data" / "webshop"


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric tokens without English stop words, with a light plural strip.

    Lucene's English analyzer (official engine) also drops stop words and Porter-stems; we strip a trailing
    ``s`` (not ``ss``) so that "tables" matches "table" without a full stemmer.
    """
    out = []
    for tok in _TOKEN.findall(text.lower()):
        if tok in _STOPWORDS:
            continue
        if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
            tok = tok[:-1]
        out.append(tok)
    return out


def _parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """Official rule: "" -> [100.0] / "$100.0"; "$a" -> [a] / "$a"; "$a$b" -> [a, b] / "$a to $b"."""
    if not pricing:
        return [100.0], "$100.0"
    prices = [float(re.sub(r"[^\d.]", "", part)) for part in str(pricing).split("$")[1:]]
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices[:2], f"${prices[0]} to ${prices[1]}"


def clean_product(raw: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """One raw ``items_shuffle`` record -> the fields the official engine keeps (see data README)."""
    pricing, price_tag = _parse_pricing(raw.get("pricing"))
    options: dict[str, list[str]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    bullets = raw.get("small_description") or []
    bullets = bullets if isinstance(bullets, list) else [bullets]
    ann = attrs.get(raw["asin"], {})
    return {
        "asin": raw["asin"],
        "category": raw.get("category", ""),
        "query": str(raw.get("query", "")).lower().strip(),
        "product_category": raw.get("product_category", "") or "",
        "name": raw.get("name", ""),
        "Title": raw.get("name", ""),
        "Description": raw.get("full_description", "") or "",
        "BulletPoints": [str(b) for b in bullets],
        "pricing": pricing,
        "Price": price_tag,
        "options": options,
        "Attributes": list(ann["attributes"]) if "attributes" in ann else ["DUMMY_ATTR"],
        "instruction_text": ann.get("instruction"),
        "instruction_attributes": ann.get("instruction_attributes"),
        # The official rating/reviews come from a reviews file that is not part of the released 1k data.
        "Rating": "N.A.",
        "Reviews": [],
    }


def search_document(p: dict[str, Any]) -> str:
    """The official Lucene document text: title, description, first bullet point and ``name: v1, v2`` options."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in p["options"].items())
    first_bullet = p["BulletPoints"][0] if p["BulletPoints"] else ""
    return " ".join([p["Title"], p["Description"], first_bullet, option_text]).lower()


def _price_upper(rng: random.Random, price: float) -> tuple[float, str]:
    """Official budget: two of the first four $10-multiples above the price, keep the larger one."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) >= 2:
        upper = max(rng.sample(candidates, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000.0, ""


def synthetic_goals(
    products: list[dict[str, Any]], prices: dict[str, float], rng: random.Random
) -> list[dict]:
    """``get_synthetic_goals``: one goal per option combination of every product with an instruction."""
    goals: list[dict[str, Any]] = []
    for p in products:
        if not p.get("instruction_text"):
            continue
        upper, price_text = _price_upper(rng, prices[p["asin"]])
        names = sorted(p["options"])
        for combo in itertools.product(*(p["options"][n] for n in names)):
            goal_options = dict(zip(names, combo, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = f" with {option_text}" if option_text else ""
            goals.append(
                {
                    "asin": p["asin"],
                    "category": p["category"],
                    "query": p["query"],
                    "name": p["Title"],
                    "product_category": p["product_category"],
                    "instruction_text": f"{p['instruction_text']}{option_text}{price_text}",
                    "attributes": list(p["instruction_attributes"]),
                    "price_upper": upper,
                    "goal_options": goal_options,
                }
            )
    return _add_weights(goals)


def human_goals(
    products: list[dict[str, Any]], prices: dict[str, float], human: dict[str, list], rng: random.Random
) -> list[dict]:
    """``get_human_goals``: one goal per crowd-sourced instruction with attributes (options as a value list)."""
    goals: list[dict[str, Any]] = []
    for p in products:
        for ins in human.get(p["asin"], []):
            if not ins.get("instruction_attributes"):
                continue
            upper, price_text = _price_upper(rng, prices[p["asin"]])
            goals.append(
                {
                    "asin": p["asin"],
                    "category": p["category"],
                    "query": p["query"],
                    "name": p["Title"],
                    "product_category": p["product_category"],
                    "instruction_text": ins["instruction"].strip(".") + price_text,
                    "attributes": list(ins["instruction_attributes"]),
                    "price_upper": upper,
                    "goal_options": list(ins.get("instruction_options", [])),
                }
            )
    return _add_weights(goals)


def _add_weights(goals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Official sampling weight: mean over a goal's attributes of 1 / (#goals using that attribute)."""
    count: dict[str, int] = defaultdict(int)
    for g in goals:
        for a in g["attributes"]:
            count[a] += 1
    for g in goals:
        g["weight"] = sum(1.0 / count[a] for a in g["attributes"]) / max(len(g["attributes"]), 1)
    return goals


@dataclass
class Catalog:
    """Products, sampled prices, goals and the BM25 index, built once per data folder and shared by envs."""

    products: list[dict[str, Any]]
    by_asin: dict[str, dict[str, Any]]
    prices: dict[str, float]
    goals: list[dict[str, Any]]
    goal_kind: str
    _bm25: Any = field(repr=False)

    def search(self, keywords: str) -> list[dict[str, Any]]:
        """Top ``SEARCH_RETURN_N`` products with a positive BM25 score, best first (ties by catalogue order)."""
        tokens = tokenize(keywords)
        if not tokens:
            return []
        scores = self._bm25.get_scores(tokens)
        order = np.argsort(-scores, kind="stable")
        return [self.products[i] for i in order[:SEARCH_RETURN_N] if scores[i] > 0]


def _first_existing(folder: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (folder / name).exists():
            return folder / name
    raise FileNotFoundError(f"none of {names} in {folder} (set WEBSHOP_DATA or pass data_dir)")


@lru_cache(maxsize=4)
def load_catalog(data_dir: str, goals: str = "synthetic", num_products: int | None = None) -> Catalog:
    """Load products, goals and the search index (cached: one build per process and data folder).

    Prices of products sold at a range ``$a$b`` are drawn uniformly in [a, b] like the official
    ``generate_product_prices``, but from ``random.Random(GOAL_SEED)`` so that every process sees the same
    prices, budgets and goal order; goals are then shuffled with a fresh ``Random(GOAL_SEED)`` (official SimServer).
    """
    from rank_bm25 import BM25Okapi  # the `hierarl[webshop]` extra

    folder = Path(data_dir)
    raw = json.loads(_first_existing(folder, PRODUCT_FILES).read_text())
    attrs = json.loads(_first_existing(folder, ATTR_FILES).read_text())
    if num_products is not None:
        raw = raw[:num_products]
    products: list[dict[str, Any]] = []
    seen: set[str] = set()
    for r in raw:
        asin = r.get("asin", "nan")
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(clean_product(r, attrs))
    rng = random.Random(GOAL_SEED)
    prices = {
        p["asin"]: p["pricing"][0] if len(p["pricing"]) == 1 else rng.uniform(*p["pricing"][:2])
        for p in products
    }
    if goals == "synthetic":
        goal_list = synthetic_goals(products, prices, rng)
    elif goals == "human":
        human = json.loads((folder / HUMAN_FILE).read_text())
        goal_list = human_goals(products, prices, human, rng)
    else:
        raise ValueError(f"goals must be 'synthetic' or 'human', got {goals!r}")
    random.Random(GOAL_SEED).shuffle(goal_list)
    bm25 = BM25Okapi([tokenize(search_document(p)) for p in products], k1=BM25_K1, b=BM25_B)
    return Catalog(products, {p["asin"]: p for p in products}, prices, goal_list, goals, bm25)
