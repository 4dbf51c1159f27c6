"""The history scrubber in Chromium: moved to seq k, the page shows exactly
``taskAt(k)`` (status, each step's status and output, each tool); moved to the
end it is live again; forking from seq k opens the new task, PLANNED, which says
where it came from, with a link back. Guards the scrubber's taskAt read, the fork
button beside the slider, and the fork's origin line."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from playwright.async_api import Browser, Page, expect

from tests.browser.pages import ARTIFACTS, DESK, open_dashboard
from tests.integration.test_api import create_task, start_session, step
from tests.support import Api, Server, mutate

SHOWN = """ ... on Task { id goal status eventSeq
  steps { status output } toolStates { toolName status retryCount rateLimitResetAt } } """


def task_at(api: Api, task_id: str, seq: int) -> dict[str, Any]:
    query = "query($id: ID!, $seq: Int!) { taskAt(id: $id, seq: $seq) {" + SHOWN + "} }"
    result: dict[str, Any] = api(query, id=task_id, seq=seq)["taskAt"]
    return result


def task_now(api: Api, task_id: str) -> dict[str, Any]:
    result: dict[str, Any] = api("query($id: ID!) { task(id: $id) {" + SHOWN + "} }", id=task_id)[
        "task"
    ]
    return result


async def on_page(page: Page) -> dict[str, Any]:
    """What the page shows of the task, in the shape of ``SHOWN``."""
    return dict(
        await page.evaluate("""() => ({
      seq: Number(document.querySelector("[data-testid=task]").dataset.seq),
      status: document.querySelector("[data-testid=status]").className.replace("badge s-", ""),
      steps: [...document.querySelectorAll("li[data-testid^='step-']")].map((li, i) => ({
        status: li.dataset.status,
        output: document.querySelector(`[data-testid=output-${i}]`)?.textContent ?? null })),
      tools: [...document.querySelectorAll("li[data-testid^='tool-']")].map((li) => ({
        toolName: li.dataset.testid.slice(5), status: li.dataset.status })),
    })""")
    )


def expected(task: dict[str, Any]) -> dict[str, Any]:
    """``task`` (as the API answers ``SHOWN``) as ``on_page`` reads it."""
    return {
        "seq": task["eventSeq"],
        "status": task["status"],
        "steps": [
            {
                "status": s["status"],
                "output": None
                if s["output"] is None
                else json.dumps(s["output"], separators=(",", ":")),
            }
            for s in task["steps"]
        ],
        "tools": [{"toolName": t["toolName"], "status": t["status"]} for t in task["toolStates"]],
    }


async def test_the_scrubber_shows_taskat_and_forks_from_there(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    server, token = dashboard
    plan = [{"action": "outline"}, {"action": "draft"}, {"action": "rehearse"}]
    task = create_task(api, start_session(api)["id"], plan, goal="Plan a talk")
    tid = task["id"]
    version = 1

    def write(name: str, kind: str, **input: Any) -> None:
        nonlocal version
        version = step(api, name, kind, taskId=tid, expectedVersion=version, **input)["version"]

    for index in (0, 1):
        write("startStep", "StepRefInput", stepIndex=index)
        if index == 1:
            mutate(
                api,
                "recordToolCall",
                "RecordToolCallInput",
                "... on ToolState { status }",
                taskId=tid,
                toolName="slides-api",
                outcome="RATE_LIMITED",
                retryAfterSeconds=30,
            )
        write("completeStep", "CompleteStepInput", stepIndex=index, output={"part": index})
    write("startStep", "StepRefInput", stepIndex=2)
    latest = task_now(api, tid)["eventSeq"]
    assert latest == 7

    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={tid}", DESK)
    await expect(page.get_by_test_id("step-2")).to_have_attribute("data-status", "RUNNING")
    assert await on_page(page) == expected(task_now(api, tid))
    until = task_now(api, tid)["toolStates"][0]["rateLimitResetAt"]
    shown_until = await page.evaluate("iso => new Date(iso).toLocaleTimeString()", until)
    await expect(page.get_by_test_id("limit-slides-api")).to_contain_text(
        "may be called again in 2"  # 30 s from the call, counting down
    )
    await expect(page.get_by_test_id("events")).to_contain_text(
        f"slides-api rate-limited until {shown_until}"
    )
    scrubber = page.get_by_test_id("scrubber")
    for seq in (2, 3, 4, 5, latest - 1):
        await scrubber.fill(str(seq))
        await expect(page.get_by_test_id("task")).to_have_attribute("data-seq", str(seq))
        await expect(page.get_by_test_id("past")).to_be_visible()
        assert await on_page(page) == expected(task_at(api, tid, seq)), f"seq {seq}"
    await page.screenshot(path=ARTIFACTS / "history-seq-6.png", full_page=True)

    await scrubber.fill(str(latest))
    await expect(page.get_by_test_id("past")).to_be_hidden()
    await expect(page.get_by_test_id("task")).to_have_attribute("data-seq", str(latest))

    await scrubber.fill("4")  # step 0 done, step 1 running
    await expect(page.get_by_test_id("task")).to_have_attribute("data-seq", "4")
    await scrubber.scroll_into_view_if_needed()
    slider, button = await scrubber.bounding_box(), await page.get_by_test_id("fork").bounding_box()
    assert slider is not None
    assert button is not None
    assert 0 < button["y"] - slider["y"] < 200, "the fork button sits just under the slider"
    assert button["y"] + button["height"] <= DESK["height"], "in view with the slider"
    await page.get_by_test_id("fork").click()
    await expect(page).not_to_have_url(f"{server.url}/#task={tid}")
    fork_id = page.url.split("#task=")[1]
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    await expect(page.get_by_test_id("past")).to_be_hidden()
    fork = await asyncio.to_thread(task_now, api, fork_id)
    assert [s["status"] for s in fork["steps"]] == ["SUCCESS", "PENDING", "PENDING"]
    await expect(page.get_by_test_id("step-1")).to_have_attribute("data-status", "PENDING")
    assert await on_page(page) == expected(fork)
    assert fork["status"] == "PLANNED", "a worker's claimTask hands it out"
    await expect(page.get_by_test_id("origin")).to_have_text("Forked from Plan a talk at event 4.")
    await page.get_by_test_id("origin-link").click()
    await expect(page.locator("#goal")).to_have_text("Plan a talk")
    await expect(page.get_by_test_id("origin")).to_be_hidden()
    await page.screenshot(path=ARTIFACTS / "history-fork.png", full_page=True)
