"""An agent dies mid-step, seen in Chromium on a desk (1400x900) and on a phone
(390x844): the page shows the dead agent's lease running out, then "no agent:
lease lapsed"; once a worker resumes, the step IN_DOUBT with its question; and
COMPLETE with an output typed on the phone makes the step SUCCESS with that output.
The phone opens the bare link (no task named) and lands on the most recent active
task. Screenshots of every stage land in test-artifacts/browser/."""

from __future__ import annotations

import asyncio
import re
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from typing import Any

from playwright.async_api import Browser, Page, Route, expect

from tests.browser.pages import (
    ARTIFACTS,
    DESK,
    PHONE,
    assert_fits_the_screen,
    open_dashboard,
    sends,
)
from tests.integration.test_api import create_task, start_session, step
from tests.integration.test_claim import claim
from tests.integration.test_lifecycle import acquire, at_second_step, resume
from tests.support import TASK, AgentProcess, Api, Server, mutate, settled

PLAN: list[dict[str, Any]] = [
    {"action": "search flights"},
    {"action": "compare prices"},
    {"action": "book flight", "idempotent": False},
    {"action": "send confirmation"},
]


async def shoot(pages: dict[str, Page], stage: str) -> None:
    for name, page in pages.items():
        await page.screenshot(path=ARTIFACTS / f"crash-{stage}-{name}.png", full_page=True)


async def test_a_crash_is_shown_and_decided_from_a_phone(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the lease display (its countdown, the lapse read from the clock and
    from ``stalled``), the decision panel with its output field and reason, the log
    saying who decided and why, the crashed step's times (its start, and when its
    agent's lease lapsed: it once said "ran 0.0 s, then its agent stopped"), the
    opening on the most recent active task, and the phone layout."""
    server, token = dashboard
    session = start_session(api)
    create_task(api, session["id"], PLAN, goal="An older trip")  # PLANNED: active, but older
    task = create_task(api, session["id"], PLAN, goal="Book a trip to Kyoto")
    tid = task["id"]
    # A lease that outlasts opening two pages on a slow machine: the agent pauses
    # without renewing it.
    first = AgentProcess(
        server.url, token, tid, "--holder", "agent-1", "--ttl", "10", "--pause-at", "book flight"
    )
    try:
        first.until(lambda line: line.get("event") == "paused")
        # Newer, but not active:
        done = create_task(api, session["id"], PLAN, goal="A cancelled trip")
        cancelled = mutate(
            api,
            "setTaskStatus",
            "SetTaskStatusInput",
            TASK,
            taskId=done["id"],
            expectedVersion=1,
            status="CANCELLED",
        )
        assert cancelled["status"] == "CANCELLED"

        pages = {
            "desk": await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK),
            "phone": await open_dashboard(browser, f"{server.url}/#token={token}", PHONE),
        }
        for page in pages.values():
            await expect(page.locator("#goal")).to_have_text("Book a trip to Kyoto")
            await expect(page.get_by_test_id("step-2")).to_have_attribute("data-status", "RUNNING")
            await expect(page.get_by_test_id("lease")).to_have_attribute("data-state", "held")
            await expect(page.get_by_test_id("lease")).to_contain_text("agent-1 holds the lease")
            await expect(page.get_by_test_id("time-2")).to_contain_text("running for")
        assert f"task={tid}" in pages["phone"].url, "the bare link opened the active task"
        await shoot(pages, "1-running")
        held = await asyncio.to_thread(
            api,
            "query($id: ID!) { task(id: $id) { ... on Task { lock { expiresAt }"
            " steps { startedAt } } } }",
            id=tid,
        )
    finally:
        first.kill()  # SIGKILL while "book flight" is RUNNING

    for page in pages.values():
        await expect(page.get_by_test_id("agent")).to_have_text(
            "no agent: lease lapsed", timeout=30_000
        )
        await expect(page.get_by_test_id("lease")).to_have_attribute("data-state", "lapsed")
        await expect(page.get_by_test_id("lease")).to_contain_text("agent-1")
    await shoot(pages, "2-lapsed")

    second = AgentProcess(server.url, token, tid, "--holder", "agent-2", "--ttl", "3")
    try:
        assert second.rest(within=60)[-1] == {"event": "needs-decision", "steps": [2]}
    finally:
        second.kill()
    for page in pages.values():
        await expect(page.get_by_test_id("decision")).to_be_visible()
        await expect(page.get_by_test_id("question")).to_contain_text('Step 2 "book flight"')
        await expect(page.get_by_test_id("step-2")).to_have_attribute("data-status", "IN_DOUBT")
        await expect(page.get_by_test_id("time-2")).to_contain_text("waiting for you")
        await expect(page).to_have_title("(1) Decision needed · Book a trip to Kyoto · runstate")
        log = page.get_by_test_id("events")
        await expect(log).to_contain_text("agent-2 took over from agent-1 (lease 2)")
        await expect(log).to_contain_text(
            "step 2 book flight: RUNNING -> IN_DOUBT; task: RUNNING -> AWAITING_DECISION"
        )
    for name, page in pages.items():
        await page.get_by_test_id("retry").scroll_into_view_if_needed()
        await assert_fits_the_screen(page, "task", "question", "retry", "skip", "complete")
        await page.screenshot(path=ARTIFACTS / f"crash-3-decision-{name}.png")

    phone = pages["phone"]
    await expect(phone.get_by_test_id("complete-output")).to_have_attribute(
        "placeholder", 'What "book flight" produced, e.g. {"reference": "…"}'
    )
    await expect(phone.get_by_test_id("decision-note")).to_contain_text("agent-2 still holds")
    await expect(phone.get_by_test_id("decision-note")).to_be_hidden(timeout=10_000)
    await phone.get_by_test_id("complete-output").fill('{"pnr": "X7K2QM"}')
    await phone.get_by_test_id("decision-why").fill("the airline mailed a PNR")
    await phone.get_by_test_id("complete").click()
    for page in pages.values():
        await expect(page.get_by_test_id("step-2")).to_have_attribute("data-status", "SUCCESS")
        await expect(page.get_by_test_id("output-2")).to_have_text('{"pnr":"X7K2QM"}')
        await expect(page.get_by_test_id("decision")).to_be_hidden()
        # The step ran from its start until its agent's lease lapsed, as the page saw
        # the lease; not until the worker that took over found it in doubt.
        clock = "(iso) => new Date(iso).toLocaleTimeString()"
        started = await page.evaluate(clock, held["task"]["steps"][2]["startedAt"])
        lapsed = await page.evaluate(clock, held["task"]["lock"]["expiresAt"])
        await expect(page.get_by_test_id("time-2")).to_have_text(
            re.compile(
                rf"^started {started} · agent-1's lease lapsed at {lapsed}"
                r" · decided after \d+(\.\d)? s$"
            )
        )
        await expect(page.get_by_test_id("events")).to_contain_text(
            "watcher decided: it happened (the airline mailed a PNR); "
            "step 2 book flight: IN_DOUBT -> SUCCESS"
        )
    await shoot(pages, "4-decided")
    step = await asyncio.to_thread(
        api, "query($id: ID!) { task(id: $id) { ... on Task { steps { status output } } } }", id=tid
    )
    assert step["task"]["steps"][2] == {"status": "SUCCESS", "output": {"pnr": "X7K2QM"}}
    for page in pages.values():
        await assert_fits_the_screen(page, "task")
        await page.close()


async def heartbeat(
    api: Api, task_id: str, holder: str, stop: asyncio.Event, ttl: int = 2, every: float = 0.5
) -> None:
    """Renew ``holder``'s lease for ``ttl`` s every ``every`` s, as an agent does,
    until ``stop`` is set. Each renewal must be granted: a refused one means the
    lease really lapsed, and the page was right to say so."""
    while not stop.is_set():
        renewed = await asyncio.to_thread(
            mutate,
            api,
            "renewTaskLock",
            "RenewTaskLockInput",
            "__typename ... on TaskLock { expiresAt } ... on Problem { code message }",
            taskId=task_id,
            holderId=holder,
            ttlSeconds=ttl,
        )
        assert renewed["__typename"] == "TaskLock", renewed
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)


async def running_with_heartbeat(
    api: Api, holder: str, stop: asyncio.Event, ttl: int = 2, every: float = 0.5
) -> tuple[str, datetime, asyncio.Task[None]]:
    """A task whose first step ``holder`` runs, renewing a ``ttl``-second lease every
    ``every`` s from the moment it took it: the task's id, its first lease's
    expiry, the heartbeat."""
    session = start_session(api)
    tid = create_task(api, session["id"], PLAN, goal="Renewing")["id"]
    lease = acquire(api, tid, holder, ttl=ttl)
    beating = asyncio.create_task(heartbeat(api, tid, holder, stop, ttl=ttl, every=every))
    mutate(
        api,
        "startStep",
        "StepRefInput",
        TASK,
        taskId=tid,
        stepIndex=0,
        expectedVersion=1,
        fencingToken=lease["fencingToken"],
    )
    return tid, datetime.fromisoformat(lease["expiresAt"]), beating


def start_first_step(api: Api, created: dict[str, Any], fencing_token: int) -> None:
    """Step 0 of the task just ``created`` started by the lease of ``fencing_token``."""
    step(
        api,
        "startStep",
        "StepRefInput",
        taskId=created["id"],
        stepIndex=0,
        expectedVersion=created["version"],
        fencingToken=fencing_token,
    )


RECORD_LEASE_STATES = """() => {
  const lease = document.getElementById("lease");
  window.leaseStates = new Set([lease.dataset.state]);
  new MutationObserver(() => window.leaseStates.add(lease.dataset.state))
    .observe(lease, { attributes: true, attributeFilter: ["data-state"] });
}"""


async def test_a_renewed_lease_is_not_shown_as_lapsed(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the page's reads of an active task's lease (``checkLease``): renewals
    write no event, so the page reads the lease every 2 s, and each second while the
    lease it last read is past its end on the page's clock ("due"). An agent renews
    its 2-second lease every half second from the moment it took it; every state the
    lease display takes until 4 s past the first lease's end is recorded: held, or
    due until a read answers, never lapsed. Without the reads the page's clock calls
    it lapsed 2 s after the first lease's end. Control: when renewals stop, it does
    lapse."""
    server, token = dashboard
    stop = asyncio.Event()
    tid, first_expiry, beating = await running_with_heartbeat(api, "agent-r", stop)
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK)
    await expect(page.get_by_test_id("lease")).to_have_attribute("data-state", "held")
    await page.evaluate(RECORD_LEASE_STATES)
    watched = first_expiry + timedelta(seconds=4) - datetime.now(UTC)
    await page.wait_for_timeout(watched.total_seconds() * 1000)
    states = await page.evaluate("[...window.leaseStates]")
    assert not beating.done(), beating.exception()  # a refused renewal: a real lapse
    assert set(states) <= {"held", "due"}, states
    await expect(page.get_by_test_id("agent")).to_have_text("agent-r")
    stop.set()
    await beating
    await expect(page.get_by_test_id("agent")).to_have_text(
        "no agent: lease lapsed", timeout=10_000
    )
    await page.close()


RECORD_LEAST_LEFT = """() => {
  const lease = document.getElementById("lease");
  window.leastLeft = Infinity;
  new MutationObserver(() => {
    const left = /runs out in (\\d+(?:\\.\\d)?) s/.exec(lease.textContent);
    if (left) window.leastLeft = Math.min(window.leastLeft, Number(left[1]));
  }).observe(lease, { childList: true, characterData: true, subtree: true });
}"""


async def test_the_lease_countdown_follows_the_renewals(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards ``nextLeaseRead``: an agent renews its 3-second lease every second (a
    third of its ttl, as the SDK does); the page reads the lease just after each
    renewal is due, so for 8 s the countdown it shows never falls below 1 s and the
    lease is never due or lapsed. With the reads every 2 s alone (the fallback) the
    countdown ran down to 0.7 s between reads while the agent was healthy (seen with
    nextLeaseRead switched off; in the demo, with a 5-second lease, to 0.2 s)."""
    server, token = dashboard
    stop = asyncio.Event()
    tid, _, beating = await running_with_heartbeat(api, "agent-c", stop, ttl=3, every=1.0)
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK)
    await expect(page.get_by_test_id("lease")).to_have_attribute("data-state", "held")
    await page.evaluate(RECORD_LEASE_STATES)
    await page.evaluate(RECORD_LEAST_LEFT)
    await page.wait_for_timeout(8000)  # the window watched, not a wait for something
    least = await page.evaluate("window.leastLeft")
    states = await page.evaluate("[...window.leaseStates]")
    stop.set()
    await beating
    assert states == ["held"]
    assert 1.0 <= least <= 3.0, least
    await page.close()


async def test_a_lease_past_its_end_is_asked_about_before_it_is_called_lapsed(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the grace a due lease gets. An agent renews its 2-second lease every
    half second, but the page's lease reads are held (Playwright routing, as a slow
    network or a busy server would hold them) until its clock has passed the end of
    the lease it last read: the page says it is asking, not that the lease lapsed,
    and shows it held once the reads answer with the renewed lease. Without the
    grace it shows "lapsed" there. Then the agent stops and the reads are never
    answered: the page's clock alone calls the lease lapsed, LEASE_GRACE_MS past its
    end; without that fallback the page would wait on the server for good."""
    server, token = dashboard
    stop, answer = asyncio.Event(), asyncio.Event()
    answer.set()

    async def lease_reads_wait_for_answer(route: Route) -> None:
        if sends(route.request, "pageLease"):
            await answer.wait()
        await route.continue_()

    tid, _, beating = await running_with_heartbeat(api, "agent-s", stop)
    page = await open_dashboard(
        browser, f"{server.url}/#token={token}&task={tid}", DESK, lease_reads_wait_for_answer
    )
    lease = page.get_by_test_id("lease")
    await expect(lease).to_have_attribute("data-state", "held")
    await page.evaluate(RECORD_LEASE_STATES)

    answer.clear()
    await expect(lease).to_have_attribute("data-state", re.compile("due|lapsed"), timeout=10_000)
    await expect(lease).to_contain_text("asking the server whether it was renewed")
    await expect(page.get_by_test_id("agent")).to_have_text("agent-s")
    answer.set()
    await expect(lease).to_have_attribute("data-state", "held")
    assert await page.evaluate("[...window.leaseStates]") == ["held", "due"]

    stop.set()
    await beating
    answer.clear()
    await expect(page.get_by_test_id("agent")).to_have_text(
        "no agent: lease lapsed", timeout=10_000
    )
    await expect(lease).to_have_attribute("data-state", "lapsed")
    answer.set()
    await page.close()


def skip_step_1(api: Api, task_id: str, version: int) -> dict[str, Any]:
    """SKIP the step an ``at_second_step`` task has IN_DOUBT once resumed."""
    return step(
        api,
        "decideStep",
        "DecideStepInput",
        taskId=task_id,
        stepIndex=1,
        expectedVersion=version,
        decision="SKIP",
    )


async def test_a_decision_made_while_the_log_loads_keeps_its_time(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the order in which the page tells its log: the events before the
    snapshot first, then those that came live while they loaded. Told the other way,
    the older IN_DOUBT event restarts the step's decision clock after the decision,
    and the decided step says "waiting for you". The log's read is held (Playwright
    routing) until the page shows the decision live."""
    server, token = dashboard
    tid = at_second_step(api, "RUNNING", idempotent=False)["id"]
    version = resume(api, tid)["task"]["version"]
    held, release = asyncio.Event(), asyncio.Event()

    async def hold_the_log(route: Route) -> None:
        if sends(route.request, "pageLog"):
            held.set()
            await release.wait()
        await route.continue_()

    page = await open_dashboard(
        browser, f"{server.url}/#token={token}&task={tid}", DESK, hold_the_log
    )
    await asyncio.wait_for(held.wait(), 30)
    await expect(page.get_by_test_id("step-1")).to_have_attribute("data-status", "IN_DOUBT")
    decided = skip_step_1(api, tid, version)
    await expect(page.get_by_test_id("step-1")).to_have_attribute("data-status", "SKIPPED")
    release.set()
    await expect(page.locator("#events li[data-seq]")).to_have_count(decided["eventSeq"])
    await expect(page.get_by_test_id("time-1")).to_have_text(
        re.compile(r"^ran \d+\.\d s · decided after \d+\.\d s$")
    )
    await page.close()


async def test_the_session_list_marks_a_decision_as_its_event_comes(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the session list following the open task as the page knows it. The
    list is read every 3 s; here every read after the first is refused (Playwright
    routing), so only the page's own view of the task can say "no agent" on its
    entry once its lease lapses, and put "needs you" on it and take it off."""
    server, token = dashboard
    tid = at_second_step(api, "RUNNING", idempotent=False)["id"]
    acquire(api, tid, "agent-l", ttl=2)
    reads = 0
    refused = asyncio.Event()

    async def first_list_read_only(route: Route) -> None:
        nonlocal reads
        if sends(route.request, "pageSessions"):
            reads += 1
            if reads > 1:
                refused.set()
                await route.abort()
                return
        await route.continue_()

    page = await open_dashboard(
        browser, f"{server.url}/#token={token}&task={tid}", DESK, first_list_read_only
    )
    entry = page.locator(f'#task-list a[data-task="{tid}"]')
    await expect(entry).to_contain_text("running")
    await expect(entry.locator(".needs-mark")).to_have_count(0)
    await asyncio.wait_for(refused.wait(), 30)  # from here the list is never read again
    await expect(entry).to_contain_text("no agent", timeout=10_000)
    version = resume(api, tid)["task"]["version"]
    await expect(entry.locator(".needs-mark")).to_have_text("needs you")
    session = page.locator(".session", has=page.locator(f'a[data-task="{tid}"]'))
    await expect(session.locator(".session-head .needs-mark")).to_have_text("needs you")
    skip_step_1(api, tid, version)
    await expect(entry).to_contain_text("completed")
    await expect(entry.locator(".needs-mark")).to_have_count(0)
    await expect(session.locator(".session-head .needs-mark")).to_have_count(0)
    await page.close()


async def test_a_crashed_step_tells_when_its_agents_own_lease_lapsed(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards which lease end the crashed step's time names (``noteLease``): the
    task is created leased to its agent for a minute (as the demo creates its
    trips), the agent takes it over with a 3-second lease, renews it, then stops.
    The step found in doubt says the lease lapsed at the end of the agent's last
    renewal, not a minute after the task was created (the longest lease once won)."""
    server, token = dashboard
    session = start_session(api)
    plan = [{"action": "pay", "idempotent": False}]
    created = create_task(
        api, session["id"], plan, goal="Pay", lease={"holderId": "agent-s", "ttlSeconds": 60}
    )
    tid = created["id"]
    lease = acquire(api, tid, "agent-s", ttl=3)
    start_first_step(api, created, lease["fencingToken"])
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK)
    await expect(page.get_by_test_id("lease")).to_have_attribute("data-state", "held")
    stop = asyncio.Event()
    beating = asyncio.create_task(heartbeat(api, tid, "agent-s", stop, ttl=3, every=1.0))
    await page.wait_for_timeout(3000)  # renewals the page reads, then the agent stops
    stop.set()
    await beating
    last = await asyncio.to_thread(
        api, "query($id: ID!) { task(id: $id) { ... on Task { lock { expiresAt } } } }", id=tid
    )
    await expect(page.get_by_test_id("agent")).to_have_text(
        "no agent: lease lapsed", timeout=10_000
    )
    await asyncio.to_thread(resume, api, tid)
    await expect(page.get_by_test_id("step-0")).to_have_attribute("data-status", "IN_DOUBT")
    lapsed = await page.evaluate(
        "(iso) => new Date(iso).toLocaleTimeString()", last["task"]["lock"]["expiresAt"]
    )
    await expect(page.get_by_test_id("time-0")).to_contain_text(
        f"agent-s's lease lapsed at {lapsed} · waiting for you"
    )
    await page.close()


async def test_a_crashed_step_opened_later_never_names_a_lapse_after_the_takeover(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the crashed step's time line on a page opened after the fact
    (``record``): renewals write no event, so the log knows the agent's lease only
    as first granted, for a minute, though the agent renewed it for a second and
    died. The page said the lease "lapsed at" that minute's end, after the takeover
    its own log shows; it says the lease lapsed before the takeover, and asks for
    a reason in words of the step itself."""
    server, token = dashboard
    session = start_session(api)
    plan = [{"action": "pay the hotel", "idempotent": False}]
    lease = {"holderId": "agent-3", "ttlSeconds": 60}
    created = create_task(api, session["id"], plan, goal="Pay", lease=lease)
    tid = created["id"]
    start_first_step(api, created, 1)
    renewed = mutate(
        api,
        "renewTaskLock",
        "RenewTaskLockInput",
        "__typename",
        taskId=tid,
        holderId="agent-3",
        ttlSeconds=1,
    )
    assert renewed["__typename"] == "TaskLock"
    stalled = "query($id: ID!) { task(id: $id) { ... on Task { stalled } } }"
    await settled(lambda: api(stalled, id=tid)["task"]["stalled"], "agent-3's lease to lapse")
    taken = claim(api, "agent-4", session["id"])
    resume(api, tid, fencingToken=taken["fencingToken"])
    log = api(
        "query($id: ID!) { task(id: $id) { ... on Task { steps { startedAt }"
        " events(afterSeq: 0, first: 100) { kind at lock { holderId } } } } }",
        id=tid,
    )["task"]
    (takeover,) = [
        e
        for e in log["events"]
        if e["kind"] == "LOCK_ACQUIRED" and e["lock"]["holderId"] == "agent-4"
    ]
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK)
    clock = "(iso) => new Date(iso).toLocaleTimeString()"
    started = await page.evaluate(clock, log["steps"][0]["startedAt"])
    before = await page.evaluate(clock, takeover["at"])
    await expect(page.get_by_test_id("time-0")).to_have_text(
        re.compile(
            rf"^started {re.escape(started)}, then agent-3 stopped · its lease lapsed before"
            rf" {re.escape(before)} · waiting for you for \d+(\.\d)? s$"
        )
    )
    await expect(page.get_by_test_id("decision-why")).to_have_attribute(
        "placeholder", 'e.g. how you know whether "pay the hotel" happened'
    )
    await page.close()


async def test_a_step_whose_agent_let_the_task_go_says_so_not_lapsed(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the step's time line after a release and a takeover (``doubtOf``): an
    agent stopped by Ctrl-C lets its lease go while a step not safe to repeat runs,
    and the next run takes the task over and finds the step in doubt. The line said
    the agent "stopped · its lease lapsed before" the takeover, though the log says
    it let the task go; it says when the agent let the task go."""
    server, token = dashboard
    session = start_session(api)
    plan = [{"action": "email the plan", "idempotent": False}]
    created = create_task(api, session["id"], plan, goal="Plan a weekend")
    tid = created["id"]
    lease = acquire(api, tid, "agent-r", ttl=60)
    start_first_step(api, created, lease["fencingToken"])
    mutate(
        api, "releaseTaskLock", "ReleaseTaskLockInput", "__typename", taskId=tid, holderId="agent-r"
    )
    taken = acquire(api, tid, "agent-s", ttl=60)
    resume(api, tid, fencingToken=taken["fencingToken"])
    log = api(
        "query($id: ID!) { task(id: $id) { ... on Task { steps { startedAt }"
        " events(afterSeq: 0, first: 100) { kind at } } } }",
        id=tid,
    )["task"]
    (released,) = [e for e in log["events"] if e["kind"] == "LOCK_RELEASED"]
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK)
    clock = "(iso) => new Date(iso).toLocaleTimeString()"
    started = await page.evaluate(clock, log["steps"][0]["startedAt"])
    let_go = await page.evaluate(clock, released["at"])
    await expect(page.get_by_test_id("step-0")).to_have_attribute("data-status", "IN_DOUBT")
    await expect(page.get_by_test_id("time-0")).to_have_text(
        re.compile(
            rf"^started {re.escape(started)}, then agent-r let the task go at {re.escape(let_go)}"
            r" · waiting for you for \d+(\.\d)? s$"
        )
    )
    await page.close()
