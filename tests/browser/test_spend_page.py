"""What a task spent, seen in Chromium: each step's tokens, cost and model, the
task's total against its budget as a bar, the over-budget state in words, and
the budget raised from the page. Screenshots land in test-artifacts/browser/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, expect

from runstate.client import BudgetExceeded, Runstate, SpendReport
from tests.browser.pages import ARTIFACTS, DESK, PHONE, assert_fits_the_screen, open_dashboard
from tests.support import Api, Server, mutate, settled

ANSWER = "__typename ... on Task { version } ... on Problem { code }"


def write(api: Api, name: str, input_type: str, **input: Any) -> dict[str, Any]:
    return mutate(api, name, input_type, ANSWER, **input)


def over_budget_task(api: Api) -> str:
    """A task of three steps with a $4.00 budget, two steps done for $2.60 and $1.50:
    its third start refused."""
    session = mutate(api, "startSession", "StartSessionInput", "... on AgentSession { id }")
    task = mutate(
        api,
        "createTask",
        "CreateTaskInput",
        "... on Task { id }",
        sessionId=session["id"],
        goal="write the quarterly report",
        steps=[{"action": "research"}, {"action": "draft"}, {"action": "send"}],
        budget={"maxCostMicros": 4_000_000},
    )
    version = 1
    spends = [
        {"inputTokens": 12_000, "outputTokens": 3_000, "costMicros": 2_600_000, "model": "gpt-4o"},
        {"inputTokens": 4_000, "outputTokens": 500, "costMicros": 1_500_000, "model": "gpt-4o"},
    ]
    for index, spend in enumerate(spends):
        ref = {"taskId": task["id"], "stepIndex": index}
        version = write(api, "startStep", "StepRefInput", **ref, expectedVersion=version)["version"]
        version = write(
            api, "completeStep", "CompleteStepInput", **ref, expectedVersion=version, spend=spend
        )["version"]
    refused = write(
        api, "startStep", "StepRefInput", taskId=task["id"], stepIndex=2, expectedVersion=version
    )
    assert refused == {"__typename": "BudgetExceeded", "code": "BUDGET_EXCEEDED"}
    return str(task["id"])


async def test_spend_and_the_budget_are_shown_and_raised_from_the_page(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the page's spend (``app.js`` ``renderSpend``, ``raiseBudget``): without
    it a task stopped by its budget looked like one whose agent is merely slow."""
    server, token = dashboard
    task_id = over_budget_task(api)
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={task_id}", DESK)
    await expect(page.get_by_test_id("spend-0")).to_have_text("15,000 tokens · $2.60 · gpt-4o")
    await expect(page.get_by_test_id("spend-1")).to_have_text("4,500 tokens · $1.50 · gpt-4o")
    await expect(page.get_by_test_id("spend-2")).to_have_count(0)
    await expect(page.get_by_test_id("spend-text")).to_have_text(
        "Spent 19,500 tokens · $4.10 (16,000 in, 3,500 out) in 2 reports."
    )
    await expect(page.get_by_test_id("budget-text")).to_have_text("$4.10 of its $4.00 budget")
    await expect(page.get_by_test_id("over-budget")).to_have_text(
        "stopped: spent $4.10 of its $4.00 budget"
    )
    await expect(page.get_by_test_id("budget-bar")).to_have_attribute("data-over", "true")
    await expect(page.get_by_test_id("raise-amount")).to_have_value("8")
    await page.screenshot(path=ARTIFACTS / "spend-over-budget.png")
    await page.get_by_test_id("raise-amount").fill("10")
    await page.get_by_test_id("raise-why").fill("the client approved more")
    await page.get_by_test_id("raise").click()
    await expect(page.get_by_test_id("over-budget")).to_be_hidden()
    await expect(page.get_by_test_id("budget-text")).to_have_text("$4.10 of its $10.00 budget")
    await expect(page.get_by_test_id("events")).to_contain_text(
        "watcher set the budget to $10.00 (the client approved more)"
    )
    task = api(
        "query($id: ID!) { task(id: $id) { ... on Task { version overBudget"
        " budget { maxCostMicros } } } }",
        id=task_id,
    )["task"]
    assert task["budget"] == {"maxCostMicros": 10_000_000}
    assert task["overBudget"] is False
    assert (
        write(
            api,
            "startStep",
            "StepRefInput",
            taskId=task_id,
            stepIndex=2,
            expectedVersion=task["version"],
        )["__typename"]
        == "Task"
    )
    await page.close()


async def test_the_spend_panel_fits_a_phone(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the panel's layout on a 390 px screen: nothing sticks out sideways."""
    server, token = dashboard
    task_id = over_budget_task(api)
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={task_id}", PHONE)
    await expect(page.get_by_test_id("over-budget")).to_be_visible()
    await assert_fits_the_screen(page, "spend", "raise-form", "over-budget")
    await page.screenshot(path=ARTIFACTS / "spend-phone.png")
    await page.close()


async def test_a_sessions_budget_is_shown_and_raised_on_its_other_tasks(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the session's side of the panel (``stoppedBy``, ``raiseBudget`` with
    ``sessionId``): a task that spent nothing, stopped because its session's other
    task spent the session's budget, says so and raises the session's budget."""
    server, token = dashboard
    fields = "... on AgentSession { id version }"
    session = mutate(
        api, "startSession", "StartSessionInput", fields, budget={"maxCostMicros": 1_000_000}
    )
    plan = [{"action": "draft"}]
    made = "... on Task { id }"
    spender = mutate(
        api, "createTask", "CreateTaskInput", made, sessionId=session["id"], goal="a", steps=plan
    )
    waiting = mutate(
        api, "createTask", "CreateTaskInput", made, sessionId=session["id"], goal="b", steps=plan
    )
    ref = {"taskId": spender["id"], "stepIndex": 0}
    version = write(api, "startStep", "StepRefInput", **ref, expectedVersion=1)["version"]
    spend = {"costMicros": 1_200_000, "inputTokens": 5000}
    write(api, "completeStep", "CompleteStepInput", **ref, expectedVersion=version, spend=spend)
    url = f"{server.url}/#token={token}&task={waiting['id']}"
    page = await open_dashboard(browser, url, DESK)
    await expect(page.get_by_test_id("spend-text")).to_have_text("Nothing spent yet.")
    await expect(page.get_by_test_id("budget-text")).to_have_text(
        "$1.20 of its session's $1.00 budget"
    )
    await expect(page.get_by_test_id("over-budget")).to_have_text(
        "stopped: its session spent $1.20 of its $1.00 budget"
    )
    await page.get_by_test_id("raise-amount").fill("5")
    await page.get_by_test_id("raise").click()
    await expect(page.get_by_test_id("over-budget")).to_be_hidden()
    await expect(page.get_by_test_id("budget-text")).to_have_text(
        "$1.20 of its session's $5.00 budget"
    )
    raised = api(
        "query($id: ID!) { session(id: $id) { ... on AgentSession { version"
        " budget { maxCostMicros } } } }",
        id=session["id"],
    )["session"]
    assert raised == {"version": session["version"] + 1, "budget": {"maxCostMicros": 5_000_000}}
    await page.close()


async def stopped_by_its_budget(server: Server, token: str) -> tuple[str, str]:
    """A task of three steps with a $0.020 budget, its first step done for $0.024
    and 10 tokens by an SDK runner, its second start refused: the runner let the
    task go. And a task of the same session whose step reported nothing (a report
    of no tokens and no cost). Their ids."""
    async with Runstate(server.url, token) as rs:
        session = await rs.start_session()
        task = await rs.create_task(
            session.id,
            "summarise",
            ["read", "summarise", "send"],
            budget={"max_cost_micros": 20_000},
        )
        async with rs.run(task.id, holder="w") as run:
            await run.begin(0)
            await run.succeed(0, "read", spend=SpendReport(input_tokens=10, cost_micros=24_000))
        with pytest.raises(BudgetExceeded):
            async with rs.run(task.id, holder="w") as run:
                await run.begin(1)
        quiet = await rs.create_task(session.id, "check", ["look"])
        async with rs.run(quiet.id, holder="q") as run:
            await run.begin(0)
            await run.succeed(0, "fine", spend=SpendReport())
    return task.id, quiet.id


async def test_a_task_its_budget_stopped_says_so_everywhere(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards what the page says of a task its budget stopped (``renderLease``,
    ``renderSpend``, ``money``, the session list): its agent let it go, and claims
    pass over it, so the page no longer says "lease lapsed. A worker calling
    claimTask takes it over"; its totals show the decimals that make spend past the
    budget visible (they read "$0.02 of its $0.02"), each amount with its own
    decimals (the budget read "$0.020", as many as the spend's); the session list says
    "budget spent", for the task followed and for one not followed, where it said
    "no agent"; and a fork from its past says it keeps the budget."""
    server, token = dashboard
    task_id, quiet_id = await stopped_by_its_budget(server, token)
    log = api(
        "query($id: ID!) { task(id: $id) { ... on Task {"
        " events(afterSeq: 0, first: 100) { seq kind at } } } }",
        id=task_id,
    )["task"]["events"]
    released = [e for e in log if e["kind"] == "LOCK_RELEASED"][-1]
    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={task_id}", DESK)
    let_go = await page.evaluate("(iso) => new Date(iso).toLocaleTimeString()", released["at"])
    await expect(page.get_by_test_id("over-budget")).to_have_text(
        "stopped: spent $0.024 of its $0.02 budget"
    )
    await expect(page.get_by_test_id("budget-text")).to_have_text("$0.024 of its $0.02 budget")
    await expect(page.get_by_test_id("spend-text")).to_have_text(
        "Spent 10 tokens · $0.024 (10 in, 0 out) in 1 report."
    )
    await expect(page.get_by_test_id("agent")).to_have_text("no agent: budget spent")
    await expect(page.get_by_test_id("lease")).to_have_text(
        f"No agent: stopped by its budget; w let the task go at {let_go}. claimTask passes"
        " over it until the budget is raised."
    )
    await expect(page.get_by_test_id(f"progress-{task_id}")).to_have_text("budget spent · 33%")
    await page.get_by_test_id("scrubber").fill(str(log[-2]["seq"]))
    await expect(page.get_by_test_id("past")).to_be_visible()
    await expect(page.get_by_test_id("fork-budget")).to_have_text(
        "A fork starts with nothing spent, under the $0.02 budget this task had then."
    )
    await page.close()

    page = await open_dashboard(browser, f"{server.url}/#token={token}&task={quiet_id}", DESK)
    await expect(page.get_by_test_id("step-0")).to_have_attribute("data-status", "SUCCESS")
    await expect(page.get_by_test_id(f"progress-{task_id}")).to_have_text("budget spent · 33%")
    await expect(page.get_by_test_id("events")).to_contain_text("step 0 look: RUNNING -> SUCCESS")
    await expect(page.get_by_test_id("events")).not_to_contain_text("spent")
    await expect(page.get_by_test_id("spend")).to_be_hidden()
    await expect(page.get_by_test_id("spend-0")).to_have_count(0)
    await page.close()


async def test_a_task_of_an_expired_session_is_not_listed_as_running(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the session list's word for a task nothing will run: one whose
    session expired mid-step stayed "running"; it says its session expired."""
    server, token = dashboard
    session = mutate(
        api, "startSession", "StartSessionInput", "... on AgentSession { id }", ttlSeconds=1
    )
    made = mutate(
        api,
        "createTask",
        "CreateTaskInput",
        "... on Task { id }",
        sessionId=session["id"],
        goal="left behind",
        steps=[{"action": "wait"}],
    )
    write(api, "startStep", "StepRefInput", taskId=made["id"], stepIndex=0, expectedVersion=1)
    status = "{ sessions(first: 1) { edges { node { status } } } }"
    await settled(
        lambda: api(status)["sessions"]["edges"][0]["node"]["status"] == "EXPIRED",
        "the session to expire",
    )
    page = await browser.new_page(viewport=DESK)
    await page.goto(f"{server.url}/#token={token}")
    await expect(page.get_by_test_id(f"progress-{made['id']}")).to_have_text("session expired · 0%")
    await page.close()
