"""The product's source as an index (modules, classes with their fields, functions, imports), and the static walk of
calls on a tainted value that ``bench/house_walk.py`` counts (its docstring says how). Reads the source with ``ast``;
imports nothing of the product."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PRODUCT = ("common", "envs", "actors", "reward", "cluster", "learners", "launch")


# -- the index of the product's source ------------------------------------------------------------------------


@dataclass
class Cls:
    module: str
    name: str
    node: ast.ClassDef
    bases: list[ast.expr]
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)
    fields: dict[str, ast.expr] = field(default_factory=dict)
    """Attribute → its annotation, or the expression ``self.<attr>`` is first assigned in ``__init__``."""


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, Cls] = field(default_factory=dict)


def product_files(root: Path) -> Iterator[tuple[str, Path]]:
    for pkg in PRODUCT:
        for path in sorted((root / pkg).rglob("*.py")):
            yield ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"), path


def _imports(name: str, path: Path, tree: ast.Module) -> dict[str, str]:
    """Local name → the dotted name it stands for (every import of the module, function-level ones too)."""
    out: dict[str, str] = {}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for a in node.names:
                out[a.asname or a.name] = f"{base}.{a.name}"
    return out


def _class(module: str, node: ast.ClassDef) -> Cls:
    cls = Cls(module, node.name, node, list(node.bases))
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            cls.methods[item.name] = item  # type: ignore[assignment]
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            cls.fields[item.target.id] = item.annotation
    for method in cls.methods.values():
        for sub in ast.walk(method):
            for target, value in _self_assignments(sub):
                cls.fields.setdefault(target.attr, value)
    return cls


def _self_assignments(node: ast.AST) -> list[tuple[ast.Attribute, ast.expr]]:
    """(``self.<attr>``, its annotation or value) of an assignment, tuples taken apart (``self.a, self.b = a, b``)."""
    if isinstance(node, ast.AnnAssign):
        pairs = [(node.target, node.annotation)]
    elif isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
        pairs = [(target, value)]
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            pairs = list(zip(target.elts, value.elts, strict=False))
    else:
        return []
    return [(t, v) for t, v in pairs if _is_self_attr(t)]  # type: ignore[misc]


def _is_self_attr(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def index(root: Path) -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for name, path in product_files(root):
        tree = ast.parse(path.read_text())
        mod = Module(name, path, tree, _imports(name, path, tree))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                mod.functions[node.name] = node  # type: ignore[assignment]
            elif isinstance(node, ast.ClassDef):
                mod.classes[node.name] = _class(name, node)
        mods[name] = mod
    return mods


# -- 3. the config walk ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fn:
    module: str
    qual: str
    node: ast.FunctionDef
    cls: Cls | None


class Resolver:
    """Names, types and callees, statically, over the index."""

    def __init__(self, mods: dict[str, Module]) -> None:
        self.mods = mods

    def symbol(self, module: str, name: str, depth: int = 0) -> object | None:
        """What ``name`` means at the top of ``module``: a ``Module``, a ``Cls``, an ``Fn`` or None."""
        mod = self.mods.get(module)
        if mod is None or depth > 8:
            return None
        if name in mod.functions:
            return Fn(module, name, mod.functions[name], None)
        if name in mod.classes:
            return mod.classes[name]
        if name in mod.imports:
            return self.dotted(mod.imports[name], depth + 1)
        return None

    def dotted(self, target: str, depth: int = 0) -> object | None:
        if target in self.mods:
            return self.mods[target]
        head, _, attr = target.rpartition(".")
        return self.symbol(head, attr, depth) if head in self.mods else None

    def annotation(self, module: str, node: ast.expr | None) -> Cls | None:
        """The product class an annotation names (``X | None`` and ``Optional[X]``: X)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(node, ast.BinOp):
            return self.annotation(module, node.left) or self.annotation(module, node.right)
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "Optional":
            return self.annotation(module, node.slice)
        found = self.expr_symbol(module, node) if node is not None else None
        return found if isinstance(found, Cls) else None

    def expr_symbol(self, module: str, node: ast.expr) -> object | None:
        if isinstance(node, ast.Name):
            return self.symbol(module, node.id)
        if isinstance(node, ast.Attribute):
            base = self.expr_symbol(module, node.value)
            if isinstance(base, Module):
                return self.symbol(base.name, node.attr)
        return None

    def method(self, cls: Cls, name: str, depth: int = 0) -> Fn | None:
        if name in cls.methods:
            return Fn(cls.module, f"{cls.name}.{name}", cls.methods[name], cls)
        for base in cls.bases:
            found = self.annotation(cls.module, base)
            if found is not None and depth < 8 and (hit := self.method(found, name, depth + 1)):
                return hit
        return None

    def field_type(self, cls: Cls, name: str, depth: int = 0) -> Cls | None:
        if name in cls.fields:
            node = cls.fields[name]
            typed = self.annotation(cls.module, node)
            if typed is None and isinstance(node, ast.Name):  # ``self.x = x``: the parameter's annotation
                init = cls.methods.get("__init__")
                params = {a.arg: a.annotation for a in _all_args(init)} if init else {}
                typed = self.annotation(cls.module, params.get(node.id))
            return typed
        prop = cls.methods.get(name)
        if prop is not None:
            return self.annotation(cls.module, prop.returns)
        for base in cls.bases:
            found = self.annotation(cls.module, base)
            if found is not None and depth < 8 and (hit := self.field_type(found, name, depth + 1)):
                return hit
        return None


def _all_args(fn: ast.FunctionDef | None) -> list[ast.arg]:
    if fn is None:
        return []
    a = fn.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


@dataclass
class Frame:
    fn: Fn
    tainted: set[str]
    types: dict[str, Cls]


class Walk:
    """The walk of module 3 of the docstring: ``events`` are (file, function) in the order the walk reaches them."""

    def __init__(self, mods: dict[str, Module], root: Path) -> None:
        self.mods, self.root, self.res = mods, root, Resolver(mods)
        self.events: list[tuple[str, str]] = []
        self.seen: set[tuple[str, str]] = set()

    def file(self, fn: Fn) -> str:
        return str(self.mods[fn.module].path.relative_to(self.root))

    def run(self, fn: Fn, tainted: set[str]) -> None:
        self.seen.add((fn.module, fn.qual))
        self.events.append((self.file(fn), fn.qual))
        types: dict[str, Cls] = {}
        for a in _all_args(fn.node):
            typed = self.res.annotation(fn.module, a.annotation)
            if typed is not None:
                types[a.arg] = typed
        if fn.cls is not None:
            types["self"] = fn.cls
        self.body(Frame(fn, set(tainted), types), fn.node.body)

    def body(self, frame: Frame, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            heads = [n for n in ast.iter_child_nodes(stmt) if not isinstance(n, ast.stmt)]
            for head in heads:
                self.calls(frame, head)
            self.bind(frame, stmt)
            for name in ("body", "orelse", "finalbody"):
                self.body(frame, getattr(stmt, name, []))
            for handler in getattr(stmt, "handlers", []):
                self.body(frame, handler.body)

    def bind(self, frame: Frame, stmt: ast.stmt) -> None:
        """Taint (and type) the names a statement binds from what it reads."""
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(stmt, ast.Assign):
            pairs = [(t, stmt.value) for t in stmt.targets]
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
            pairs = [(stmt.target, stmt.value)]
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            pairs = [(stmt.target, stmt.iter)]
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            pairs = [(i.optional_vars, i.context_expr) for i in stmt.items if i.optional_vars is not None]
        for target, value in pairs:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                for t, v in zip(target.elts, value.elts, strict=False):
                    self.bind_one(frame, t, v)
            else:
                self.bind_one(frame, target, value)

    def bind_one(self, frame: Frame, target: ast.AST, value: ast.AST) -> None:
        if _names(value) & frame.tainted:
            frame.tainted.update(_bound(target))
        if isinstance(target, ast.Name) and isinstance(value, ast.expr):
            typed = self.type_of(frame, value)
            if typed is not None:
                frame.types[target.id] = typed

    def type_of(self, frame: Frame, node: ast.expr) -> Cls | None:
        if isinstance(node, ast.Name):
            return frame.types.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self.type_of(frame, node.value)
            return None if owner is None else self.res.field_type(owner, node.attr)
        if isinstance(node, ast.Call):
            callee = self.callee(frame, node.func)
            if isinstance(callee, Cls):
                return callee
            if isinstance(callee, Fn):
                return self.res.annotation(callee.module, callee.node.returns)
        return None

    def callee(self, frame: Frame, func: ast.expr) -> object | None:
        if isinstance(func, ast.Name):
            return None if func.id in frame.types else self.res.symbol(frame.fn.module, func.id)
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Call) and getattr(func.value.func, "id", "") == "super":
                base = frame.fn.cls and next(
                    (self.res.annotation(frame.fn.module, b) for b in frame.fn.cls.bases), None
                )
                return self.res.method(base, func.attr) if base else None
            owner = self.type_of(frame, func.value)
            if owner is not None:
                return self.res.method(owner, func.attr)
            found = self.res.expr_symbol(frame.fn.module, func.value)
            if isinstance(found, Module):
                return self.res.symbol(found.name, func.attr)
        return None

    def calls(self, frame: Frame, expr: ast.AST) -> None:
        """The followed calls of one expression, in the order they finish."""
        found = [n for n in ast.walk(expr) if isinstance(n, ast.Call)]
        found = [c for c in found if not any(isinstance(p, ast.Lambda) for p in _parents(expr, c))]
        for call in sorted(found, key=lambda c: (c.end_lineno, c.end_col_offset)):
            self.follow(frame, call)

    def follow(self, frame: Frame, call: ast.Call) -> None:
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        self_tainted = receiver is not None and bool(_names(receiver) & frame.tainted)
        tainted_args = [bool(_names(a) & frame.tainted) for a in call.args]
        tainted_kw = {k.arg: bool(_names(k.value) & frame.tainted) for k in call.keywords}
        if not (self_tainted or any(tainted_args) or any(tainted_kw.values())):
            return
        target = self.callee(frame, call.func)
        constructed = isinstance(target, Cls)
        if isinstance(target, Cls):
            target = self.res.method(target, "__init__") or self.res.method(target, "__post_init__")
            self_tainted = True
        if not isinstance(target, Fn) or (target.module, target.qual) in self.seen:
            return
        params = [a.arg for a in _all_args(target.node)]
        positional = [*target.node.args.posonlyargs, *target.node.args.args]
        names = [a.arg for a in positional]
        if names and names[0] in ("self", "cls") and (target.cls is not None):
            names = names[1:]
        tainted = {"self"} if self_tainted or constructed else set()
        for i, (arg, hot) in enumerate(zip(call.args, tainted_args, strict=True)):
            if hot and isinstance(arg, ast.Starred):
                tainted.update(params)
            elif hot and i < len(names):
                tainted.add(names[i])
        for key, hot in tainted_kw.items():
            if hot:
                tainted.update(params if key is None else [key])
        if target.node.args.kwarg is not None and any(k not in params for k in tainted_kw if k):
            tainted.add(target.node.args.kwarg.arg)
        here = self.file(frame.fn)
        if self.events and self.events[-1][0] != here:
            self.events.append((here, frame.fn.qual))  # back in this file: the walk goes on from here
        self.run(target, tainted)


def _parents(root: ast.AST, node: ast.AST) -> list[ast.AST]:
    """The nodes on the way from ``root`` down to ``node`` (a call inside a lambda runs later, not here)."""
    path: list[ast.AST] = []

    def down(cur: ast.AST) -> bool:
        if cur is node:
            return True
        for child in ast.iter_child_nodes(cur):
            if down(child):
                path.append(cur)
                return True
        return False

    down(root)
    return path


def walk_counts(events: list[tuple[str, str]]) -> dict[str, object]:
    stays: list[str] = []
    for f, _ in events:
        if not stays or stays[-1] != f:
            stays.append(f)
    seen: set[str] = set()
    climbs = returns = 0
    for i, f in enumerate(stays):
        if f in seen:
            returns += 1
            climbs += Path(stays[i - 1]).parent != Path(f).parent
        seen.add(f)
    visits: dict[str, int] = {}
    for f in stays:
        visits[f] = visits.get(f, 0) + 1
    return {
        "events": len(events),
        "stays": len(stays),
        "rooms": len(seen),
        "climbs": climbs,
        "returns": returns,
        "most_visited": sorted(visits.items(), key=lambda kv: (-kv[1], kv[0]))[:5],
        "path": stays,
    }
