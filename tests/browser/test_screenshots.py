"""The README's screenshots, taken of the real demo: ``runstate demo`` on a fresh
SQLite file, the link it prints opened in Chromium on a desk (1280x1180) and on a
phone (390x844) once the first trip's agent was killed at "book flight" and the
step waits for a person's decision. The test checks that the page shows what the
README's caption says. With ``RUNSTATE_SCREENSHOTS=docs`` (``make screenshots``)
it writes docs/dashboard.png and docs/dashboard-phone.png, which the README
shows; otherwise the images go to test-artifacts/browser/."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, ViewportSize, expect

from tests.browser.pages import ARTIFACTS, PHONE, assert_fits_the_screen, open_dashboard
from tests.integration.test_first_run import ctrl_c, start, stop
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"http://127\.0\.0\.1:\d+/#token=\S+")
SHOT: ViewportSize = {"width": 1280, "height": 1180}
"""The desk image's size: tall enough for the question and the step in doubt."""
DECISION_WITHIN_MS = 120_000
"""How long the first trip may take to reach its decision: its steps, the agent's
kill, the lease's lapse and the pool's takeover."""


def screenshots_dir() -> Path:
    """Where the images go: the directory ``RUNSTATE_SCREENSHOTS`` names (relative
    to the repository), or the browser tests' artifacts."""
    named = os.environ.get("RUNSTATE_SCREENSHOTS")
    return ROOT / named if named else ARTIFACTS


@pytest.fixture
def demo_link(tmp_path: Path) -> Iterator[str]:
    """``runstate demo`` on a fresh SQLite file; the signed-in link it prints."""
    demo, output = start(
        [sys.executable, "-m", "runstate", "demo", "--port", str(free_port())],
        tmp_path,
        RUNSTATE_DATABASE_URL=f"sqlite://{tmp_path / 'demo.db'}",
    )
    try:
        found = LINK.search(output.until("#token=", 60))
        assert found is not None, output.lines
        yield found.group()
        assert ctrl_c(demo, output)[-1] == "runstate: stopped\n"
    finally:
        stop(demo)


async def assert_waits_for_a_decision_on_book_flight(page: Page) -> None:
    """The caption's claim: a trip booking whose agent crashed at "book flight",
    waiting for a person's decision."""
    await expect(page.get_by_test_id("decision")).to_be_visible(timeout=DECISION_WITHIN_MS)
    await expect(page.locator("#goal")).to_have_text(re.compile(r"^Book a trip to "))
    await expect(page.get_by_test_id("question")).to_contain_text('Step 3 "book flight"')
    await expect(page.get_by_test_id("step-3")).to_have_attribute("data-status", "IN_DOUBT")
    for done in range(3):
        await expect(page.get_by_test_id(f"step-{done}")).to_have_attribute(
            "data-status", "SUCCESS"
        )
    await expect(page.get_by_test_id("events")).to_contain_text(
        "step 3 book flight: RUNNING -> IN_DOUBT"
    )


async def test_the_readmes_screenshots_show_the_demo_waiting_for_a_decision(
    demo_link: str, browser: Browser
) -> None:
    """Guards the README's images against going stale: they are taken here, of the
    demo as ``make run`` starts it, and only once the page shows what the caption
    says."""
    target = screenshots_dir()
    target.mkdir(parents=True, exist_ok=True)
    desk = await open_dashboard(browser, demo_link, SHOT)
    await assert_waits_for_a_decision_on_book_flight(desk)
    await desk.screenshot(path=target / "dashboard.png")

    phone = await open_dashboard(browser, demo_link, PHONE)
    await assert_waits_for_a_decision_on_book_flight(phone)
    await assert_fits_the_screen(phone, "task", "question")
    await phone.screenshot(path=target / "dashboard-phone.png")
