"""The README's map is true to the tree: every module of every package it lists is named on the package's line,
every name it gives is a module of that package, and every package of the product is listed."""

from __future__ import annotations

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
