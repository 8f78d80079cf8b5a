"""Suite-wide rule: a test skipped because a dependency is missing fails the run.

`install.sh test` installs everything the suite needs, so a skip for a missing module means the install and the
suite disagree (once, the WebShop reference check was silently skipped for a missing `thefuzz`). Skips for
other reasons (no GPU, no data at HIERARL_SHARED, not Linux) stay skips.
"""

from __future__ import annotations

import pytest

from tests.chromium import chromium  # noqa: F401  (the suite-wide headless browser fixture)
from tests.tokenizer import tok  # noqa: F401  (the suite-wide SmolLM2 tokenizer fixture)

pytest_plugins = ["pytester"]

_MISSING_DEPENDENCY = ("could not import", "no module named", "not installed", "pip install")


def missing_dependency(reason: str) -> bool:
    text = reason.lower()
    return any(marker in text for marker in _MISSING_DEPENDENCY)


_skipped_for_imports: list[str] = []


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and missing_dependency(_skip_reason(report)):
        _skipped_for_imports.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped and missing_dependency(_skip_reason(report)):
        _skipped_for_imports.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_for_imports:
        lines = "\n  ".join(_skipped_for_imports)
        print(
            f"\nFAILED: tests skipped for a missing dependency (install with `bash install.sh test`):\n  {lines}"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
