"""The README's map is true to the tree: every module of every package it lists is named on the package's line,
every name it gives is a module of that package, and every package of the product is listed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESCRIBED = ("bench/", "tests/")  # listed as folders with a description, not module by module


def map_entries(readme: str) -> dict[str, str]:
    """{package path: its text} from the code block under '## Map' (continuation lines are indented)."""
    block = readme.split("## Map", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    last = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        if line[0] != " ":
            last, _, text = line.partition(" ")
            entries[last] = text
        else:
            entries[last] += " " + line.strip()
    return entries


def named_modules(text: str) -> set[str]:
    """The first word of the entry and of each '·'-separated part: the module names."""
    return {m.group(1) for m in re.finditer(r"(?:^|·)\s*([a-z_][a-z0-9_]*)", text.strip())}


def product_packages() -> set[str]:
    skip = {"tests", "bench", "docs", "build"}
    return {
        f"{p.parent.relative_to(ROOT).as_posix()}/"
        for p in ROOT.rglob("*.py")
        if p.parent != ROOT
        and p.relative_to(ROOT).parts[0] not in skip
        and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
        and "egg-info" not in p.as_posix()
    }


def test_every_listed_module_exists_and_every_module_is_listed():
    entries = map_entries((ROOT / "README.md").read_text())
    for package, text in entries.items():
        folder = ROOT / package
        assert folder.is_dir(), f"README map lists {package}, which does not exist"
        if package in DESCRIBED:
            continue
        listed = named_modules(text)
        present = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        assert listed == present, (
            f"{package}: missing {sorted(present - listed)}, not there {sorted(listed - present)}"
        )


def test_every_package_is_on_the_map():
    entries = map_entries((ROOT / "README.md").read_text())
    assert product_packages() <= set(entries), sorted(product_packages() - set(entries))


def test_the_map_check_can_fail():
    text = (ROOT / "README.md").read_text().replace("· progress (progress lines)", "", 1)
    entries = map_entries(text)
    assert "progress" not in named_modules(entries["common/"])


def test_relative_links_of_the_readme_and_docs_resolve():
    """Every relative link of README.md and docs/*.md, docs/methods/*.md, docs/envs/*.md names an existing file."""
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs").glob("*/*.md")]
    dangling = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                dangling.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not dangling, dangling


def product_definitions() -> tuple[dict[str, set[str]], set[str]]:
    """({class: its method names}, the module-level function names) over the product's packages."""
    classes: dict[str, set[str]] = {}
    functions: set[str] = set()
    for package in product_packages():
        for path in (ROOT / package).glob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    methods = {
                        n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    }
                    classes.setdefault(node.name, set()).update(methods)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions.add(node.name)
    return classes, functions


def undefined_loop_names(readme: str) -> list[str]:
    """Names the '## The loop' sketch uses that the product does not define: each ``Class.method`` must be a method
    of that class, each ``obj.name(`` call a method of some class, each bare ``name(`` call and each other
    snake_case name a module-level function (or, for the snake_case names, a method)."""
    block = readme.split("## The loop", 1)[1].split("```", 2)[1]
    classes, functions = product_definitions()
    methods = set().union(*classes.values())
    pairs = re.findall(r"\b([A-Z][A-Za-z]+)\.([a-z_]+)", block)
    missing = [f"{cls}.{attr}" for cls, attr in pairs if attr not in classes.get(cls, set())]
    method_calls = set(re.findall(r"\.([a-z_][a-z0-9_]*)\(", block))
    calls = set(re.findall(r"(?<![.\w])([a-z_][a-z0-9_]*)\(", block))
    named = set(re.findall(r"(?<![.\w])([a-z]+_[a-z0-9_]+)\b", block)) - calls
    missing += sorted(name for name in method_calls if name not in methods)
    missing += sorted(name for name in calls if name not in functions)
    missing += sorted(name for name in named if name not in functions | methods)
    return missing


def test_the_loop_sketch_names_functions_that_exist():
    assert undefined_loop_names((ROOT / "README.md").read_text()) == []


def test_the_loop_check_can_fail():
    readme = (ROOT / "README.md").read_text()
    wrong = readme.replace("self.push()", "pool.push(learner.export_adapter())", 1)
    assert undefined_loop_names(wrong) == ["export_adapter"]
    wrong = readme.replace("RolloutPool.push", "RolloutPool.send_all", 1)
    assert undefined_loop_names(wrong) == ["RolloutPool.send_all"]
    wrong = readme.replace("self.push()", "batch = prepare(data, algorithm)", 1)
    assert undefined_loop_names(wrong) == ["prepare"]
