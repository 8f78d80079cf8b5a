"""docs/results: the index has one row per study page, every link there resolves, and every status is a known word.

The index is the only place that says whether a measured figure still describes today's code, so a page without a
row, a row without a page, or a link into a moved file would leave a reader with a figure and no status."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).parents[2] / "docs" / "results"
INDEX = RESULTS / "README.md"
STATUSES = ("current", "current?", "superseded", "confounded")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
STATUS_WORD = re.compile(r"^(current\?|current|superseded|confounded)(?=\s|$)")
PAGE_STATUS = re.compile(r"^> Status: \*\*([^*]+)\*\*", re.MULTILINE)


def index_rows(text: str) -> list[list[str]]:
    """Cells of every index table row that names a page (a row whose first cell is a link)."""
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| [")
    ]


def row_page(row: list[str]) -> str:
    match = LINK.fullmatch(row[0])
    assert match, f"first cell is not a single link: {row[0]!r}"
    return match.group(1)


def relative_links(text: str) -> list[str]:
    """Link targets that name a file in the repository (not a web address, not an anchor of the same page)."""
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def dangling(page: Path) -> list[str]:
    return [t for t in relative_links(page.read_text()) if not (page.parent / t.split("#")[0]).exists()]


def pages() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*.md") if p.name != "README.md")


def test_every_study_page_has_exactly_one_index_row():
    counts = Counter(row_page(row) for row in index_rows(INDEX.read_text()))
    assert len(pages()) >= 25  # the split of the old single file: a glob that finds nothing must not pass
    assert {p.name: counts[p.name] for p in pages() if counts[p.name] != 1} == {}
    assert [name for name in counts if not (RESULTS / name).is_file()] == []


def test_every_index_row_has_date_code_setting_and_status():
    for row in index_rows(INDEX.read_text()):
        assert len(row) == 5 and all(row), row


def test_every_relative_link_in_the_results_pages_resolves():
    assert {p.name: dangling(p) for p in [INDEX, *pages()] if dangling(p)} == {}


def test_statuses_are_the_allowed_words_and_say_why_where_not_current():
    for row in index_rows(INDEX.read_text()):
        match = STATUS_WORD.match(row[4])
        assert match, f"{row_page(row)}: status {row[4]!r} does not start with one of {STATUSES}"
        if match.group(1) in ("superseded", "confounded", "current?"):
            assert len(row[4]) > len(match.group(1)) + 5, (
                f"{row_page(row)}: {match.group(1)} without a reason"
            )


def test_a_page_header_states_the_same_status_as_its_index_row():
    status = {row_page(row): STATUS_WORD.match(row[4]).group(1) for row in index_rows(INDEX.read_text())}
    for page in pages():
        stated = PAGE_STATUS.findall(page.read_text())
        assert stated in ([], [status[page.name]]), f"{page.name}: header {stated}, index {status[page.name]}"


def test_the_helpers_catch_a_dangling_link_and_a_second_row(tmp_path: Path):
    page = tmp_path / "study.md"
    page.write_text("[plot](study/learning.png) [ok](study.md) [web](https://example.org) [here](#top)")
    assert dangling(page) == ["study/learning.png"]
    row = "| [A study](study.md) | 2026-11-23 | — | a setting | current |"
    assert Counter(row_page(r) for r in index_rows(f"{row}\n{row}\n")) == {"study.md": 2}
