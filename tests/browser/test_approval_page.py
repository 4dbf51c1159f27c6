"""An OpenAI Agents run stopped at a tool that needs approval, seen in Chromium:
the page asks about the call itself, offers "Approve the call" and "Reject it"
(no "mark it done"), and approving there, with a reason, makes the run ready to
hand out. Screenshots land in test-artifacts/browser/."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from agents import Runner
from agents.testing import ScriptedModel, function_call
from playwright.async_api import Browser, expect

from runstate.integrations.openai_agents import RunstateSession
from tests.agents.openai_agent import mailer
from tests.browser.pages import ARTIFACTS, DESK, open_dashboard
from tests.support import Api, Server

STEPS = "query($id: ID!) { task(id: $id) { ... on Task { status steps { status } } } }"
LOG = (
    "query($id: ID!) { task(id: $id) { ... on Task { steps { startedAt }"
    " events(afterSeq: 0, first: 100) { kind at lock { holderId } } } } }"
)
CLOCK = "(iso) => new Date(iso).toLocaleTimeString()"


async def test_an_approval_is_asked_and_given_from_the_page(
    dashboard: tuple[Server, str], browser: Browser, api: Api, tmp_path: Path
) -> None:
    """Guards the approval wording of the decision panel (``app.js``
    ``renderDecision``): without it the page asked whether a crashed step "did
    happen" and offered to mark it done, which means nothing for a call that waits
    for permission. The reason's placeholder speaks of the call: it spoke of "the
    airline" on every task."""
    server, token = dashboard
    async with RunstateSession(f"mail-{uuid.uuid4().hex[:8]}", url=server.url, token=token) as s:
        model = ScriptedModel([[function_call("send_mail", {"to": "bob"}, call_id="c1")]])
        result = await Runner.run(mailer(tmp_path / "ran", model), "mail bob", session=s)
        task_id = await s.save_run_state(result.to_state())
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={task_id}", DESK)
    await expect(page.get_by_test_id("question")).to_have_text(
        'Step 1: the agent asks to call send_mail({"to":"bob"}). Approve it, and the agent\'s'
        " next run calls it once; reject it, and the agent is told your reason."
    )
    await expect(page.get_by_test_id("retry")).to_have_text("Approve the call")
    await expect(page.get_by_test_id("skip")).to_have_text("Reject it")
    await expect(page.get_by_test_id("complete")).to_be_hidden()
    await expect(page.get_by_test_id("decision-why")).to_have_attribute(
        "placeholder", "e.g. why send_mail may, or may not, be called"
    )
    await page.screenshot(path=ARTIFACTS / "approval-asked.png")
    await page.get_by_test_id("decision-why").fill("Bob asked for it")
    await page.get_by_test_id("retry").click()
    await expect(page.get_by_test_id("decision")).to_be_hidden()
    task = api(STEPS, id=task_id)["task"]
    assert task == {
        "status": "RUNNING",
        "steps": [{"status": "SUCCESS"}, {"status": "PENDING"}, {"status": "PENDING"}],
    }
    await page.close()


async def test_an_approval_reads_as_the_lease_released_not_as_a_crash(
    dashboard: tuple[Server, str], browser: Browser, api: Api, tmp_path: Path
) -> None:
    """Guards the approval step's time line (``app.js`` ``record``, ``stepTiming``):
    the run's session puts the step in doubt under its own live lease, then lets
    the lease go. The page said "<holder>'s lease lapsed at" the end of that lease,
    a time still to come, as if the agent had died; it says the lease was released
    when the log says it was, and the step has no "not safe to repeat" mark."""
    server, token = dashboard
    async with RunstateSession(f"mail-{uuid.uuid4().hex[:8]}", url=server.url, token=token) as s:
        model = ScriptedModel([[function_call("send_mail", {"to": "bob"}, call_id="c1")]])
        result = await Runner.run(mailer(tmp_path / "ran", model), "mail bob", session=s)
        task_id = await s.save_run_state(result.to_state())
    task = api(LOG, id=task_id)["task"]
    (taken,) = [e for e in task["events"] if e["kind"] == "LOCK_ACQUIRED"]
    (released,) = [e for e in task["events"] if e["kind"] == "LOCK_RELEASED"]
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={task_id}", DESK)
    started = await page.evaluate(CLOCK, task["steps"][1]["startedAt"])
    let_go = await page.evaluate(CLOCK, released["at"])
    holder = taken["lock"]["holderId"]
    await expect(page.get_by_test_id("time-1")).to_have_text(
        re.compile(
            rf"^started {re.escape(started)} · {re.escape(holder)} released its lease at"
            rf" {re.escape(let_go)} · waiting for you for \d+(\.\d)? s$"
        )
    )
    await expect(page.get_by_test_id("step-1").locator(".unsafe")).to_have_count(0)
    await expect(page.get_by_test_id("lease")).to_have_text(
        "No agent holds the lease: the task waits for a person's decision."
    )
    await page.close()
