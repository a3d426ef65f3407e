"""A real headless Chromium (Debian's, driven through its chromedriver by Selenium) and a console
served in-process, for the console's browser tests and bench. Never downloads a browser: when
/usr/bin/chromium or /usr/bin/chromedriver is missing the caller FAILS (``make test-long`` installs
them when run as root)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from readergroup.console.app import ConsoleSettings, create_app
from readergroup.console.server import ConsoleServer
from readergroup.storage.connection import RedisConnection

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parent.parent.parent / ".artifacts" / "console"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)


@contextlib.contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A fresh headless Chromium (own profile directory, removed afterwards)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, (
        f"{missing} missing: apt-get install -y chromium chromium-driver (make test-long does "
        "it as root); the console's browser tests fail without a real browser"
    )
    profile = tempfile.mkdtemp(prefix="rg-console-chromium-")
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextlib.contextmanager
def console(redis_url: str, shown_url: str | None = None, **settings: Any) -> Iterator[str]:
    """The console on a free loopback port for ``redis_url`` (showing ``shown_url`` as the
    URL it reads, if given); yields its URL."""
    connection = RedisConnection.from_url(redis_url)
    try:
        shown = ConsoleSettings(redis_url=shown_url or redis_url, **settings)
        app = create_app(shown, connection)
        with ConsoleServer(app) as server:
            yield server.url
    finally:
        connection.close()


def javascript_errors(driver: webdriver.Chrome) -> list[str]:
    """Severe entries of the browser's console since the last call (errors, failed loads)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(driver: webdriver.Chrome, script: str, timeout: float = 20.0, what: str = "") -> Any:
    """Poll ``return <script>`` in the page until it is truthy; its value."""
    began = time.monotonic()
    while True:
        value = driver.execute_script(f"return {script}")
        if value:
            return value
        assert time.monotonic() - began < timeout, f"{what or script} not true within {timeout}s"
        time.sleep(0.05)


def open_view(driver: webdriver.Chrome, url: str, timeout: float = 20.0) -> None:
    """Load ``url`` afresh (not as a hash change of the page shown) and wait until the page
    rendered its first data."""
    driver.get("about:blank")
    driver.get(url)
    wait_for(driver, "window.consoleRenders > 0", timeout, f"first render of {url}")


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, min(4000, max(1000, int(height) + 40)))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    return path
