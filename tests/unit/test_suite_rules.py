"""The suite-wide rule of tests/conftest.py, checked on an inner pytest run."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT_CONFTEST = Path(__file__).parents[1] / "conftest.py"


def test_a_skip_for_a_missing_module_fails_the_run(pytester: pytest.Pytester):
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(
        test_inner="""
import pytest
def test_needs_it():
    pytest.importorskip("a_module_that_is_not_there_4711")
def test_no_gpu():
    pytest.skip("needs a CUDA device")
"""
    )
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skipped for a missing dependency*", "*a_module_that_is_not_there_4711*"])
    assert "test_no_gpu" not in "\n".join(line for line in result.outlines if "missing dependency" in line)


def test_other_skips_stay_skips(pytester: pytest.Pytester):
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(
        test_inner="import pytest\ndef test_no_gpu():\n    pytest.skip('needs a CUDA device')\n"
    )
    assert pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider").ret == pytest.ExitCode.OK
