"""The package's import graph: no cycle, and no module importing a higher layer.

Layers, lowest first: ``common`` (what both wings share: the LoRA spec, the dtype rule, progress lines), ``envs``,
``actors`` (rollout side), ``reward`` and ``cluster``, ``learners`` (learner side), ``launch`` (the driver, the
composition root). A module may import its own package and lower layers, except that the learner side (``learners``,
``reward``) reaches into ``actors`` only for the typed records of ``actors.trajectory``: the learner must not depend
on the rollout engine. Read from the source (``ast``), so a conditional or ``TYPE_CHECKING`` import counts too."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"common": 0, "envs": 1, "actors": 2, "reward": 3, "cluster": 3, "learners": 4, "launch": 5}
RECORDS_ONLY = {"learners": "actors", "reward": "actors"}
"""Package → the lower package it may import only ``RECORDS`` of."""
RECORDS = ("actors.trajectory",)


def modules() -> dict[str, Path]:
    out = {}
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the project modules it imports (an import of a package's member resolves to the longest known
    module prefix)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for target in targets:
                parts = target.split(".")
                hit = next(
                    (".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in mods),
                    None,
                )
                if hit and hit != name:
                    graph[name].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def violations(graph: dict[str, set[str]]) -> Iterable[str]:
    for src, deps in graph.items():
        a = src.split(".")[0]
        for dst in deps:
            b = dst.split(".")[0]
            if LAYERS[b] > LAYERS[a] or (LAYERS[b] == LAYERS[a] and a != b):
                yield f"{src} imports {dst} (layer {b} is not below {a})"
            elif RECORDS_ONLY.get(a) == b and dst not in RECORDS:
                yield f"{src} imports {dst} ({a} may import only {', '.join(RECORDS)} of {b})"


def test_the_package_has_no_import_cycle_and_no_upward_import():
    graph = import_graph(modules())
    assert cycles(graph) == []
    assert sorted(violations(graph)) == []


def test_the_checks_can_fail():
    """A two-module cycle, an upward import and the learner reaching the rollout engine are all caught."""
    graph = {
        "launch.a": {"launch.b"},
        "launch.b": {"launch.a"},
        "actors.rollout": {"launch.a"},
        "learners.worker": {"actors.inference", "actors.trajectory"},
        "actors.inference": set(),
        "actors.trajectory": set(),
    }
    assert cycles(graph) == [["launch.a", "launch.b"]]
    assert sorted(violations(graph)) == [
        "actors.rollout imports launch.a (layer launch is not below actors)",
        "learners.worker imports actors.inference (learners may import only actors.trajectory of actors)",
    ]
