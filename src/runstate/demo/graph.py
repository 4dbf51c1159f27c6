"""``runstate demo --langgraph``: a LangGraph graph books trips on ``RunstateSaver``.

No model calls: deterministic nodes, each taking a moment so a person can
follow it in the dashboard (plain functions: LangGraph runs them in threads).
``plan`` fans out to ``search_flights`` and ``search_hotels`` (one super-step,
both RUNNING at once), ``compare`` picks, ``approve`` asks a person with
``interrupt()``, then ``book`` and ``confirm``. Each node run is a step of the
thread's task; the thread waits at the question until a person answers it in the
dashboard (``answerInterrupt``), which the demo reads through the saver
(``interrupt_answer``) and resumes the graph with, as an application would, with
``Command(resume=...)``; after ``ANSWER_AFTER`` seconds the demo answers "yes"
itself. Then the next trip starts.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import time
import unicodedata
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from runstate.demo.trips import first_trip_when
from runstate.integrations.langgraph import RunstateSaver

PAUSE = 1.5
"""Seconds a node takes: slow enough to watch."""
ANSWER_AFTER = 60.0
"""Seconds the demo leaves a trip's question to a person in the dashboard, then
answers it itself."""
NEXT_TRIP_AFTER = 10.0
"""Seconds between a trip's end and the next one's start."""
CITIES = ["Lisbon", "Kyoto", "Valparaíso", "Tallinn", "Oaxaca"]
TRAVELLERS = ["Ana", "Kenji", "Rosa", "Mart", "Lupe", "Idris", "Nora"]


class Trip(TypedDict):
    """A trip being booked: each node adds what it found or did."""

    traveller: str
    city: str
    options: Annotated[list[dict[str, Any]], operator.add]
    choice: dict[str, Any]
    answer: str
    booking: str


def plan(state: Trip) -> dict[str, Any]:
    time.sleep(PAUSE)
    return {"options": []}


def search_flights(state: Trip) -> dict[str, Any]:
    time.sleep(PAUSE)
    return {"options": [{"kind": "flight", "what": f"TP 1351 to {state['city']}", "eur": 214}]}


def search_hotels(state: Trip) -> dict[str, Any]:
    time.sleep(PAUSE * 2)
    return {"options": [{"kind": "hotel", "what": f"Casa do Rio, {state['city']}", "eur": 420}]}


def compare(state: Trip) -> dict[str, Any]:
    time.sleep(PAUSE)
    total = sum(int(o["eur"]) for o in state["options"])
    return {"choice": {"items": [o["what"] for o in state["options"]], "eur": total}}


CHOICES = ["yes", "no"]
"""The answers the question offers: the dashboard shows them as buttons."""


def approve(state: Trip) -> dict[str, Any]:
    choice = state["choice"]
    question = f"Book {' and '.join(choice['items'])} for {choice['eur']} EUR?"
    asked = {"question": question, "traveller": state["traveller"], "choices": CHOICES}
    return {"answer": interrupt(asked)}


def approved(answer: Any) -> bool:
    """Whether a person's answer says yes, in any form a person would type: "yes"
    or "y" in any case, ``true``, or ``{"approved": true}``."""
    if isinstance(answer, dict):
        return answer.get("approved") is True
    if isinstance(answer, bool):
        return answer
    return str(answer).strip().lower() in ("yes", "y", "true")


def book(state: Trip) -> dict[str, Any]:
    time.sleep(PAUSE)
    if not approved(state["answer"]):
        return {"booking": "not booked"}
    return {"booking": f"PNR-{uuid.uuid4().hex[:6].upper()}"}


def confirm(state: Trip) -> dict[str, Any]:
    time.sleep(PAUSE)
    return {}


def ascii_slug(name: str) -> str:
    """``name`` in lower-case ASCII, accents dropped ("Valparaíso" -> "valparaiso"):
    a thread id is a runstate id, ASCII only."""
    return unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()


def trip_graph(saver: RunstateSaver) -> CompiledStateGraph[Any]:
    """The trip graph, checkpointed by ``saver`` and watched node by node."""
    builder = StateGraph(Trip)
    builder.add_node("plan", plan)
    builder.add_node("search_flights", search_flights)
    builder.add_node("search_hotels", search_hotels)
    builder.add_node("compare", compare)
    builder.add_node("approve", approve)
    builder.add_node("book", book)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "search_flights")
    builder.add_edge("plan", "search_hotels")
    builder.add_edge(["search_flights", "search_hotels"], "compare")
    builder.add_edge("compare", "approve")
    builder.add_edge("approve", "book")
    builder.add_edge("book", "confirm")
    builder.add_edge("confirm", END)
    return saver.watch(builder.compile(checkpointer=saver))


def answered_line(thread_id: str, answer: Any, booking: str, *, by_person: bool) -> str:
    """The line the terminal shows as a trip goes on from its question: who
    answered (a person on the page, or the demo itself after ``ANSWER_AFTER``),
    what, and what came of it, so that a person can tell their answer counted."""
    who = (
        f"you answered {answer!r} on the page"
        if by_person
        else f"nobody answered in {ANSWER_AFTER:.0f} s, so the demo answered {answer!r} itself"
    )
    outcome = booking if booking == "not booked" else f"booked {booking}"
    return f"{thread_id}: {who}: {outcome}"


async def graph_trips(base: str, token: str, session_id: str, opened: asyncio.Event) -> None:
    """Book trips one after another in the session ``session_id``, each a thread of
    its own, forever: the first once ``opened`` (the dashboard is open) or after
    ``FIRST_TRIP_WAIT``."""
    trips = zip(itertools.cycle(TRAVELLERS), itertools.cycle(CITIES), strict=False)
    async with RunstateSaver.from_url(base, token, session_id=session_id) as saver:
        graph = trip_graph(saver)
        await first_trip_when(opened)
        for traveller, city in trips:
            thread_id = f"trip-{ascii_slug(city)}-{uuid.uuid4().hex[:6]}"
            config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
            start: dict[str, Any] = {"traveller": traveller, "city": city, "options": []}
            asked = await graph.ainvoke(start, config)
            question = asked["__interrupt__"][0].value["question"]
            print(
                f"{thread_id} asks: {question} Answer it in the dashboard"
                f" (the demo answers yes itself after {ANSWER_AFTER:.0f} s).",
                flush=True,
            )
            by_person = True
            try:
                answer = await asyncio.wait_for(saver.interrupt_answer(config), ANSWER_AFTER)
            except TimeoutError:
                answer, by_person = "yes", False
            done = await graph.ainvoke(Command(resume=answer), config)
            print(
                answered_line(thread_id, answer, done["booking"], by_person=by_person), flush=True
            )
            await asyncio.sleep(NEXT_TRIP_AFTER)
