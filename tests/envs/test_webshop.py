"""Tests of the text-mode WebShop engine (envs/webshop): pages, actions, the official reward and the expert.

Data: ``$HIERARL_SHARED/data/webshop`` (default /work/shared); every data test is skipped when it is missing.
The catalogue and BM25 index are built once per process (``load_catalog`` is cached) and shared by the module.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from envs.base import INFO_KEYS, make
from envs.webshop import WebShopEnv
from envs.webshop.catalog import load_catalog, tokenize
from envs.webshop.engine import MAX_ACTION_CHARS, parse_action
from envs.webshop.reward import get_reward, normalize_color, token_set_ratio, type_reward

DATA = Path(os.environ.get("HIERARL_SHARED", "/work/shared")) / "data" / "webshop"
needs_data = pytest.mark.skipif(not (DATA / "products.json").exists(), reason=f"WebShop data not at {DATA}")
REPO = Path(__file__).resolve().parents[2]

# Task 13 (synthetic goals, Random(233) order): QualGear HDMI cable B01MQH5VGR, attributes
# ["gold plated", "high speed"], goal option {size: "40 feet"}, budget $70 (price $39.45). 2 + 1 + 1 = 4 terms.
HDMI_TASK = "13"


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    if not (DATA / "products.json").exists():
        pytest.skip(f"WebShop data not at {DATA}")
    return WebShopEnv(data_dir=DATA, split="test")


def run(env: WebShopEnv, actions: list[str]) -> tuple[str, float, bool, bool, dict]:
    out = None
    for a in actions:
        out = env.step(a)
    assert out is not None
    return out


# --------------------------------------------------------------------------- pure reward pieces (no data)
def test_token_set_ratio_golden() -> None:
    assert token_set_ratio("rubber sole", "sole rubber") == 100  # same token set
    assert token_set_ratio("rubber", "rubber sole") == 100  # one set contains the other
    assert token_set_ratio("", "rubber") == 0  # no tokens on one side
    # {abc} vs {abd}: no common token, ratio("abc", "abd") = 2*LCS/(3+3) = 2*2/6 = 66.67 -> 67
    assert token_set_ratio("abc", "abd") == 67
    # common "rubber"; a = "rubber sole" (11), b = "rubber soles" (12): LCS 11 -> 2*11/23 = 95.65 -> 96;
    # ratio("rubber", a) = 2*6/17 = 70.6 -> max is 96 (> 85: a fuzzy match)
    assert token_set_ratio("rubber sole", "rubber soles") == 96
    # punctuation and case are dropped first (thefuzz full_process): "Water-Resistant" == "water resistant"
    assert token_set_ratio("Water-Resistant", "water resistant") == 100


def test_token_set_ratio_matches_thefuzz_reference() -> None:
    fuzz = pytest.importorskip("thefuzz.fuzz")
    import random

    rng = random.Random(0)
    words = [
        "rubber",
        "sole",
        "soles",
        "black",
        "navy",
        "x-large",
        "large",
        "9.5",
        "gluten",
        "free",
        "pack",
        "12",
    ]
    for _ in range(3000):
        a = " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))
        b = " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))
        assert token_set_ratio(a, b) == fuzz.token_set_ratio(a, b), (a, b)


def test_normalize_color() -> None:
    assert normalize_color("black forest") == "black"
    assert normalize_color("violet lavender") == "lavender"  # "lavender" precedes "violet" in the colour list
    assert normalize_color("123alabaster") == "alabaster"  # substring test
    assert normalize_color("webshop") == "webshop"  # no colour word: unchanged


PRODUCT = {
    "Title": "Acme Trail Running Shoe",
    "BulletPoints": ["Breathable mesh upper"],
    "Description": "A light shoe.",
    "Attributes": ["lace closure", "rubber sole"],
    "query": "running shoes",
    "product_category": "Clothing › Shoes › Running",
    "name": "Acme Trail Running Shoe",
}
GOAL = {
    "attributes": ["lace closure", "rubber soles"],
    "goal_options": {"color": "navy", "size": "9.5"},
    "price_upper": 50.0,
    "query": "running shoes",
    "product_category": "Clothing › Shoes › Running",
    "name": "Acme Trail Running Shoe",
}


def test_reward_golden_full_match() -> None:
    # attributes: "lace closure" exact, "rubber soles" fuzzy 96 > 85 -> 2; options navy, 9.5 -> 2; price 40 <= 50 -> 1
    # (2 + 2 + 1) / (2 + 2 + 1) = 1.0, r_type = 1 (same query)
    r, info = get_reward(PRODUCT, GOAL, 40.0, {"color": "navy", "size": "9.5"})
    assert r == 1.0 and info["r_type"] == 1.0 and info["denominator"] == 5


def test_reward_golden_wrong_option_and_price() -> None:
    # a wrong size is an exact-match miss and "10" is not in the text: (2 + 1 + 1) / 5 = 0.8
    r, info = get_reward(PRODUCT, GOAL, 40.0, {"color": "navy", "size": "10"})
    assert r == pytest.approx(0.8, abs=1e-12) and info["num_option_matches"] == 1
    # a wrong colour: token_set_ratio(red, navy) and (red, 9.5) are far below 86: (2 + 1 + 1) / 5 = 0.8
    assert get_reward(PRODUCT, GOAL, 40.0, {"color": "red", "size": "9.5"})[0] == pytest.approx(
        0.8, abs=1e-12
    )
    # options never chosen: (2 + 0 + 1) / 5 = 0.6
    assert get_reward(PRODUCT, GOAL, 40.0, {})[0] == pytest.approx(0.6, abs=1e-12)
    # over budget: 60 > 50 -> price term 0: (2 + 2 + 0) / 5 = 0.8
    assert get_reward(PRODUCT, GOAL, 60.0, {"color": "navy", "size": "9.5"})[0] == pytest.approx(
        0.8, abs=1e-12
    )
    # a wrong colour that occurs in the product text still counts (official fallback): "mesh" in the bullets
    assert get_reward(PRODUCT, GOAL, 40.0, {"color": "mesh", "size": "9.5"})[0] == 1.0


def test_type_reward_levels() -> None:
    other = {"query": "x", "product_category": "Garden › Tools"}
    # goal nouns (stop-word filter): acme, trail, running, shoe -> 4
    same = type_reward({**other, "name": "Acme Trail Running Shoe"}, GOAL)
    assert same["r_type"] == 1.0 and same["title_score"] == 1.0  # 4/4 > 0.2 matches without query/category
    # 1 shared noun of the 4 -> 0.25 > 0.2: still a type match
    assert type_reward({**other, "name": "Running Mat"}, GOAL)["r_type"] == 1.0
    long_goal = {**GOAL, "name": "Acme Trail Running Shoe Mesh Upper Lace Kit"}  # 8 nouns
    # 1/8 = 0.125: no query, category or title match -> 0.5 (and 0.125 >= 0.1 so not 0.1)
    assert type_reward({**other, "name": "Acme Bottle"}, long_goal)["r_type"] == 0.5
    # no shared noun -> title_score 0 -> r_type 0.0, so the whole reward is 0
    assert type_reward({**other, "name": "Garden Hose"}, GOAL)["r_type"] == 0.0
    bad = {**PRODUCT, **other, "name": "Garden Hose", "Title": "Garden Hose"}
    assert get_reward(bad, GOAL, 10.0, {"color": "navy", "size": "9.5"})[0] == 0.0


def test_parse_action_rejects_bad_strings() -> None:
    assert parse_action("search[red shoes]") == ("search", "red shoes")
    assert parse_action("  CLICK[Buy Now] ") == ("click", "Buy Now")
    for bad in [
        "",
        "   ",
        None,
        42,
        "buy",
        "click[]",
        "search[ ]",
        "search[x]; rm -rf /",
        "click[Buy Now] click[Buy Now]",
        "search[a] search[b]",
        "click[buy now\x00]",
        "search[" + "a" * MAX_ACTION_CHARS + "]",
    ]:
        assert isinstance(parse_action(bad), str), bad


def test_tokenize() -> None:
    assert tokenize("The Console TABLES, for 2 rooms!") == ["console", "table", "2", "room"]
    assert tokenize("日本語 ???") == []


# --------------------------------------------------------------------------- the environment
@needs_data
def test_catalog_counts_and_splits(env: WebShopEnv) -> None:
    cat = env.catalog
    assert len(cat.products) == 122 and len(cat.goals) == 839  # README: 55 products with instructions -> 839
    test, ev, train = env.task_ids("test"), env.task_ids("eval"), env.task_ids("train")
    assert (len(test), len(ev), len(train)) == (100, 100, 639)
    assert test[0] == "0" and ev[0] == "100" and train[-1] == "838"
    assert set(test).isdisjoint(ev) and set(ev).isdisjoint(train)
    assert env.task_ids() == test and len(env.task_ids("all")) == 839
    assert all(0 < g["weight"] <= 1 for g in cat.goals)


@needs_data
def test_make_registry() -> None:
    e = make("webshop", data_dir=DATA, split="eval", max_steps=7)
    assert isinstance(e, WebShopEnv) and e.max_steps == 7 and e.split == "eval"


@needs_data
def test_reset_and_info_keys(env: WebShopEnv) -> None:
    obs, info = env.reset(task_id="3")
    assert set(INFO_KEYS) <= set(info)
    goal = env.catalog.goals[3]
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal['instruction_text']} [SEP] Search"
    assert info["task"] == goal["instruction_text"] and info["task_id"] == "3"
    assert info["task_type"] == goal["category"] == "fashion" and info["split"] == "test"
    assert info["admissible_actions"] == ["search[<query>]"]
    assert info["valid_action"] is True and info["won"] is False and info["score"] == 0.0
    assert env.reset(task_id="500")[1]["split"] == "train"  # any goal id is accepted; its split is reported
    with pytest.raises(ValueError):
        env.reset(task_id="839")


@needs_data
def test_results_page_and_pagination(env: WebShopEnv) -> None:
    env.reset(task_id="0")
    obs, r, term, trunc, info = env.step("search[women shirt]")
    n = len(env.catalog.search("women shirt"))
    assert 20 < n <= 50 and r == 0.0 and not term and not trunc and info["valid_action"]
    assert f"Back to Search [SEP] Page 1 (Total results: {n}) [SEP] Next > [SEP] B" in obs
    acts = info["admissible_actions"]
    assert acts[:2] == ["click[Back to Search]", "click[Next >]"] and len(acts) == 2 + 10
    assert "click[< Prev]" not in acts and "search[<query>]" not in acts
    first_page = acts[2:]
    obs, *_, info = env.step("click[Next >]")
    assert f"Page 2 (Total results: {n}) [SEP] < Prev [SEP] Next >" in obs
    assert info["admissible_actions"][:3] == ["click[Back to Search]", "click[< Prev]", "click[Next >]"]
    assert set(info["admissible_actions"][3:]).isdisjoint(first_page)
    obs, *_, info = env.step("click[next >]")  # clicks are case-insensitive, as in the official env
    assert f"Page 3 (Total results: {n})" in obs and "click[Next >]" not in info["admissible_actions"]
    assert len(info["admissible_actions"]) == 2 + (n - 20)
    obs, *_, info = env.step("click[Next >]")  # no next page any more
    assert info["valid_action"] is False and obs.startswith("Invalid action:")
    env.step("click[< Prev]")
    obs, *_, info = env.step("click[< Prev]")
    assert info["admissible_actions"][2:] == first_page
    obs, *_, info = env.step("click[Back to Search]")
    assert obs.startswith("WebShop [SEP] Instruction:") and info["admissible_actions"] == ["search[<query>]"]


@needs_data
def test_item_page_options_and_subpages(env: WebShopEnv) -> None:
    env.reset(task_id=HDMI_TASK)
    env.step("search[gold plated high speed hdmi cable]")
    obs, *_, info = env.step("click[b01mqh5vgr]")  # lower-case ASIN works too
    p = env.catalog.by_asin["B01MQH5VGR"]
    assert "[SEP] Back to Search [SEP] < Prev [SEP] size [SEP] 25 feet [SEP] 30 feet" in obs
    assert obs.endswith(
        f"{p['Title']} [SEP] Price: $39.45 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews "
        "[SEP] Buy Now"
    )
    assert info["admissible_actions"][:6] == [
        "click[Back to Search]",
        "click[< Prev]",
        "click[Description]",
        "click[Features]",
        "click[Reviews]",
        "click[Buy Now]",
    ]
    assert "click[40 feet]" in info["admissible_actions"]
    env.step("click[40 feet]")
    assert env._session.options == {"size": "40 feet"}
    obs, *_, info = env.step("click[Features]")
    assert obs.split(" [SEP] ")[2:4] == ["Back to Search", "< Prev"] and p["BulletPoints"][0].strip() in obs
    assert info["admissible_actions"] == ["click[Back to Search]", "click[< Prev]"]
    obs, *_ = env.step("click[< Prev]")  # back to the item page, options kept
    assert obs.endswith("Buy Now") and env._session.options == {"size": "40 feet"}
    obs, *_ = env.step("click[Description]")
    assert obs.endswith(p["Description"].strip())
    env.step("click[< Prev]")
    obs, *_, info = env.step("click[< Prev]")  # item -> its results page (options cleared, as officially)
    assert "Page 1 (Total results:" in obs and env._session.options == {}


@needs_data
def test_purchase_rewards_on_real_goal(env: WebShopEnv) -> None:
    buy = ["search[gold plated high speed hdmi cable]", "click[B01MQH5VGR]"]
    env.reset(task_id=HDMI_TASK)
    obs, r, term, trunc, info = run(env, [*buy, "click[40 feet]", "click[Buy Now]"])
    # attributes 2/2, option 1/1, price 39.45 <= 70: (2 + 1 + 1) / 4 = 1.0
    assert r == 1.0 and term and not trunc and info["won"] and info["score"] == 1.0
    assert info["admissible_actions"] == [] and obs.endswith("[SEP] 1.0")
    assert info["purchased"] == {"asin": "B01MQH5VGR", "options": {"size": "40 feet"}}
    env.reset(task_id=HDMI_TASK)
    r = run(env, [*buy, "click[25 feet]", "click[Buy Now]"])[1]
    # wrong size ("25 feet" is not in the title/bullets/description): (2 + 0 + 1) / 4 = 0.75
    assert r == pytest.approx(0.75, abs=1e-12)
    env.reset(task_id=HDMI_TASK)
    _, r, _, _, info = run(env, [*buy, "click[Buy Now]"])  # no option chosen: (2 + 0 + 1) / 4 = 0.75
    assert r == pytest.approx(0.75, abs=1e-12) and not info["won"] and info["score"] == r
    # over budget: same product and option with a $30 budget (price $39.45): (2 + 1 + 0) / 4 = 0.75
    goal = {**env.catalog.goals[int(HDMI_TASK)], "price_upper": 30.0}
    p = env.catalog.by_asin["B01MQH5VGR"]
    assert get_reward(p, goal, env.catalog.prices["B01MQH5VGR"], {"size": "40 feet"})[0] == 0.75
    # episode over: further steps are invalid, never raise
    obs, r, term, trunc, info = env.step("click[Buy Now]")
    assert r == 0.0 and term and info["valid_action"] is False


@needs_data
def test_bad_actions_never_raise(env: WebShopEnv) -> None:
    obs0, _ = env.reset(task_id="5")
    bad = [
        "",
        "click[Buy Now]",  # not on this page
        "click[Nonexistent]",
        "search[" + "x" * 10_000 + "]",
        "x" * 10_000,
        "search[日本語]",
        "click[ボタン]",
        "search[shoes]; DROP TABLE products",
        "click[Back to Search]\nclick[Buy Now]",
        "<script>alert(1)</script>",
        "search[{{7*7}}] search[x]",
        "\x00\x01",
        None,
    ]
    for a in bad:
        obs, r, term, _trunc, info = env.step(a)  # type: ignore[arg-type]
        assert info["valid_action"] is False and r == 0.0 and not term, a
        assert obs.startswith("Invalid action:") and obs.endswith(obs0), a
        assert set(INFO_KEYS) <= set(info)
    obs, *_, info = env.step("search[shoes]")  # the episode is still usable
    assert info["valid_action"] and "Page 1" in obs
    for a in ["search[shoes]", "click[B0NOTHERE0]", "click[Description]"]:  # no search box / unknown targets
        assert env.step(a)[4]["valid_action"] is False


@needs_data
def test_truncation_at_max_steps() -> None:
    e = WebShopEnv(data_dir=DATA, split="test", max_steps=3)
    e.reset(task_id="0")
    assert e.step("search[shoes]")[3] is False
    assert e.step("click[Back to Search]")[3] is False
    _obs, r, term, trunc, _info = e.step("bogus")  # invalid actions count as steps
    assert trunc and not term and r == 0.0


@needs_data
def test_step_before_reset_is_invalid() -> None:
    e = WebShopEnv(data_dir=DATA)
    _obs, _r, _term, _trunc, info = e.step("search[shoes]")
    assert info["valid_action"] is False and set(INFO_KEYS) <= set(info)


@needs_data
def test_expert_wins_across_categories(env: WebShopEnv) -> None:
    by_cat: dict[str, list[str]] = defaultdict(list)
    for tid in env.task_ids("all"):
        by_cat[env.catalog.goals[int(tid)]["category"]].append(tid)
    sample = [tid for cat in sorted(by_cat) for tid in by_cat[cat][:3]]
    assert len(sample) >= 15 and len(by_cat) == 5
    for tid in sample:
        env.reset(task_id=tid)
        for _ in range(env.max_steps):
            _obs, r, term, trunc, info = env.step(env.expert_action())
            assert info["valid_action"]
            if term or trunc:
                break
        assert term and r == 1.0 and info["won"], (tid, info.get("reward_info"))
        assert env.expert_action() is None


@needs_data
def test_expert_pages_to_the_goal(env: WebShopEnv) -> None:
    env.reset(task_id="3")  # goal product B08T84R7V2
    results = [p["asin"] for p in env.catalog.search("size")]
    assert 20 <= results.index("B08T84R7V2") < 30  # third results page for the query "size"
    env.step("search[size]")
    expert = []
    for _ in range(3):
        expert.append(env.expert_action())
        env.step(expert[-1])
    assert expert == ["click[Next >]", "click[Next >]", "click[B08T84R7V2]"]


@needs_data
def test_expert_recovers_from_detours(env: WebShopEnv) -> None:
    env.reset(task_id="3")
    info = run(env, ["search[women shirt]"])[4]
    assert "click[B08T84R7V2]" not in info["admissible_actions"]  # the goal is not among these results
    run(env, [info["admissible_actions"][-1], "click[Features]"])  # a wrong item, then its sub-page
    actions = []
    for _ in range(env.max_steps - 3):
        actions.append(env.expert_action())
        _obs, r, term, trunc, info = env.step(actions[-1])
        if term or trunc:
            break
    # sub-page -> item -> results (goal absent) -> search page -> search the instruction -> ... -> buy
    assert actions[:3] == ["click[< Prev]", "click[< Prev]", "click[Back to Search]"]
    assert actions[3].startswith("search[Find me men's fashion sneakers")
    assert r == 1.0 and info["won"]


@needs_data
def test_expert_plan(env: WebShopEnv) -> None:
    env.reset(task_id="3")
    plan = env.expert_plan()
    goal = env.catalog.goals[3]
    assert [label for label, _ in plan] == [
        "search for the product",
        "open the matching product",
        "select options color: white | black, size: 9.5",
        "buy",
    ]
    assert plan[0][1] == [f"search[{goal['instruction_text']}]"]
    assert plan[1][1] == ["click[B08T84R7V2]"] and plan[2][1] == ["click[white | black]", "click[9.5]"]
    assert plan[3][1] == ["click[Buy Now]"]
    assert env._session.page == "search"  # planning does not move the episode
    flat = [a for _, acts in plan for a in acts]
    assert run(env, flat)[1] == 1.0


@needs_data
def test_determinism_within_and_across_processes(env: WebShopEnv) -> None:
    assert env.reset(seed=7)[1]["task_id"] == env.reset(seed=7)[1]["task_id"]
    assert (
        WebShopEnv(data_dir=DATA, seed=1).reset()[1]["task_id"]
        == WebShopEnv(data_dir=DATA, seed=1).reset()[1]["task_id"]
    )
    here = _rollout_digest(env)
    load_catalog.cache_clear()  # a fresh build gives identical prices, goals and search results
    assert _rollout_digest(WebShopEnv(data_dir=DATA, split="test")) == here
    code = (
        "from tests.envs.test_webshop import _rollout_digest, DATA; from envs.webshop import WebShopEnv; "
        "print(_rollout_digest(WebShopEnv(data_dir=DATA, split='test')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == here


@needs_data
def test_human_goal_format(tmp_path: Path) -> None:
    # A tiny items_human_ins.json in the official entry shape (data README), next to links to the shared files.
    for name in ("products.json", "items_ins_v2_1000.json"):
        (tmp_path / name).symlink_to(DATA / name)
    entry = {
        "asin": "B08T84R7V2",
        "instruction": "i need white and black lace up sneakers in size 9.5.",
        "attributes": ["lace closure"],
        "options": ["color: white | black", "size: 9.5"],
        "instruction_attributes": ["lace closure"],
        "instruction_options": ["white | black", "9.5"],
    }
    no_attr = {**entry, "instruction_attributes": []}  # skipped, as officially
    (tmp_path / "items_human_ins.json").write_text(json.dumps({"B08T84R7V2": [entry, no_attr]}))
    e = WebShopEnv(data_dir=tmp_path, goals="human", split="test")
    assert len(e.catalog.goals) == 1 and e.task_ids() == ["0"] and e.task_ids("train") == []
    info = e.reset()[1]
    assert info["task"].startswith(
        "i need white and black lace up sneakers in size 9.5, and price lower than"
    )
    assert [label for label, _ in e.expert_plan()][1:] == [
        "open the matching product",
        "select options white | black, 9.5",
        "buy",
    ]
    for _ in range(e.max_steps):
        _obs, r, term, _trunc, info = e.step(e.expert_action())
        if term:
            break
    # attribute 1/1, options "white | black" (fuzzy, colour-normalised) and "9.5" (exact): (1 + 2 + 1) / 4 = 1.0
    assert r == 1.0 and info["won"]


def _rollout_digest(e: WebShopEnv) -> str:
    """Hash of every observation, action and reward of expert rollouts on 12 goals."""
    h = hashlib.sha256()
    for tid in e.task_ids("all")[::70]:
        obs, _ = e.reset(task_id=tid)
        h.update(obs.encode())
        for _ in range(e.max_steps):
            a = e.expert_action()
            obs, r, term, trunc, _ = e.step(a)
            h.update(f"{a}|{obs}|{r!r}".encode())
            if term or trunc:
                break
    return h.hexdigest()
