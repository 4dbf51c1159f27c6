"""An OpenAI Agents run stopped at a tool that needs approval, seen in Chromium:
the page asks about the call itself, offers "Approve the call" and "Reject it"
(no "mark it done"), and approving there, with a reason, makes the run ready to
hand out. Screenshots land in test-artifacts/browser/."""

from __future__ import annotations

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


async def test_an_approval_is_asked_and_given_from_the_page(
    dashboard: tuple[Server, str], browser: Browser, api: Api, tmp_path: Path
) -> None:
    """Guards the approval wording of the decision panel (``app.js``
    ``renderDecision``): without it the page asked whether a crashed step "did
    happen" and offered to mark it done, which means nothing for a call that waits
    for permission."""
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
