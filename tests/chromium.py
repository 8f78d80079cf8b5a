"""A real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, installed by ``install.sh test``) driven
through Selenium, with its console kept: a page the product makes is tested as a user sees it. The fixture is the
whole suite's (``tests/conftest.py``): the report of a tiny real run opens in it too (tests/ray/test_train.py)."""

from __future__ import annotations

import shutil
import tempfile

import pytest

# Debian's build, started as the machines here need it: no sandbox as root, no background connections (the
# closed network refuses them), a fresh profile.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def chromium():
    webdriver = pytest.importorskip("selenium.webdriver")
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (bash install.sh test installs them)"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (*FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='hierarl_chromium_')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(driver), options=options)
    yield browser
    browser.quit()


def console_errors(browser) -> list[str]:
    """The console's errors since the last call (uncaught exceptions included)."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def open_page(browser, path, timeout: float = 30.0) -> None:
    """Load the local file ``path`` and wait until its script has drawn it (``document.body.dataset.ready``, which
    the report sets last): a large inline script may still run when the load returns."""
    from pathlib import Path

    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(Path(path).as_uri())
    WebDriverWait(browser, timeout).until(
        lambda b: b.execute_script("return document.body.dataset.ready === '1'")
    )
