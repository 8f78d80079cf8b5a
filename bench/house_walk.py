"""Measures of the house, read from the source alone (``ast``; nothing of the product is imported, so any checkout
can be measured: ``python bench/house_walk.py --root /path/to/checkout``).

    python bench/house_walk.py [--root DIR] [--stops N] [--json OUT]

Three measures, over the product's packages (``PRODUCT``; not ``tests/`` nor ``bench/``):

1. **Long functions**: every function or method of 60 lines or more (``end_lineno - lineno + 1``, its decorators
   not counted) or of 7 parameters or more (every named parameter, ``*args`` and ``**kwargs`` included, ``self``
   and ``cls`` not).

2. **Import arrows**, per sheet: a sheet is a package (the house: the top-level packages; ``launch/``,
   ``launch/driver/``, ``learners/``, ``actors/``), its rooms are its direct sub-packages and modules, and room A
   has an arrow to room B when a module under A imports a module under B (at module level or inside a function).
   The rooms are ordered lowest first so that the fewest arrows point up (then the fewest import statements):
   every order is tried on a sheet of up to 8 rooms, Eades–Lin–Smyth's greedy order on a larger one. An arrow to a
   room later in that order is an arrow **up** (against the layering, as ``launch/config`` → ``launch/driver``). Floors: the longest chain of arrows down, plus one. **Cycles**: strongly
   connected sets of more than one module in the module graph of module-level imports (a real import loop), and,
   separately, of every import.

3. **The config walk** ("stays / rooms / climbs / returns"), a reconstruction of the 2026-12-07 review's walk (its tool
   is not available), from three starts (``WALKS``): the whole trip from ``launch.driver.train.train`` with ``cfg``
   tainted, ``build_run`` with ``cfg``, and one update, ``Updater.update`` with ``trajs``. It follows the taint:

   * a name is tainted when it is a tainted parameter or is bound (assignment, ``for``, ``with``) from an expression
     that reads a tainted name; ``self`` is tainted in a method called on a tainted receiver;
   * a call is followed when its receiver or one of its arguments is tainted and its callee resolves statically to
     a product function: module functions and classes through the imports (re-exports followed), methods through
     the receiver's type, read from annotations (parameters, dataclass fields, returns) and constructor calls;
     a class's call enters its ``__init__`` or ``__post_init__`` (a record without either enters nothing);
   * the callee's parameters that receive a tainted argument (or ``self``) are tainted in it; each function is
     walked once (the first time it is reached), its calls in the order they finish (arguments first).

   Events: entering a function (its file), and coming back to a caller's file when the caller goes on to another
   followed call after a callee in another file returned. ``--stops N`` keeps the first N events of the whole trip
   (default: all). Over the file sequence of the events: a **stay** is a run of consecutive events in one file;
   **rooms** are the distinct files; a **return** is a stay in a file the walk had been in before (stays − rooms);
   a **climb** is a return that comes up from a file of another package directory (from ``learners/`` back into
   ``launch/driver/updater.py``, say), where a return from a sibling module of the same package is not one.
   Counted this way the review's checkout ``02e1f7d`` gives other numbers than its 83/29/19/54 (its tool's events
   and rules are not known; none of the variants tried, with or without the returns to a caller, the taint of
   receivers or of call results, reproduced them), so compare checkouts measured with this script only.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
from pathlib import Path

from house_calls import Fn, Module, Walk, index, walk_counts

SHEETS = ("", "launch", "launch/driver", "learners", "actors")
"""The sheets drawn (``""``: the house, its top-level packages)."""
LONG_LINES, MANY_PARAMS = 60, 7
EXHAUSTIVE = 8
WALKS = (
    ("launch.driver.train", "train", "cfg"),
    ("launch.driver.build", "build_run", "cfg"),
    ("launch.driver.updater", "Updater.update", "trajs"),
)
"""The walks reported: the whole trip (the first, with ``--stops``), the build alone, one update alone."""


# -- 1. long functions ----------------------------------------------------------------------------------------


def param_count(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return len([n for n in names if n not in ("self", "cls")])


def long_functions(mods: dict[str, Module], root: Path) -> list[dict[str, object]]:
    out = []
    for mod in mods.values():
        stack: list[tuple[ast.AST, str]] = [(mod.tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                qual = f"{prefix}{getattr(child, 'name', '')}"
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = child.end_lineno - child.lineno + 1  # type: ignore[operator]
                    params = param_count(child)  # type: ignore[arg-type]
                    if lines >= LONG_LINES or params >= MANY_PARAMS:
                        where = f"{mod.path.relative_to(root)}:{child.lineno}"
                        out.append({"function": qual, "where": where, "lines": lines, "params": params})
                    stack.append((child, qual + "."))
                elif isinstance(child, ast.ClassDef):
                    stack.append((child, qual + "."))
                else:
                    stack.append((child, prefix))
    return sorted(out, key=lambda r: (-int(r["lines"]), str(r["where"])))  # type: ignore[call-overload]


# -- 2. import arrows and cycles ------------------------------------------------------------------------------


def _known(target: str, mods: dict[str, Module]) -> str | None:
    parts = target.split(".")
    return next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in mods), None)


def module_graph(mods: dict[str, Module], *, top_level_only: bool) -> dict[str, dict[str, int]]:
    """Module → imported product module → import statements (each ``from x import a, b`` counts its names)."""
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for name, mod in mods.items():
        nodes = mod.tree.body if top_level_only else list(ast.walk(mod.tree))
        for node in nodes:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                hit = _known(target, mods)
                if hit and hit != name:
                    graph[name][hit] = graph[name].get(hit, 0) + 1
    return graph


def strong_components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index_of: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index_of:
            continue
        work = [(start, iter(graph[start]))]
        index_of[start] = low[start] = len(index_of)
        stack.append(start)
        on.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index_of:
                    index_of[nxt] = low[nxt] = len(index_of)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, {}))))
                elif nxt in on:
                    low[node] = min(low[node], index_of[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index_of[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return [c for c in out if len(c) > 1]


def room_of(module: str, sheet: str) -> str | None:
    """The room of ``sheet`` a module lies in (None: outside the sheet)."""
    prefix = sheet.replace("/", ".")
    if prefix and not module.startswith(prefix + "."):
        return None
    rest = module[len(prefix) + 1 :] if prefix else module
    return rest.split(".")[0] or None


def sheet_graph(graph: dict[str, dict[str, int]], sheet: str) -> dict[str, dict[str, int]]:
    rooms: dict[str, dict[str, int]] = {}
    for src, targets in graph.items():
        a = room_of(src, sheet)
        if a is None:
            continue
        rooms.setdefault(a, {})
        for dst, n in targets.items():
            b = room_of(dst, sheet)
            if b is not None and b != a:
                rooms.setdefault(b, {})
                rooms[a][b] = rooms[a].get(b, 0) + n
    return rooms


def greedy_order(g: dict[str, dict[str, int]]) -> list[str]:
    """Eades–Lin–Smyth: rooms lowest first (sinks first), the weight of arrows pointing up kept small."""
    left = {n: dict(e) for n, e in g.items()}
    low: list[str] = []
    high: list[str] = []
    while left:
        into = {n: sum(left[m].get(n, 0) for m in left) for n in left}
        sinks = sorted(n for n in left if not any(m in left for m in left[n]))
        sources = sorted(n for n in left if into[n] == 0)
        if sinks:
            pick, where = sinks[0], low
        elif sources:
            pick, where = sources[0], high
        else:  # in a cycle: the room most imported, least importing, is the lowest
            pick = max(sorted(left), key=lambda n: into[n] - sum(v for m, v in left[n].items() if m in left))
            where = low
        where.append(pick)
        del left[pick]
    return low + high[::-1]


def best_order(g: dict[str, dict[str, int]]) -> list[str]:
    """The order with the fewest arrows up (then the fewest import statements up): exhaustive on a sheet of up to
    ``EXHAUSTIVE`` rooms, else ``greedy_order``."""
    if len(g) > EXHAUSTIVE:
        return greedy_order(g)

    def cost(order: tuple[str, ...]) -> tuple[int, int]:
        at = {n: i for i, n in enumerate(order)}
        up = [(a, b) for a, t in g.items() for b in t if at[b] > at[a]]
        return len(up), sum(g[a][b] for a, b in up)

    return list(min(itertools.permutations(sorted(g)), key=cost))


def sheet_stats(graph: dict[str, dict[str, int]], sheet: str) -> dict[str, object]:
    g = sheet_graph(graph, sheet)
    order = {n: i for i, n in enumerate(best_order(g))}
    arrows = [(a, b) for a, t in g.items() for b in t]
    up = sorted(f"{a} -> {b}" for a, b in arrows if order[b] > order[a])
    floor: dict[str, int] = {}
    for n in sorted(order, key=order.__getitem__):  # lowest first: its arrows down are placed already
        floor[n] = 1 + max((floor[b] for b in g[n] if order[b] < order[n]), default=0)
    return {
        "sheet": sheet or "(house)",
        "rooms": len(g),
        "floors": max(floor.values(), default=0),
        "arrows": len(arrows),
        "up": up,
    }


def config_walk(mods: dict[str, Module], root: Path, start: tuple[str, str, str], stops: int | None) -> dict:
    """The walk from ``start`` (module, function or ``Class.method``, the tainted parameter)."""
    module, qual, param = start
    cls_name, _, name = qual.rpartition(".")
    cls = mods[module].classes[cls_name] if cls_name else None
    node = cls.methods[name] if cls is not None else mods[module].functions[name]
    walk = Walk(mods, root)
    walk.run(Fn(module, qual, node, cls), {param})
    counts = walk_counts(walk.events[:stops] if stops else walk.events)
    return {"start": f"{qual}:{param}", **counts}


# -- the report -----------------------------------------------------------------------------------------------


def measure(root: Path, stops: int | None) -> dict[str, object]:
    mods = index(root)
    every = module_graph(mods, top_level_only=False)
    loops = strong_components(module_graph(mods, top_level_only=True))
    sheets = [sheet_stats(every, s) for s in SHEETS]
    return {
        "root": str(root),
        "long_functions": long_functions(mods, root),
        "sheets": sheets,
        "up_arrows": sum(len(s["up"]) for s in sheets),  # type: ignore[arg-type]
        "import_cycles": loops,
        "cycles_any_import": strong_components(every),
        "walks": [config_walk(mods, root, w, stops if i == 0 else None) for i, w in enumerate(WALKS)],
    }


def report(m: dict[str, object]) -> str:
    lines = [f"house walk of {m['root']}"]
    longs = m["long_functions"]
    assert isinstance(longs, list)
    n_long = sum(int(r["lines"]) >= LONG_LINES for r in longs)  # type: ignore[call-overload]
    n_many = sum(int(r["params"]) >= MANY_PARAMS for r in longs)  # type: ignore[call-overload]
    lines.append(
        f"functions >= {LONG_LINES} lines or >= {MANY_PARAMS} parameters: {len(longs)} ({n_long} long, "
        f"{n_many} with many parameters)"
    )
    lines += [
        f"  {r['lines']:>4} lines {r['params']:>3} params  {r['function']}  {r['where']}" for r in longs
    ]
    for s in m["sheets"]:  # type: ignore[attr-defined]
        ups = f": {', '.join(s['up'])}" if s["up"] else ""
        lines.append(
            f"sheet {s['sheet']}: {s['rooms']} rooms, {s['floors']} floors, {s['arrows']} arrows, "
            f"{len(s['up'])} up{ups}"
        )
    lines.append(f"import arrows up (all sheets): {m['up_arrows']}")
    lines.append(f"import cycles (module-level imports): {len(m['import_cycles'])} {m['import_cycles']}")  # type: ignore[arg-type]
    lines.append(f"cycles counting function-level imports too: {len(m['cycles_any_import'])}")  # type: ignore[arg-type]
    for w in m["walks"]:  # type: ignore[attr-defined]
        lines.append(
            f"walk {w['start']} ({w['events']} events): {w['stays']} stays / {w['rooms']} rooms / "
            f"{w['climbs']} climbs / {w['returns']} returns; most visited: {w['most_visited']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--stops", type=int, default=None, help="keep the walk's first N events (default: all)")
    ap.add_argument("--path", action="store_true", help="print the walk's file sequence too")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    m = measure(args.root.resolve(), args.stops)
    print(report(m))
    if args.path:
        print("\n".join(m["walks"][0]["path"]))  # type: ignore[index]
    if args.json is not None:
        args.json.write_text(json.dumps(m, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
