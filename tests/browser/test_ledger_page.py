"""A session's ledger and schedules on the dashboard, in headless Chromium: an
INTERRUPT sent from one page stops the task another page watches, a page
following a session opens the task whose turn it is, a queued input cancelled
from the page, refusals in words, and a schedule's next time in the viewer's own
zone through a pause and a resume. Screenshots land in test-artifacts/browser/."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from playwright.async_api import Browser, Page, WebSocketRoute, expect

from tests.browser.pages import ARTIFACTS, DESK, PHONE, assert_fits_the_screen, open_dashboard
from tests.integration.test_api import create_task, start_session, step
from tests.integration.test_claim import claim
from tests.integration.test_ledger import ledger, submit, task
from tests.support import Api, Server, mutate


async def open_ledger(page: Page) -> None:
    """Waits until ``page`` follows its session's ledger (its SNAPSHOT came)."""
    await expect(page.get_by_test_id("ledger-state")).to_have_attribute("data-state", "live")


async def send(page: Page, goal: str, steps: str, policy: str) -> None:
    """Sends an input from the page's form under ``policy``."""
    await page.get_by_test_id("submit-goal").fill(goal)
    await page.get_by_test_id("submit-steps").fill(steps)
    await page.get_by_test_id(f"policy-{policy}").check()
    await page.get_by_test_id("submit").click()


def running(api: Api, session_id: str, holder: str) -> dict[str, Any]:
    """The session's active task claimed by ``holder`` and its first step started,
    as an agent does: the lease."""
    lease = claim(api, holder, session_id=session_id)
    started = step(
        api, "startStep", "StepRefInput", taskId=lease["taskId"], stepIndex=0,
        expectedVersion=task(api, lease["taskId"])["version"], fencingToken=lease["fencingToken"],
    )  # fmt: skip
    assert started["status"] == "RUNNING"
    return lease


async def test_an_interrupt_sent_on_one_page_stops_the_task_another_page_watches(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the ledger followed live (``watchLedger``, ``onLedger`` in app.js on
    ``sessionSubmissions``) and INTERRUPT sent from the page (``submitInput``): two
    pages on a session whose task an agent leased and is running; one sends an
    input under INTERRUPT; the other, which sent nothing, sees it queued and the
    running one asked to stop, then, once the agent finishes the step it is in
    (one of two), that task cancelled, its entry INTERRUPTED by #2 and #2 ACTIVE, whose link opens
    its task, while #3, queued meanwhile, waits. Seen failing with the ledger's
    subscription not sent (the watching page kept #1 ACTIVE alone)."""
    server, token = dashboard
    session = start_session(api)["id"]
    plan = [{"action": "draft reply"}, {"action": "send reply"}]
    first = submit(api, session, goal="Answer Ana", steps=plan)
    lease = running(api, session, "agent-1")
    assert lease["taskId"] == first["taskId"]
    url = f"{server.url}/#token={token}&task={first['taskId']}"
    sender, watcher = [await open_dashboard(browser, url, DESK) for _ in range(2)]
    for page in (sender, watcher):
        await open_ledger(page)
        await expect(page.get_by_test_id("entry-status-1")).to_have_text("active")
        await expect(page.get_by_test_id("status")).to_have_text("running")

    await send(sender, "Answer Bob first", "reply to Bob", "INTERRUPT")
    await expect(sender.get_by_test_id("submit-result")).to_have_text(
        "Sent as #2: the running input is asked to stop; #2 runs next."
    )
    await expect(watcher.get_by_test_id("entry-2")).to_have_attribute("data-status", "QUEUED")
    await expect(watcher.get_by_test_id("entry-policy-2")).to_have_text("if busy: interrupt")
    await expect(watcher.get_by_test_id("entry-actor-2")).to_have_text("by watcher")
    await expect(watcher.get_by_test_id("reason-1")).to_have_text(
        "Asked to stop by #2 (Answer Bob first, by watcher): its task ends at its next step,"
        " what it did kept."
    )
    await expect(watcher.get_by_test_id("stopping")).to_be_visible()
    later = submit(api, session, "ENQUEUE", goal="Answer Cleo")
    await expect(watcher.get_by_test_id("entry-3")).to_have_attribute("data-status", "QUEUED")
    await watcher.screenshot(path=ARTIFACTS / "ledger-interrupt-asked.png", full_page=True)

    done = step(
        api, "completeStep", "CompleteStepInput", taskId=first["taskId"], stepIndex=0,
        expectedVersion=task(api, first["taskId"])["version"], fencingToken=lease["fencingToken"],
    )  # fmt: skip
    assert done["status"] == "CANCELLED"
    await expect(watcher.get_by_test_id("status")).to_have_text("cancelled")
    await expect(watcher.get_by_test_id("stopping")).to_be_hidden()
    await expect(watcher.get_by_test_id("entry-1")).to_have_attribute("data-status", "INTERRUPTED")
    await expect(watcher.get_by_test_id("reason-1")).to_have_text(
        "Interrupted by #2 (Answer Bob first, by watcher): what its task did is kept."
    )
    await expect(watcher.get_by_test_id("entry-2")).to_have_attribute("data-status", "ACTIVE")
    await expect(watcher.get_by_test_id("entry-3")).to_have_attribute("data-status", "QUEUED")
    stored = ledger(api, session)
    assert [(s["seq"], s["status"]) for s in stored] == [
        (1, "INTERRUPTED"),
        (2, "ACTIVE"),
        (3, "QUEUED"),
    ]
    assert stored[2]["taskId"] == later["taskId"]
    await watcher.screenshot(path=ARTIFACTS / "ledger-interrupted.png", full_page=True)

    await watcher.get_by_test_id("entry-task-2").click()
    await expect(watcher.get_by_test_id("goal")).to_have_text("Answer Bob first")
    assert running(api, session, "agent-2")["taskId"] == stored[1]["taskId"]
    await expect(watcher.get_by_test_id("status")).to_have_text("running")
    await expect(watcher.get_by_test_id("entry-1")).to_have_attribute("data-status", "INTERRUPTED")
    for page in (sender, watcher):
        await page.close()


async def test_a_page_following_a_session_opens_the_task_whose_turn_it_is(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards ``follow`` in a session with a ledger (``turn`` in app.js): a page
    opened on the session (``#session=``) opens the ACTIVE input's task, not the
    newer task of an input queued behind it, and waits for the ledger to say which:
    here the ledger's messages are held until the session list (newest task first)
    is drawn. Seen failing with ``follow`` not asking the ledger, and with it not
    waiting for the ledger (both opened the queued task)."""
    server, token = dashboard
    session = start_session(api)["id"]
    first = submit(api, session, goal="Answer Ana")
    queued = submit(api, session, "ENQUEUE", goal="Answer Bob")
    held: list[str | bytes] = []
    holding, released = asyncio.Event(), asyncio.Event()
    routes: list[WebSocketRoute] = []

    async def hold_the_ledger(ws: WebSocketRoute) -> None:
        server_side = ws.connect_to_server()

        def to_page(message: str | bytes) -> None:
            if not released.is_set() and (held or "sessionSubmissions" in str(message)):
                held.append(message)
                holding.set()
            else:
                ws.send(message)

        server_side.on_message(to_page)
        ws.on_message(server_side.send)
        routes.append(ws)

    page = await browser.new_page(viewport=DESK)
    await page.route_web_socket("**/graphql", hold_the_ledger)
    await page.goto(f"{server.url}/#token={token}&session={session}")
    await asyncio.wait_for(holding.wait(), 10)  # the SNAPSHOT
    await expect(page.locator(f"[data-session='{session}'] a[data-task]")).to_have_count(2)
    await expect(page.get_by_test_id("task")).to_be_hidden()  # no pick before the ledger's
    (ledger_socket,) = routes
    released.set()
    for message in held:
        ledger_socket.send(message)
    await expect(page.get_by_test_id("goal")).to_have_text("Answer Ana")
    assert f"task={first['taskId']}" in page.url
    assert queued["status"] == "QUEUED"
    await page.close()


async def test_a_queued_input_is_cancelled_on_the_page_and_refusals_are_said_in_words(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards cancelling from the page (``cancelEntry``, ``cancelSubmission``) and
    the refusals' words (``submitted``): an input queued from the page behind the
    active one is cancelled with its button (CANCELLED, "cancelled by watcher",
    its task removed); REJECT while the session is busy says so and what to do;
    a step action over 200 characters is refused naming the field; neither writes
    anything; the ledger fits a phone's screen. Seen failing with the Cancel
    button's click not handled."""
    server, token = dashboard
    session = start_session(api)["id"]
    first = submit(api, session, goal="Answer Ana")
    url = f"{server.url}/#token={token}&task={first['taskId']}"
    page = await open_dashboard(browser, url, DESK)
    await open_ledger(page)

    await send(page, "Summarise the thread", "summarise", "ENQUEUE")
    await expect(page.get_by_test_id("submit-result")).to_have_text(
        "Sent as #2: queued, it runs once the inputs before it have finished."
    )
    await expect(page.get_by_test_id("entry-2")).to_have_attribute("data-status", "QUEUED")
    await expect(page.get_by_test_id("cancel-1")).to_have_count(0)  # only a queued one
    await page.get_by_test_id("cancel-2").click()
    await expect(page.get_by_test_id("entry-2")).to_have_attribute("data-status", "CANCELLED")
    await expect(page.get_by_test_id("reason-2")).to_have_text("cancelled by watcher")
    await expect(page.get_by_test_id("cancel-2")).to_have_count(0)
    cancelled = ledger(api, session)[1]
    assert (cancelled["status"], cancelled["taskId"]) == ("CANCELLED", None)

    await send(page, "Answer Bob", "reply", "REJECT")
    await expect(page.get_by_test_id("submit-result")).to_have_text(
        "Not sent: the session is busy with #1, and nothing was written. Choose Queue to run it"
        " after, or Interrupt to stop the running one."
    )
    await send(page, "Answer Bob", "x" * 201, "ENQUEUE")
    await expect(page.get_by_test_id("submit-result")).to_have_text(
        "Not sent: steps[0].action: must be at most 200 characters"
    )
    assert [s["seq"] for s in ledger(api, session)] == [1, 2]
    await expect(page.locator("[data-testid^='entry-status-']")).to_have_count(2)
    await page.screenshot(path=ARTIFACTS / "ledger-cancelled.png", full_page=True)
    await page.set_viewport_size(PHONE)
    await assert_fits_the_screen(page, "entries", "submit-form", "submit-result")
    await page.close()


async def test_the_sessions_forms_fold_away_until_it_has_inputs_or_schedules(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards a task page ending on what a person must decide (``unfold`` in
    app.js): under a task whose session has no inputs and no schedules, the form to
    send an input and the schedules (with theirs) are folded away, each a one-line
    summary, so the ledger takes little of a phone's screen, and a click opens
    them; under a task whose session has an input and a schedule, both are open.
    Seen failing with both forms always shown (the ledger some 1,000 px high on a
    phone)."""
    server, token = dashboard
    bare = create_task(api, start_session(api)["id"], 1, goal="Book a trip")
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={bare['id']}", PHONE)
    await open_ledger(page)
    await expect(page.get_by_text("Nothing sent to this session yet.")).to_be_visible()
    for fold, form in (("send-fold", "submit-form"), ("schedules-fold", "schedule-form")):
        await expect(page.get_by_test_id(fold).locator(":scope > summary")).to_be_visible()
        await expect(page.get_by_test_id(form)).to_be_hidden()
    folded = await page.get_by_test_id("ledger").bounding_box()
    assert folded is not None
    assert folded["height"] < 400, f"the folded ledger is {folded['height']} px high"
    await page.screenshot(path=ARTIFACTS / "ledger-folded-phone.png", full_page=True)
    await page.get_by_test_id("send-fold").locator(":scope > summary").click()
    await expect(page.get_by_test_id("submit-form")).to_be_visible()
    await assert_fits_the_screen(page, "ledger", "submit-form")

    session = start_session(api)["id"]
    sent = submit(api, session, goal="Answer Ana")
    mutate(
        api, "createSchedule", "CreateScheduleInput", "... on Schedule { id }",
        sessionId=session, cron="@yearly", goal="Yearly summary", steps=[{"action": "sum"}],
    )  # fmt: skip
    await page.goto(f"{server.url}/#task={sent['taskId']}")
    await expect(page.get_by_test_id("goal")).to_have_text("Answer Ana")
    await expect(page.get_by_test_id("ledger-session")).to_have_text(session)
    await expect(page.get_by_test_id("submit-form")).to_be_visible()
    await expect(page.locator("[data-testid^='schedule-state-']")).to_be_visible()
    await page.close()


SCHEDULE = """query($s: ID!) { session(id: $s) { ... on AgentSession {
  schedules { id version enabled nextFireAt } } } }"""


def schedules(api: Api, session_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api(SCHEDULE, s=session_id)["session"]["schedules"]
    return found


def next_nine_in_new_york(after: datetime) -> datetime:
    """The first 09:00 in New York after ``after``."""
    zone = ZoneInfo("America/New_York")
    day = after.astimezone(zone).date()
    while True:
        nine = datetime(day.year, day.month, day.day, 9, tzinfo=zone)
        if nine > after:
            return nine
        day += timedelta(days=1)


async def test_a_schedule_shows_its_next_time_in_the_viewers_zone_through_a_pause(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the schedules' panel (``renderSchedules``, ``addSchedule``,
    ``changeSchedule``): in a browser set to Tokyo, the new schedule's zone
    defaults to Tokyo; one made for 09:00 in New York shows its next time in
    Tokyo's (the UTC time in its tooltip); pausing it (updateSchedule at its
    version) says it sends nothing, resuming shows the time again, and deleting
    removes it. Seen failing with the time drawn in UTC, and with resume sending
    enabled: false."""
    server, token = dashboard
    session = start_session(api)["id"]
    first = submit(api, session, goal="Answer Ana")
    page = await browser.new_page(viewport=DESK, timezone_id="Asia/Tokyo", locale="en-GB")
    await page.goto(f"{server.url}/#token={token}&task={first['taskId']}")
    await open_ledger(page)
    await page.get_by_test_id("schedules-fold").locator(":scope > summary").click()
    await page.get_by_text("Add a schedule").click()
    await expect(page.get_by_test_id("schedule-zone")).to_have_value("Asia/Tokyo")

    await page.get_by_test_id("schedule-cron").fill("0 9 * * *")
    await page.get_by_test_id("schedule-zone").fill("America/New_York")
    await page.get_by_test_id("schedule-goal").fill("Morning summary")
    await page.get_by_test_id("schedule-steps").fill("summarise")
    asked = datetime.now(UTC)
    await page.get_by_test_id("schedule-add").click()
    await expect(page.locator("[data-testid^='schedule-state-']")).to_have_count(1)
    (made,) = schedules(api, session)
    due = datetime.fromisoformat(made["nextFireAt"])
    assert due == next_nine_in_new_york(asked)
    tokyo = due.astimezone(ZoneInfo("Asia/Tokyo"))
    shown = f"{tokyo:%a} {tokyo.day} {tokyo:%b}, {tokyo:%H:%M}"
    at = page.get_by_test_id(f"schedule-at-{made['id']}")
    await expect(at).to_have_text(shown)
    await expect(at).to_have_attribute("title", f"{due.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC")
    await expect(page.get_by_test_id(f"schedule-next-{made['id']}")).to_have_text(
        f"Next: {shown} (your time, Asia/Tokyo)"
    )
    await page.screenshot(path=ARTIFACTS / "schedule.png", full_page=True)

    await page.get_by_test_id(f"pause-{made['id']}").click()
    await expect(page.get_by_test_id(f"schedule-state-{made['id']}")).to_have_text("paused")
    await expect(page.get_by_test_id(f"schedule-next-{made['id']}")).to_have_text(
        "Paused: it sends nothing until resumed."
    )
    assert schedules(api, session) == [
        {"id": made["id"], "version": 2, "enabled": False, "nextFireAt": None}
    ]
    resuming = datetime.now(UTC)
    await page.get_by_test_id(f"resume-{made['id']}").click()
    await expect(page.get_by_test_id(f"schedule-state-{made['id']}")).to_have_text("on")
    await expect(at).to_have_text(shown)
    (resumed,) = schedules(api, session)
    assert (resumed["version"], resumed["enabled"]) == (3, True)
    assert datetime.fromisoformat(resumed["nextFireAt"]) == next_nine_in_new_york(resuming)

    await page.get_by_test_id(f"delete-{made['id']}").click()
    await expect(page.locator("[data-testid^='schedule-state-']")).to_have_count(0)
    assert schedules(api, session) == []
    await page.close()
