"""A task whose log has a hole, in Chromium: an event row deleted straight from the
database, as a server fault once left one (a write that counted an event it never
stored). The page says which seq is missing, in the log and at the history slider,
instead of stepping over it or failing."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

from playwright.async_api import Browser, Page, expect

from tests.browser.pages import ARTIFACTS, DESK, open_dashboard
from tests.browser.test_history_page import expected, on_page, task_at, task_now
from tests.integration.test_api import create_task, start_session, step
from tests.support import Api, Server


def forget_event(server: Server, task_id: str, seq: int) -> None:
    """Delete event ``seq`` of the task from the server's SQLite file."""
    path = server.database_url.removeprefix("sqlite://")
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db, db:
        deleted = db.execute(
            "DELETE FROM task_events WHERE seq = ?"
            " AND task_id = (SELECT id FROM tasks WHERE public_id = ?)",
            (seq, task_id),
        ).rowcount
    assert deleted == 1, f"event {seq} of {task_id} was there to delete"


async def scrub_to(page: Page, seq: int, label: str) -> None:
    """Move the history slider to ``seq`` and wait until the page says ``label``."""
    await page.get_by_test_id("scrubber").fill(str(seq))
    await expect(page.get_by_test_id("scrub-label")).to_have_text(label)


async def test_a_hole_in_the_log_is_said_in_the_log_and_at_the_slider(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the page's reading of a log with a hole (``loadLog``, ``missingUpTo``,
    ``pastAt`` in app.js). Event 3 of 6 is deleted before the page opens: the log
    has an entry saying seq 3 is missing between events 2 and 4, and the slider at 3
    says so and shows the task after event 2. Event 5 is deleted once the page
    has told it: taskAt fails there, the page reads the log, and at 5 says it is
    missing and shows the task after event 4. Seqs 2 and 4 still show taskAt's
    task. Before, the log stepped from 2 to 4 as if nothing lay between, and at 3
    the slider said only that it could not read the past, with taskAt's error."""
    server, token = dashboard
    task = create_task(api, start_session(api)["id"], 3, goal="Mind the gap")
    tid = task["id"]
    version = 1

    def write(name: str, kind: str, **input: Any) -> None:
        nonlocal version
        version = step(api, name, kind, taskId=tid, expectedVersion=version, **input)["version"]

    for index in (0, 1):
        write("startStep", "StepRefInput", stepIndex=index)
        write("completeStep", "CompleteStepInput", stepIndex=index, output={"part": index})
    write("startStep", "StepRefInput", stepIndex=2)
    assert task_now(api, tid)["eventSeq"] == 6
    at_two, at_four = task_at(api, tid, 2), task_at(api, tid, 4)
    forget_event(server, tid, 3)

    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK)
    log = page.get_by_test_id("events")
    await expect(log.locator("li[data-seq]")).to_have_count(6)
    hole = log.locator("li[data-seq='3']")
    await expect(hole).to_have_class("k-MISSING")
    await expect(hole).to_have_text("seq 3 is missing from this task's log", use_inner_text=True)
    await expect(log.locator("li[data-seq='4']")).to_contain_text(
        "step 1 step-1: PENDING -> RUNNING"
    )
    await expect(page.get_by_test_id("scrub-label")).to_contain_text("event 6 of 6 · ")

    await scrub_to(page, 2, f"event 2 of 6 · {await told_at(page, 2)}")
    await expect(page.get_by_test_id("task")).to_have_attribute("data-seq", "2")
    assert await on_page(page) == expected(at_two)

    await scrub_to(
        page,
        3,
        "event 3 of 6 · seq 3 is missing from this task's log: shown as it stood after event 2",
    )
    await expect(page.get_by_test_id("past")).to_be_visible()
    await expect(page.locator("#past-seq")).to_have_text("2")
    assert await on_page(page) == expected(at_two)
    await page.screenshot(path=ARTIFACTS / "history-hole.png", full_page=True)

    await scrub_to(page, 4, f"event 4 of 6 · {await told_at(page, 4)}")
    assert await on_page(page) == expected(at_four)

    await asyncio.to_thread(forget_event, server, tid, 5)
    await scrub_to(
        page,
        5,
        "event 5 of 6 · seq 5 is missing from this task's log: shown as it stood after event 4",
    )
    await expect(page.locator("#past-seq")).to_have_text("4")
    assert await on_page(page) == expected(at_four)


async def told_at(page: Page, seq: int) -> str:
    """What the slider's label says of event ``seq`` as the log tells it: the time and
    the sentence of its line (the line's own text, without who wrote it)."""
    said: str = await page.evaluate(
        """(seq) => {
      const line = document.querySelector(`#events li[data-seq="${seq}"] summary`);
      const own = [...line.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE);
      return line.querySelector(".when").textContent + " · " +
        own.map((n) => n.textContent).join("").trim();
    }""",
        seq,
    )
    return said
