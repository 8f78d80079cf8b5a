"""``WebShopEnv``: the text-mode WebShop benchmark (Yao et al. 2022) behind the ``envs.base.TextEnv`` protocol.

Tasks are goals (synthetic by default: the 122-product excerpt gives 839) indexed ``"0" .. str(N-1)`` in the
official shuffled order (``random.Random(233)``).  Splits are contiguous index ranges, like the official human-goal
split (test 0-499, eval 500-1499, train 1500+); with synthetic goals on small catalogues we scale them down to
test 0-99, eval 100-199, train 200+ (``SPLITS``).  Reward is the official purchase reward in [0, 1], paid once on
"Buy Now" (``terminated``); ``won`` is reward == 1.0; ``truncated`` after ``max_steps`` actions (15 by default).
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

from envs.webshop.catalog import Catalog, default_data_dir, load_catalog
from envs.webshop.engine import (
    BACK_TO_SEARCH,
    DONE_PAGE,
    END_BUTTON,
    ITEM_PAGE,
    NEXT_PAGE,
    PREV_PAGE,
    PRODUCT_WINDOW,
    RESULTS_PAGE,
    SEARCH_PAGE,
    SUB_PAGE,
    Session,
    admissible_actions,
    clickables,
    render,
    step_session,
)

# split -> [start, stop) over goal indices; stop None = to the end.
SPLITS: dict[str, dict[str, tuple[int, int | None]]] = {
    "synthetic": {"test": (0, 100), "eval": (100, 200), "train": (200, None)},
    "human": {"test": (0, 500), "eval": (500, 1500), "train": (1500, None)},
}
EXPERT_STEP_LIMIT = 40  # expert_plan() gives up after this many simulated actions


class WebShopEnv:
    """Text WebShop with a BM25 search engine, the official reward and a scripted expert."""

    name = "webshop"
    SUCCESS_REWARD = 1.0
    """The official purchase reward of a perfect match (HiPER pays 10x it: ``success_reward`` is not an option here)."""

    def __init__(
        self,
        data_dir: str | Path | None = None,
        split: str = "train",
        max_steps: int = 15,
        goals: str = "synthetic",
        num_products: int | None = None,
        seed: int = 0,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.catalog: Catalog = load_catalog(str(self.data_dir.resolve()), goals, num_products)
        if split not in (*SPLITS[goals], "all"):
            raise ValueError(f"unknown split {split!r}; use one of {[*SPLITS[goals], 'all']}")
        self.split = split
        self.max_steps = max_steps
        self._rng = random.Random(seed)
        self._goal: dict[str, Any] | None = None
        self._task_id = ""
        self._session = Session()
        self._steps = 0

    # ----------------------------------------------------------------- protocol
    def task_ids(self, split: str | None = None) -> list[str]:
        split = split or self.split
        n = len(self.catalog.goals)
        if split == "all":
            return [str(i) for i in range(n)]
        start, stop = SPLITS[self.catalog.goal_kind][split]
        return [str(i) for i in range(min(start, n), n if stop is None else min(stop, n))]

    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if task_id is None:
            ids = self.task_ids()
            if not ids:
                raise ValueError(f"split {self.split!r} has no goals in this catalogue")
            rng = random.Random(seed) if seed is not None else self._rng
            task_id = rng.choice(ids)
        idx = int(task_id)
        if not 0 <= idx < len(self.catalog.goals):
            raise ValueError(f"task_id {task_id!r} out of range 0..{len(self.catalog.goals) - 1}")
        self._task_id, self._goal = str(idx), self.catalog.goals[idx]
        self._session, self._steps = Session(), 0
        return self._observe(), self._info(valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._goal is None:
            return "Invalid action: call reset() first.", 0.0, False, False, self._info(valid=False)
        if self._session.page == DONE_PAGE:
            return "The episode is over; call reset().", 0.0, True, False, self._info(valid=False)
        error = step_session(self._session, self.catalog, self._goal, action)
        self._steps += 1
        terminated = self._session.page == DONE_PAGE
        truncated = not terminated and self._steps >= self.max_steps
        obs = self._observe() if error is None else f"Invalid action: {error}. [SEP] {self._observe()}"
        reward = self._session.reward if terminated else 0.0
        return obs, reward, terminated, truncated, self._info(valid=error is None)

    def close(self) -> None:
        self._goal = None

    # ----------------------------------------------------------------- expert
    def expert_action(self) -> str | None:
        """The scripted oracle's next action from the current state (``None`` once the purchase is done)."""
        if self._goal is None:
            return None
        return _expert(self._session, self.catalog, self._goal)

    def expert_plan(self) -> list[tuple[str, list[str]]]:
        """The oracle's remaining actions from the current state, grouped into subgoals.

        Subgoals: ``"search for the product"``, ``"open the matching product"``, ``"select options <k: v, ...>"``
        and ``"buy"``; simulated on a copy of the session, so the episode itself does not move.
        """
        if self._goal is None:
            return []
        s = copy.deepcopy(self._session)
        plan: list[tuple[str, list[str]]] = []
        for _ in range(EXPERT_STEP_LIMIT):
            action = _expert(s, self.catalog, self._goal)
            if action is None:
                break
            label = _subgoal(s, self.catalog, self._goal, action)
            if plan and plan[-1][0] == label:
                plan[-1][1].append(action)
            else:
                plan.append((label, [action]))
            if step_session(s, self.catalog, self._goal, action) is not None:
                break
        return plan

    # ----------------------------------------------------------------- helpers
    def _observe(self) -> str:
        assert self._goal is not None
        return render(self._session, self.catalog, self._goal["instruction_text"])

    def _info(self, *, valid: bool) -> dict[str, Any]:
        goal = self._goal or {}
        s = self._session
        done = s.page == DONE_PAGE
        info: dict[str, Any] = {
            "task": goal.get("instruction_text", ""),
            "admissible_actions": admissible_actions(s, self.catalog) if self._goal else [],
            "won": done and s.reward == 1.0,
            "score": s.reward if done else 0.0,
            "valid_action": valid,
            "task_id": self._task_id,
            "task_type": goal.get("category", ""),
            "split": self._split_of(self._task_id) if self._goal else self.split,
            "page": s.page,
        }
        if done:
            info["reward_info"] = s.reward_info
            info["purchased"] = {"asin": s.asin, "options": dict(s.options)}
        return info

    def _split_of(self, task_id: str) -> str:
        idx = int(task_id)
        for name, (start, stop) in SPLITS[self.catalog.goal_kind].items():
            if idx >= start and (stop is None or idx < stop):
                return name
        return "all"


def _goal_option_clicks(s: Session, cat: Catalog, goal: dict[str, Any]) -> list[str]:
    """Goal option values not yet selected (named options for synthetic goals, bare values for human ones)."""
    opts = goal["goal_options"]
    if isinstance(opts, dict):
        return [opts[k] for k in sorted(opts) if s.options.get(k) != opts[k]]
    offered = {v for values in cat.by_asin[goal["asin"]]["options"].values() for v in values}
    return [v for v in opts if v in offered and v not in s.options.values()]


def _expert(s: Session, cat: Catalog, goal: dict[str, Any]) -> str | None:
    """Search the instruction (then the title, then the category query), open the goal ASIN, set options, buy."""
    target = goal["asin"]
    if s.page == DONE_PAGE:
        return None
    if s.page == SEARCH_PAGE:
        queries = [goal["instruction_text"], goal["name"], goal["query"]]
        queries = [q.replace("[", " ").replace("]", " ").strip() for q in queries]
        fresh = [q for q in queries if q.lower() not in s.searched]
        return f"search[{(fresh or queries)[0]}]"
    if s.page == RESULTS_PAGE:
        if target not in s.results:
            return f"click[{BACK_TO_SEARCH}]"
        page = s.results.index(target) // PRODUCT_WINDOW + 1
        if page == s.result_page:
            return f"click[{target}]"
        return f"click[{NEXT_PAGE}]" if page > s.result_page else f"click[{PREV_PAGE}]"
    if s.page == SUB_PAGE or (s.page == ITEM_PAGE and s.asin != target):
        return f"click[{PREV_PAGE}]"
    missing = [v for v in _goal_option_clicks(s, cat, goal) if v.lower() in clickables(s, cat)]
    return f"click[{missing[0]}]" if missing else f"click[{END_BUTTON}]"


def _subgoal(s: Session, cat: Catalog, goal: dict[str, Any], action: str) -> str:
    """Name of the subgoal an expert action serves, from the page it is taken on."""
    if action == f"click[{END_BUTTON}]":
        return "buy"
    if s.page == ITEM_PAGE and s.asin == goal["asin"] and action != f"click[{PREV_PAGE}]":
        opts = goal["goal_options"]
        text = ", ".join(f"{k}: {v}" for k, v in opts.items()) if isinstance(opts, dict) else ", ".join(opts)
        return f"select options {text}"
    if (s.page == RESULTS_PAGE and action == f"click[{goal['asin']}]") or (
        s.page == SUB_PAGE and s.asin == goal["asin"]
    ):
        return "open the matching product"
    return "search for the product"
