"""GraphiQL served by the package, in Chromium cut off from the internet: opened from
the dashboard's link with the token already in its Authorization header, it runs
a query and a subscription. Guards: the vendored scripts (a CDN script leaves the
page at "Loading…" and lands in ``blocked``), the link's token, and GraphiQL's
WebSocket (the subscription's second event must arrive live)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from playwright.async_api import Browser, Page, expect

from tests.browser.pages import ARTIFACTS, offline_context
from tests.integration.test_api import create_task, start_session, step
from tests.support import Api, Server


async def run_in_graphiql(page: Page, query: str) -> None:
    """Put ``query`` in GraphiQL's editor and, once GraphiQL has parsed it (it names
    the operation to run from the parse), press its run button."""
    editor = "document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror"
    await page.evaluate(f"q => {editor}.setValue(q)", query)
    await page.wait_for_function(f"q => {editor}.documentAST?.loc?.source?.body === q", arg=query)
    await page.locator(".graphiql-execute-button").click()


async def response(page: Page) -> Any:
    """What GraphiQL's response pane shows, parsed (None while it shows nothing)."""
    text = await page.evaluate(
        "document.querySelector('.graphiql-response .CodeMirror').CodeMirror.getValue()"
    )
    return json.loads(text) if text.strip() else None


async def test_graphiql_works_offline_from_the_dashboard_link(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    server, token = dashboard
    session = start_session(api)
    task = create_task(api, session["id"], [{"action": "look around"}], goal="Offline")
    blocked: list[str] = []
    context = await offline_context(browser, blocked)
    page = await context.new_page()
    await page.goto(f"{server.url}/#token={token}")
    async with context.expect_page() as opened:
        await page.get_by_role("link", name="GraphiQL").click()
    graphiql = await opened.value
    await expect(graphiql.locator(".graphiql-execute-button")).to_be_visible()
    shown = ".graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror"  # headers tab
    headers = await graphiql.evaluate(f"document.querySelector('{shown}').CodeMirror.getValue()")
    assert json.loads(headers) == {"Authorization": f"Bearer {token}"}
    assert token not in graphiql.url, "the token leaves the address bar"

    await run_in_graphiql(graphiql, "{ sessions { edges { node { id } } } }")
    await expect(graphiql.locator(".graphiql-response")).to_contain_text(session["id"])
    assert await response(graphiql) == {
        "data": {"sessions": {"edges": [{"node": {"id": session["id"]}}]}}
    }

    await run_in_graphiql(
        graphiql,
        f'subscription {{ taskProgress(taskId: "{task["id"]}") {{ seq kind stepIndex }} }}',
    )
    await expect(graphiql.locator(".graphiql-response")).to_contain_text("SNAPSHOT")
    await asyncio.to_thread(
        step, api, "startStep", "StepRefInput", taskId=task["id"], stepIndex=0, expectedVersion=1
    )
    await expect(graphiql.locator(".graphiql-response")).to_contain_text("STEP_STARTED")
    assert await response(graphiql) == {
        "data": {"taskProgress": {"seq": 2, "kind": "STEP_STARTED", "stepIndex": 0}}
    }
    await graphiql.screenshot(path=ARTIFACTS / "graphiql-offline.png")
    assert blocked == [], "every script and style came from the package"
    await context.close()


async def test_a_refused_token_is_said_within_two_seconds(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the page's own graphql-ws client (``shouldRetry``): a subscription with
    a token the server refuses (close code 4403) shows why at once: well within the
    15 s the test waits, on a busy machine too. With GraphiQL's built-in client,
    graphql-ws retried the 4403 five times first, and the page spun for about 39 s."""
    server, _ = dashboard
    task = create_task(api, start_session(api)["id"], [{"action": "a"}], goal="Refused")
    page = await browser.new_page()
    await page.goto(f"{server.url}/graphql#token=rs_not-a-token")
    await expect(page.locator(".graphiql-execute-button")).to_be_visible()
    await run_in_graphiql(
        page, f'subscription {{ taskProgress(taskId: "{task["id"]}") {{ seq }} }}'
    )
    await expect(page.locator(".graphiql-response")).to_contain_text(
        "the token was refused: Forbidden: missing or invalid bearer token (close code 4403)",
        timeout=15_000,
    )
    await page.close()
