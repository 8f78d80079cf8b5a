"""WebShop's product-matching reward (Yao et al. 2022, §3.2 "Reward", Eq. 1), as the official ``goal.py`` computes it.

    r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price]) / (|U_att| + |U_opt| + 1)

* attributes: a goal attribute matches when some product attribute has ``token_set_ratio > 85``, or the
  attribute string occurs in the title / bullet points / description (lower-cased);
* options: each *purchased* option value matches when it equals a goal option value (option ``size``) or has
  ``token_set_ratio > 85`` with one (other options), or occurs in the title / bullets / description; colour
  values are first normalised to the first colour word they contain;
* type: 1.0, or 0.5 when neither the query, >= 2 category levels nor > 20 % of the goal title's nouns match,
  0.1 when < 10 % of the nouns match, 0.0 when none do.

Two deliberate deviations, both documented where they act: nouns come from a stop-word filter instead of spaCy
``en_core_web_lg`` POS tags, and the total is clipped to [0, 1] (the official sum can pass 1 when the bought
product has more option groups than the goal).
"""

from __future__ import annotations

import re
from typing import Any

EXACT_MATCH_OPTS = ("size",)
FUZZY_THRESHOLD = 85  # official: a match needs token_set_ratio > 85


def _words(text: str) -> list[str]:
    """Whitespace-separated word list (keeps long vocabularies readable)."""
    return text.split()


# The colour vocabulary of WebShop's ``normalize.py`` (a fact of the benchmark: colour words it canonicalises).
COLOR_SET = _words(
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy "
    "camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral "
    "cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass "
    "gray green grey heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon "
    "mauve merlot midnight mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter "
    "pink plum purple rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone "
    "stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow"
)
_NOT_NOUN = frozenset(
    _words(
        "a an and are as at be but by for from if in into is it its no not of on or such that the their then "
        "there these they this to was will with without per plus new natural premium best great large small "
        "medium extra big mini free super ultra"
    )
)


def normalize_color(value: str) -> str:
    """The first word of ``COLOR_SET`` contained in ``value`` (substring test, list order), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def _full_process(text: str) -> str:
    """thefuzz ``full_process``: drop non-ASCII, non-alphanumerics -> space, lower-case, strip."""
    text = text.encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9]", " ", text).lower().strip()


def _indel_ratio(a: str, b: str) -> float:
    """``fuzz.ratio``: 100 * 2 * LCS(a, b) / (|a| + |b|) (normalised Indel similarity)."""
    if not a and not b:
        return 100.0
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return 200.0 * prev[-1] / (len(a) + len(b))


def token_set_ratio(s1: str, s2: str) -> int:
    """thefuzz ``fuzz.token_set_ratio``: best ``ratio`` among sorted intersection / intersection + rest pairs.

    With ``I`` the sorted common tokens and ``D1``/``D2`` each side's remaining tokens, the score is
    max(ratio(I, I+D1), ratio(I, I+D2), ratio(I+D1, I+D2)), rounded to an int; 100 if one token set contains the
    other, 0 if a side has no tokens.
    """
    t1, t2 = set(_full_process(s1).split()), set(_full_process(s2).split())
    if not t1 or not t2:
        return 0
    common = t1 & t2
    if common and (not t1 - t2 or not t2 - t1):
        return 100
    sect = " ".join(sorted(common))
    a = " ".join(x for x in (sect, " ".join(sorted(t1 - t2))) if x)
    b = " ".join(x for x in (sect, " ".join(sorted(t2 - t1))) if x)
    best = _indel_ratio(a, b)
    if sect:
        best = max(best, _indel_ratio(sect, a), _indel_ratio(sect, b))
    return round(best)


def _in_text(value: str, product: dict[str, Any]) -> bool:
    """Official fallback: the value occurs in the lower-cased title, bullet points or description."""
    return (
        value in product["Title"].lower()
        or value in " ".join(product["BulletPoints"]).lower()
        or value in product["Description"].lower()
    )


def _nouns(title: str) -> list[str]:
    """Noun stand-in for spaCy NOUN/PROPN tags: alphabetic words that are not stop words or common modifiers."""
    return [w for w in re.findall(r"[a-z][a-z'\-]*", title.lower()) if w not in _NOT_NOUN and len(w) > 1]


def type_reward(purchased: dict[str, Any], goal: dict[str, Any]) -> dict[str, Any]:
    """``r_type`` from query equality, >= 2 shared category levels and title-noun overlap (official rules)."""
    query_match = purchased["query"] == goal["query"]
    cat_p = {x.strip() for x in purchased["product_category"].split("›")}
    cat_g = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(cat_p & cat_g) >= 2
    desired = _nouns(goal["name"])
    got = set(_nouns(purchased["name"]))
    title_score = 0.2 if not desired else len(got & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": title_score,
    }


def attribute_matches(purchased: dict[str, Any], goal_attrs: list[str]) -> int:
    """How many goal attributes the purchased product has (fuzzy attribute match, else text containment)."""
    n = 0
    for g in goal_attrs:
        if any(token_set_ratio(p, g) > FUZZY_THRESHOLD for p in purchased["Attributes"]) or _in_text(
            g, purchased
        ):
            n += 1
    return n


def option_matches(purchased: dict[str, Any], goal_options: list[str], chosen: dict[str, str]) -> int:
    """How many chosen option values match a goal option value (exact for size, fuzzy else, or in text)."""
    goal_norm = [normalize_color(o) for o in goal_options]
    n = 0
    for name, value in chosen.items():
        v = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTS:
            matched = v in goal_norm
        else:
            matched = any(token_set_ratio(g, v) > FUZZY_THRESHOLD for g in goal_norm)
        if matched or _in_text(v, purchased):
            n += 1
    return n


def get_reward(
    purchased: dict[str, Any], goal: dict[str, Any], price: float, options: dict[str, str]
) -> tuple[float, dict[str, Any]]:
    """Eq. 1 of the paper: (attribute + option + price matches) / (#attrs + #options + 1), times ``r_type``."""
    goal_options = goal["goal_options"]
    goal_values = list(goal_options.values()) if isinstance(goal_options, dict) else list(goal_options)
    t = type_reward(purchased, goal)
    r_price = float(price <= goal["price_upper"]) if goal["price_upper"] > 0 else 0.0
    n_att = attribute_matches(purchased, goal["attributes"])
    n_opt = option_matches(purchased, goal_values, options)
    denom = len(goal["attributes"]) + len(goal_values) + 1
    total = (n_att + n_opt + r_price) / denom * t["r_type"]
    total = min(max(total, 0.0), 1.0)  # deviation: official code does not clip (see module docstring)
    info = {
        **t,
        "r_att": n_att / max(len(goal["attributes"]), 1),
        "r_option": n_opt / len(goal_values) if goal_values else None,
        "r_price": r_price,
        "num_attr_matches": n_att,
        "num_option_matches": n_opt,
        "denominator": denom,
    }
    return total, info
