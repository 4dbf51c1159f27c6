"""The dashboard in a real headless Chromium: two pages follow one task while an agent
works it, a decision clicked on one page shows on the other, and both pages ride
out a server restart without a reload. Screenshots land in test-artifacts/browser/."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from playwright.async_api import Browser, Page, Request, expect

from runstate.client.documents import document_id
from runstate.web.dashboard import operations
from tests.browser.pages import ARTIFACTS, DESK, open_dashboard, sends
from tests.integration.test_api import create_task, start_session, step
from tests.integration.test_lifecycle import at_second_step, resume
from tests.support import Api, Server, mutate, restart

STEPS: list[dict[str, Any]] = [
    {"action": "search flights"},
    {"action": "search hotels"},
    {"action": "book flight", "idempotent": False},
    {"action": "book hotel"},
    {"action": "send confirmation"},
]


async def open_task(browser: Browser, base: str, token: str, task_id: str) -> Page:
    page = await open_dashboard(browser, f"{base}/#token={token}&task={task_id}", DESK)
    await page.evaluate("window.loadedOnce = true")  # gone if the page ever reloads
    return page


async def statuses(page: Page) -> list[str | None]:
    rows = page.locator("li[data-testid^='step-']")
    return [await rows.nth(i).get_attribute("data-status") for i in range(await rows.count())]


async def seqs(page: Page) -> list[int]:
    items = page.locator("[data-testid=events] li")
    values = [await items.nth(i).get_attribute("data-seq") for i in range(await items.count())]
    return sorted(int(v) for v in values if v is not None)


async def both(pages: list[Page], check: Any) -> None:
    await asyncio.gather(*(check(page) for page in pages))


async def test_two_pages_follow_a_task_through_a_decision_and_a_restart(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    server, token = dashboard
    session = start_session(api)
    task = create_task(api, session["id"], STEPS, goal="Trip")
    tid = task["id"]
    pages = [await open_task(browser, server.url, token, tid) for _ in range(2)]
    await both(pages, lambda p: expect(p.get_by_test_id("progress")).to_have_text("0%"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    version = 1

    def drive(index: int) -> None:
        nonlocal version
        for name, kind in (("startStep", "StepRefInput"), ("completeStep", "CompleteStepInput")):
            result = step(api, name, kind, taskId=tid, stepIndex=index, expectedVersion=version)
            version = result["version"]

    for index in (0, 1):
        await asyncio.to_thread(drive, index)
    await both(
        pages,
        lambda p: expect(p.get_by_test_id("step-1")).to_have_attribute("data-status", "SUCCESS"),
    )
    await both(pages, lambda p: expect(p.get_by_test_id("progress")).to_have_text("40%"))

    await asyncio.to_thread(restart, server)  # the pages see the socket drop, then recover
    started = await asyncio.to_thread(
        step, api, "startStep", "StepRefInput", taskId=tid, stepIndex=2, expectedVersion=version
    )
    plan = mutate(
        api, "resumeTask", "ResumeTaskInput", "... on ResumePlan { needsDecision }", taskId=tid
    )
    assert (started["status"], plan["needsDecision"]) == ("RUNNING", True)
    await both(pages, lambda p: expect(p.get_by_test_id("decision")).to_be_visible(timeout=20_000))
    await both(
        pages, lambda p: expect(p.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    )
    await pages[0].screenshot(path=ARTIFACTS / "awaiting-decision.png", full_page=True)

    await pages[0].get_by_test_id("skip").click()
    await both(
        pages,
        lambda p: expect(p.get_by_test_id("step-2")).to_have_attribute("data-status", "SKIPPED"),
    )
    await both(pages, lambda p: expect(p.get_by_test_id("decision")).to_be_hidden())

    version = api("query($id: ID!) { task(id: $id) { ... on Task { version } } }", id=tid)["task"][
        "version"
    ]
    for index in (3, 4):
        await asyncio.to_thread(drive, index)
    await both(pages, lambda p: expect(p.get_by_test_id("progress")).to_have_text("100%"))
    await both(pages, lambda p: expect(p.get_by_test_id("status")).to_have_text("completed"))

    final = api(
        "query($id: ID!) { task(id: $id) { ... on Task { eventSeq steps { status } } } }", id=tid
    )["task"]
    expected = [s["status"] for s in final["steps"]]
    assert expected == ["SUCCESS", "SUCCESS", "SKIPPED", "SUCCESS", "SUCCESS"]
    listed = pages[0].locator(
        f"[data-session='{session['id']}'] a[data-task='{tid}'] small:not(.task-meta)"
    )
    await expect(listed).to_have_text("completed · 100%")
    for index, page in enumerate(pages):
        assert await statuses(page) == expected
        assert await seqs(page) == list(range(1, final["eventSeq"] + 1))
        assert await page.evaluate("window.loadedOnce") is True, "the page never reloaded"
        await page.screenshot(path=ARTIFACTS / f"completed-page-{index + 1}.png", full_page=True)


async def test_without_a_token_the_page_asks_for_one(
    dashboard: tuple[Server, str], browser: Browser
) -> None:
    """Guards the sign-in form's check of the token: a refused one is said so, and
    the form stays (it once went back to an empty form without a word)."""
    server, token = dashboard
    page = await browser.new_page()
    await page.goto(server.url)
    await expect(page.locator("#signin")).to_be_visible()
    await page.fill("#token", "rs_not-a-token")
    await page.click("#signin button")
    await expect(page.get_by_test_id("signin-error")).to_have_text(
        "That token was refused: it is mistyped, revoked, or from another runstate."
    )
    await expect(page.locator("#signin")).to_be_visible()
    await page.fill("#token", token)
    await page.click("#signin button")
    await expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    await expect(page.locator("#signin")).to_be_hidden()
    assert token not in page.url, "the token never goes into the address bar"


async def test_a_link_to_a_missing_task_says_so_and_draws_no_task(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the missing-task notice: a link naming a task this token cannot see
    (unknown, or another user's) says so, and no empty task skeleton (goal, 0%,
    steps, history) is drawn under it; a known task opened next shows as usual."""
    server, token = dashboard
    known = create_task(api, start_session(api)["id"], STEPS, goal="A real trip")
    page = await browser.new_page(viewport=DESK)
    await page.goto(f"{server.url}/#token={token}&task=no-such-trip")
    await expect(page.get_by_test_id("missing")).to_contain_text('There is no task "no-such-trip"')
    await expect(page.get_by_test_id("task")).to_be_hidden()
    await expect(page.get_by_test_id("conn")).to_have_text("no such task")
    await page.goto(f"{server.url}/#task={known['id']}")
    await expect(page.locator("#goal")).to_have_text("A real trip")
    await expect(page.get_by_test_id("missing")).to_be_hidden()
    await page.close()


async def test_the_page_names_its_documents_by_id(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the page's side of the trusted documents (``runstate.web.dashboard``,
    ``app.js``'s ``graphql``): every request it makes over HTTP, the session list,
    the log, the lease and a decision among them, names a registered document by
    ``documentId`` and sends no text. Sending the text again fails here."""
    server, token = dashboard
    tid = at_second_step(api, "RUNNING", idempotent=False)["id"]
    resume(api, tid)
    sent: list[dict[str, Any]] = []
    page = await browser.new_page(viewport=DESK)

    def record(request: Request) -> None:
        if request.url.endswith("/graphql"):
            sent.append(json.loads(request.post_data or "{}"))

    page.on("request", record)
    async with page.expect_request(lambda r: sends(r, "pageLease"), timeout=10_000):
        await page.goto(f"{server.url}/#token={token}&task={tid}")
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    await page.get_by_test_id("skip").click()
    await expect(page.get_by_test_id("step-1")).to_have_attribute("data-status", "SKIPPED")
    names = {document_id(body): name for name, body in operations().items()}
    assert all(set(body) <= {"documentId", "variables"} for body in sent), sent
    assert {"pageSessions", "pageLog", "pageLease", "pageDecide"} <= {
        names[body["documentId"]] for body in sent
    }
    await page.close()


async def test_a_link_with_a_session_follows_that_sessions_tasks_only(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards following one session (``#session=``, as ``runstate demo``'s link
    says: ``follow`` in app.js): an earlier session's trip waits for a decision,
    the followed session has no task yet; the page says it waits for that
    session's first task (and not how to start a demo agent: that run has one,
    which once read as ``make run`` under ``make run-langgraph``) and opens it
    once it exists, not the old one, and then stays on it while a newer task of
    the session starts. The control: a page without ``#session=``, opened first,
    opens the old waiting trip; before any task, such a page says how to start
    one."""
    server, token = dashboard
    bare = await browser.new_page(viewport=DESK)
    await bare.goto(f"{server.url}/#token={token}")
    await expect(bare.get_by_test_id("empty-any")).to_be_visible(timeout=10_000)
    await expect(bare.get_by_test_id("empty-session")).to_be_hidden()
    await bare.close()
    old = at_second_step(api, "RUNNING", idempotent=False)["id"]
    resume(api, old)  # waits for a decision: what the page once opened on
    fresh = start_session(api, id="demo-20261204-120000")
    control = await browser.new_page(viewport=DESK)
    await control.goto(f"{server.url}/#token={token}")
    await expect(control.get_by_test_id("goal")).to_have_text("resume me", timeout=10_000)
    await control.close()
    page = await browser.new_page(viewport=DESK)
    await page.goto(f"{server.url}/#token={token}&session={fresh['id']}")
    await expect(page.get_by_test_id("empty-session")).to_contain_text(fresh["id"])
    await expect(page.get_by_test_id("empty-any")).to_be_hidden()
    first = create_task(api, fresh["id"], STEPS, goal="Trip one")
    await expect(page.get_by_test_id("goal")).to_have_text("Trip one", timeout=10_000)
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    create_task(api, fresh["id"], STEPS, goal="Trip two")
    listed = page.locator(f"[data-session='{fresh['id']}'] a[data-task]")
    await expect(listed).to_have_count(2, timeout=10_000)
    await expect(page.get_by_test_id("goal")).to_have_text("Trip one")
    assert f"task={first['id']}" in page.url
    await page.close()


async def test_the_list_tells_tasks_of_one_goal_apart(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the task list's second line (``taskMeta`` in app.js): two trips of one
    goal and a fork of one of them show three different lines: each task's id's
    start and creation time, and for the fork its source's goal and event. Without
    it the three entries read the same."""
    server, token = dashboard
    session = start_session(api)
    first = create_task(api, session["id"], STEPS, goal="Book a trip to Lisbon for Ana")
    second = create_task(api, session["id"], STEPS, goal="Book a trip to Lisbon for Ana")
    fork = mutate(
        api,
        "forkTask",
        "ForkTaskInput",
        "... on Task { id }",
        taskId=first["id"],
        atSeq=1,
    )
    page = await open_task(browser, server.url, token, second["id"])
    metas = [page.get_by_test_id(f"meta-{t['id']}") for t in (first, second, fork)]
    await expect(metas[0]).to_have_text(re.compile(rf"^{first['id'][:8]} · created \S+"))
    await expect(metas[1]).to_have_text(re.compile(rf"^{second['id'][:8]} · created \S+"))
    await expect(metas[2]).to_have_text(
        re.compile(r'^fork of "Book a trip to Lisbon for Ana" at event 1 · created \S+')
    )
    await page.close()


async def test_the_list_shows_a_chosen_task_id_whole(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards ``taskMeta`` on ids a client chose: only a UUID is cut to its start;
    "first-weekend" and "first-weekend-2" are shown whole (they both read
    "first-we"), each with its id as the line's title."""
    server, token = dashboard
    session = start_session(api)
    ids = ["first-weekend", "first-weekend-2"]
    for task_id in ids:
        create_task(api, session["id"], STEPS, goal="Plan a weekend", id=task_id)
    page = await open_task(browser, server.url, token, ids[0])
    for task_id in ids:
        meta = page.get_by_test_id(f"meta-{task_id}")
        await expect(meta).to_have_text(re.compile(rf"^{task_id} · created \S+"))
        await expect(meta).to_have_attribute("title", task_id)
    await page.close()
