"""The web console in a real headless Chromium against a real Redis: every page renders without
a JavaScript error, the group page follows lag and ownership live, a split appears on the stream
page, actions exist only with ``allow_actions``, and a reset through the console moves the
positions exactly as the CLI's reset. Screenshots go to ``.artifacts/console/``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from tests.support.browser import (
    chromium,
    console,
    javascript_errors,
    open_view,
    screenshot,
    wait_for,
)
from tests.support.cli import as_json
from tests.support.console_setup import make_group, make_stream

pytestmark = pytest.mark.long  # a browser start is ~3 s on this machine; each test is longer

FAST = {"heartbeat_interval": 0.3, "session_timeout": 3.0, "group_refresh_time": 0.1}


@pytest.fixture
def driver() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def test_pages_render_without_errors_and_offer_no_actions_read_only(
    driver: Any, redis_url: str, scope: str
) -> None:
    make_stream(redis_url, scope, 4, 200)
    make_group(redis_url, scope, auto_commit_interval=0.1)
    with StreamManager.from_url(redis_url) as sm:
        sm.scale_stream(scope, "orders", [0], [(0.0, 0.125), (0.125, 0.25)])
        sm.truncate_stream(scope, "orders", sm.tail_cut(scope, "orders"))  # a retention cut
    with console(redis_url) as url:
        open_view(driver, url)
        wait_for(driver, f"document.body.innerText.includes('{scope}')", what="scope listed")
        assert driver.find_element(By.ID, "mode").text == "read-only"
        search = driver.find_element(By.ID, "search")
        search.send_keys(scope)
        rows = driver.find_elements(By.CSS_SELECTOR, "#groups tbody tr")
        assert rows and all(scope in r.text for r in rows)
        driver.find_element(By.CSS_SELECTOR, "#streams th[data-key='events']").click()
        screenshot(driver, "overview")
        for page in (f"#/stream/{scope}/orders", f"#/group/{scope}/billing"):
            open_view(driver, url + page)
            screenshot(driver, page.split("/")[1])
            assert not driver.find_elements(By.ID, "actions")
            assert not driver.find_elements(By.CSS_SELECTOR, "form.action, button.remove-reader")
        assert driver.find_elements(By.CSS_SELECTOR, "#ownership .chip.waiting")
        open_view(driver, f"{url}#/stream/{scope}/orders")
        assert driver.find_elements(By.CSS_SELECTOR, "svg.segment-graph line.cut")
        assert driver.find_elements(By.CSS_SELECTOR, "svg.segment-graph rect.seg.truncated")
        assert driver.find_elements(By.CSS_SELECTOR, "svg.segment-graph circle.position")
        assert javascript_errors(driver) == []


def test_group_page_follows_lag_and_ownership_live(driver: Any, redis_url: str, scope: str) -> None:
    make_stream(redis_url, scope, 4, 4000)
    make_group(redis_url, scope, auto_commit_interval=0.1, **FAST)
    stop = threading.Event()
    with (
        console(redis_url) as url,
        EventStreamClientFactory.from_url(scope, redis_url) as factory,
    ):
        open_view(driver, f"{url}#/group/{scope}/billing")
        owners = "document.querySelectorAll('#ownership .reader[data-reader]').length"
        total = "Number(document.getElementById('total-lag').textContent)"
        assert driver.execute_script(f"return {owners}") == 0
        assert driver.execute_script(f"return {total}") == 4000
        first = factory.create_reader("r1", "billing", UTF8StringSerializer())

        def read_slowly() -> None:
            while not stop.is_set():
                for _ in range(60):
                    first.read_next_event(timeout=0.2)
                stop.wait(0.25)

        thread = threading.Thread(target=read_slowly, daemon=True)
        thread.start()
        try:
            wait_for(driver, f"{owners} == 1", what="r1 in the ownership map")
            seen = [driver.execute_script(f"return {total}")]
            for _ in range(3):  # three pushes, each with less lag than the one before
                wait_for(driver, f"{total} < {seen[-1]}", what=f"lag below {seen[-1]}")
                seen.append(driver.execute_script(f"return {total}"))
            assert seen == sorted(seen, reverse=True) and seen[-1] < 4000
            second = factory.create_reader("r2", "billing", UTF8StringSerializer())
            try:
                wait_for(driver, f"{owners} == 2", what="r2 in the ownership map")
                second.read_next_event(timeout=1)  # r2 acquires its share
                wait_for(
                    driver,
                    "document.querySelector('#ownership .reader[data-reader=\"r2\"] .chip')",
                    what="r2 owning segments",
                )
                samples = driver.execute_script(
                    "return Number(document.querySelector('svg.lag-chart').dataset.samples)"
                )
                assert samples >= 3
                screenshot(driver, "group-live")
            finally:
                second.close()
        finally:
            stop.set()
            thread.join(10)
            first.close()
        assert javascript_errors(driver) == []


def test_a_split_appears_on_the_stream_page(driver: Any, redis_url: str, scope: str) -> None:
    make_stream(redis_url, scope, 2, 50)
    with console(redis_url) as url:
        open_view(driver, f"{url}#/stream/{scope}/orders")
        graph = "document.querySelector('svg.segment-graph')"
        assert driver.execute_script(f"return {graph}.dataset.epochs") == "1"
        assert not driver.find_elements(By.CSS_SELECTOR, "svg.segment-graph path.edge")
        with StreamManager.from_url(redis_url) as sm:
            sm.scale_stream(scope, "orders", [0], [(0.0, 0.25), (0.25, 0.5)])
        wait_for(driver, f"{graph}.dataset.epochs == '2'", what="the new epoch drawn")
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.segment-graph path.edge")) == 2
        assert len(driver.find_elements(By.CSS_SELECTOR, "svg.segment-graph rect.seg.sealed")) == 1
        screenshot(driver, "stream-split")
        assert javascript_errors(driver) == []


def test_a_reset_through_the_console_moves_positions_like_the_cli(
    driver: Any, redis_url: str, scope: str
) -> None:
    make_stream(redis_url, scope, 3, 300)
    make_group(redis_url, scope, auto_commit_interval=0.1)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader = factory.create_reader("r1", "billing", UTF8StringSerializer())
        for _ in range(120):
            reader.read_next_event(timeout=1)
        reader.commit()
        reader.close()  # committed positions stay; no reader must acknowledge the reset
    cli_plan = as_json(redis_url, "group", "reset", f"{scope}/billing", "--shift-by", "-7")
    expected = {(p["stream"], p["segment"]): p["new"] for p in cli_plan["plan"]}
    with console(redis_url, allow_actions=True) as url:
        open_view(driver, f"{url}#/group/{scope}/billing")
        assert driver.find_element(By.ID, "mode").text == "actions allowed"
        form = driver.find_element(By.ID, "reset-form")
        Select(form.find_element(By.NAME, "scenario")).select_by_value("shift_by")
        form.find_element(By.NAME, "value").send_keys("-7")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(driver, "document.getElementById('apply-reset')", what="the plan")
        shown = driver.execute_script(
            "return [...document.querySelectorAll('#reset-plan tbody tr')].map("
            "r => [...r.cells].map(c => c.textContent))"
        )
        assert shown == [
            [p["stream"], str(p["segment"]), str(p["current"]), str(p["new"])]
            for p in cli_plan["plan"]
        ]
        screenshot(driver, "group-reset-plan")
        driver.find_element(By.ID, "apply-reset").click()
        driver.switch_to.alert.accept()
        wait_for(driver, "document.getElementById('reset-applied')", what="reset applied")
        assert javascript_errors(driver) == []
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        positions = rgm.get_reader_group("billing").refresh().positions()
    assert positions == expected
    history = as_json(redis_url, "group", "history", f"{scope}/billing")["entries"]
    assert history[-1]["by"].startswith("console@") and "ResetGroup" in history[-1]["what"]
