"""A LangGraph graph watched in Chromium on a phone (390x844): its node runs as
steps, one RUNNING while it runs, the question of its ``interrupt()`` shown as
the thread waits, and the thread COMPLETED once resumed. Screenshots land in
test-artifacts/browser/."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from playwright.async_api import Browser, Route, expect

from runstate.demo import graph as demo_graph
from runstate.integrations.langgraph import RunstateSaver
from tests.browser.pages import ARTIFACTS, PHONE, assert_fits_the_screen, open_dashboard, sends
from tests.integration.test_langgraph_steps import Trip, approve
from tests.support import Server


async def test_a_graph_is_watched_node_by_node_and_its_question_shown(
    dashboard: tuple[Server, str], browser: Browser
) -> None:
    """Guards the dashboard on a thread: node steps named after their nodes, the
    running one RUNNING, the count of nodes run (not a share of a plan a graph does
    not have) in its header and in the list of tasks, the thread's lack of a lease
    said plainly, a moving bar while its graph runs (it has no end to measure
    against) and none while it waits or in its history, the interrupt panel with
    the node's question as text, answered on the page (``answerInterrupt``) with a
    reason the log keeps beside who answered, the graph's process getting that
    answer (``interrupt_answer``) and going on with it, and the panel hidden once
    the thread goes on; on a phone without sideways scrolling. The moving bar was
    seen failing with ``data-busy`` never set, with it set while the thread waits,
    and with it set in the history."""
    server, token = dashboard
    release = threading.Event()

    def search(state: Trip) -> dict[str, Any]:
        assert release.wait(60)
        return {"done": ["search"]}

    config: RunnableConfig = {"configurable": {"thread_id": f"trip-{uuid.uuid4().hex[:8]}"}}
    with RunstateSaver.from_url_sync(server.url, token) as saver:
        builder = StateGraph(Trip)
        builder.add_node("search", search)
        builder.add_node("approve", approve)
        builder.add_edge(START, "search")
        builder.add_edge("search", "approve")
        builder.add_edge("approve", END)
        graph = saver.watch(builder.compile(checkpointer=saver))
        start: Trip = {"done": [], "answer": ""}
        first = asyncio.create_task(asyncio.to_thread(lambda: graph.invoke(start, config)))
        thread_id = config["configurable"]["thread_id"]
        page = await open_dashboard(browser, f"{server.url}/#token={token}", PHONE)
        await page.goto(f"{server.url}/#token={token}&task={thread_id}")
        await expect(page.get_by_test_id("step-0")).to_have_attribute(
            "data-status", "RUNNING", timeout=20_000
        )
        await expect(page.get_by_test_id("step-0")).to_contain_text("search")
        await expect(page.locator("#bar")).to_have_attribute("data-busy", "")
        running = await page.get_by_test_id("task").get_attribute("data-seq")  # a RUNNING seq
        await page.screenshot(path=ARTIFACTS / "graph-1-running-phone.png", full_page=True)
        release.set()
        await first

        await expect(page.get_by_test_id("interrupt")).to_be_visible(timeout=20_000)
        await expect(page.get_by_test_id("interrupt-question")).to_have_text(
            'Step 1 "approve" asks:'
        )
        await expect(page.get_by_test_id("interrupt-value")).to_have_text("pay 120 EUR?")
        await expect(page.get_by_test_id("step-1")).to_have_attribute("data-status", "PENDING")
        await expect(page.get_by_test_id("decision")).to_be_hidden()
        await expect(page.get_by_test_id("progress")).to_have_text("1 node run")
        await expect(page.locator("#bar")).not_to_have_attribute("data-busy", "")
        latest = await page.get_by_test_id("task").get_attribute("data-seq")
        scrubber = page.get_by_test_id("scrubber")
        await scrubber.fill(str(running))  # the history: a past, not a graph at work
        await expect(page.get_by_test_id("task")).to_have_attribute("data-seq", str(running))
        await expect(page.locator("#status")).to_have_text("running")
        await expect(page.locator("#bar")).not_to_have_attribute("data-busy", "")
        await scrubber.fill(str(latest))
        await expect(page.get_by_test_id("past")).to_be_hidden()
        await expect(page.get_by_test_id("progress-" + thread_id)).to_have_text(
            "awaiting decision · 1 node run"
        )
        await expect(page.get_by_test_id("lease")).to_contain_text(
            "This LangGraph thread runs without a lease"
        )
        await assert_fits_the_screen(page, "task", "interrupt", "interrupt-answer")
        await page.screenshot(path=ARTIFACTS / "graph-2-interrupt-phone.png", full_page=True)

        # The graph's process waits for the answer; a person gives it on the page.
        given = asyncio.create_task(saver.interrupt_answer(config))
        await page.get_by_test_id("interrupt-answer").fill("yes")
        await page.get_by_test_id("interrupt-why").fill("the price is fine")
        await page.get_by_test_id("interrupt-send").click()
        await expect(page.get_by_test_id("interrupt-answered")).to_contain_text('Answered "yes"')
        await expect(page.get_by_test_id("events")).to_contain_text(
            'watcher answered step 1 approve: "yes" (the price is fine)'
        )
        value = await asyncio.wait_for(given, 30)
        assert value == "yes"
        await asyncio.to_thread(lambda: graph.invoke(Command(resume=value), config))
    await expect(page.get_by_test_id("interrupt")).to_be_hidden(timeout=20_000)
    await expect(page.get_by_test_id("step-1")).to_have_attribute("data-status", "SUCCESS")
    await expect(page.locator("#status")).to_have_text("completed", timeout=20_000)
    await page.screenshot(path=ARTIFACTS / "graph-3-completed-phone.png", full_page=True)


async def test_the_demo_trip_books_on_the_answer_the_page_offers(
    dashboard: tuple[Server, str], browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the LangGraph demo answered from the page: its question offers its
    answers (``choices``) as buttons, one click on the offered "yes" sends it as
    the answer (with the reason typed) and books the trip (a PNR, not "not
    booked"), and a node feeding a join shows where it leads, never LangGraph's
    ``join:...`` channel. Seen failing with the buttons not drawn, with ``book``
    taking only "yes" typed (the page suggested ``{"approved": true}``), with the
    join shown as a channel of the state, and with a click only copying the choice
    into the answer box (nothing sent: the demo answered itself later). Guards too
    the log's sentence of a start that started two nodes (it said "step started",
    naming neither), the asking node's time line before and after the answer
    ("waiting to run again", not what it waits for), and the buttons disabled while
    an answer is on its way (seen failing with them left enabled: a second click
    sent a second answer)."""
    server, token = dashboard
    monkeypatch.setattr(demo_graph, "PAUSE", 0.0)
    thread_id = f"trip-{uuid.uuid4().hex[:8]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    async with RunstateSaver.from_url(server.url, token) as saver:
        graph = demo_graph.trip_graph(saver)
        start = {"traveller": "Ana", "city": "Lisbon", "options": []}
        asked = await graph.ainvoke(start, config)
        assert asked["__interrupt__"][0].value["choices"] == ["yes", "no"]
        page = await open_dashboard(browser, f"{server.url}/#token={token}&task={thread_id}", PHONE)
        await expect(page.get_by_test_id("interrupt")).to_be_visible(timeout=20_000)
        choices = page.get_by_test_id("interrupt-choice")
        await expect(choices).to_have_text(["yes", "no"])
        await expect(page.get_by_test_id("interrupt-form")).not_to_contain_text("approved")
        steps = page.locator("#steps")
        await expect(steps).to_contain_text("compare (once search_flights and search_hotels end)")
        await expect(steps).not_to_contain_text("join:")
        await expect(page.get_by_test_id("events")).to_contain_text(
            "steps 1 search_flights, 2 search_hotels: PENDING -> RUNNING"
        )
        await expect(page.get_by_test_id("time-4")).to_have_text("waiting for your answer")
        given = asyncio.create_task(saver.interrupt_answer(config))
        sent = asyncio.Event()

        async def hold_the_answer(route: Route) -> None:
            if sends(route.request, "pageAnswer"):
                await sent.wait()
            await route.continue_()

        await page.route("**/graphql", hold_the_answer)
        await page.get_by_test_id("interrupt-why").fill("the hotel is near the office")
        await choices.first.click()
        for button in (choices.first, choices.last, page.get_by_test_id("interrupt-send")):
            await expect(button).to_be_disabled()  # one answer at a time
        sent.set()
        await expect(page.get_by_test_id("interrupt-answered")).to_contain_text('Answered "yes"')
        await expect(page.get_by_test_id("time-4")).to_have_text(
            "answered: waiting for the graph to go on"
        )
        await expect(page.get_by_test_id("events")).to_contain_text(
            "(the hotel is near the office)"
        )
        answer = await asyncio.wait_for(given, 30)
        assert answer == "yes"
        done = await graph.ainvoke(Command(resume=answer), config)
    assert done["booking"].startswith("PNR-")


def test_the_demo_books_on_every_way_of_saying_yes() -> None:
    """Guards ``demo.graph.approved``: "yes", "Y", ``true`` and
    ``{"approved": true}`` book; "no", ``false`` and ``{"approved": false}`` do
    not. Seen failing with ``{"approved": true}`` (the form the page once
    suggested) booking nothing."""
    yes: list[Any] = ["yes", " Y ", True, "true", {"approved": True}]
    no: list[Any] = ["no", False, {"approved": False}, {"ok": True}, ""]
    assert [demo_graph.approved(a) for a in yes] == [True] * len(yes)
    assert [demo_graph.approved(a) for a in no] == [False] * len(no)
