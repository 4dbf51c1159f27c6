"""``serve_session`` against a real server: a LangGraph graph run for each
submission of a session, in ledger order, each on its own task as the thread,
and stopped at the next super-step by an INTERRUPT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from runstate.client import Runstate
from runstate.integrations.langgraph import RunstateSaver
from runstate.integrations.langgraph_ledger import serve_session
from tests.support import Api, Server, create_token, mutate, sqlite_server


class Trip(TypedDict):
    text: str
    done: Annotated[list[str], operator.add]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    with sqlite_server(tmp_path_factory, "graph-ledger", RUNSTATE_RATE_LIMIT="false") as server:
        yield server, create_token(server.database_url, "graph-ledger")


@pytest.fixture
async def rs(served: tuple[Server, str]) -> AsyncIterator[Runstate]:
    server, token = served
    async with Runstate(server.url, token) as client:
        yield client


class Trips:
    """A graph of three nodes, search -> book -> pay, each recording (input, node)
    as it runs; ``book`` of ``pause_in`` waits for ``gate`` once it said so
    (``in_book``), ``book`` of ``ask_in`` asks a person (``interrupt()``) and keeps
    the answer (``answers``); ``stop`` is set once ``last``'s pay ran."""

    def __init__(self, last: str, pause_in: str | None = None, ask_in: str | None = None) -> None:
        self.ran: list[tuple[str, str]] = []
        self.answers: list[Any] = []
        self.last = last
        self.pause_in = pause_in
        self.ask_in = ask_in
        self.in_book = asyncio.Event()
        self.gate = asyncio.Event()
        self.stop = asyncio.Event()

    def compiled(self, saver: RunstateSaver) -> Any:
        builder = StateGraph(Trip)
        for name in ("search", "book", "pay"):
            builder.add_node(name, self.node(name))
        builder.add_edge(START, "search")
        builder.add_edge("search", "book")
        builder.add_edge("book", "pay")
        builder.add_edge("pay", END)
        return builder.compile(checkpointer=saver)

    def node(self, name: str) -> Any:
        async def run(state: Trip) -> dict[str, Any]:
            self.ran.append((state["text"], name))
            if name == "book" and state["text"] == self.pause_in:
                self.in_book.set()
                await self.gate.wait()
            if name == "book" and state["text"] == self.ask_in:
                self.answers.append(interrupt("book it?"))
            if name == "pay" and state["text"] == self.last:
                self.stop.set()
            return {"done": [name]}

        return run


async def serve(served: tuple[Server, str], session_id: str, trips: Trips) -> None:
    server, token = served
    async with RunstateSaver.from_url(server.url, token, holder="graph-worker") as saver:
        graph = trips.compiled(saver)
        await asyncio.wait_for(
            serve_session(saver, graph, session_id, idle_seconds=0.1, stop=trips.stop), 60
        )


async def test_a_graph_runs_each_submission_in_ledger_order_on_its_own_thread(
    rs: Runstate, served: tuple[Server, str]
) -> None:
    """Guards ``serve_session``: two ENQUEUEd inputs run the graph one after the
    other, in seq order, each with its input on its submission's task as the
    thread (its checkpoints there, its nodes its steps), and each ends COMPLETED
    (the watched run's end ends the submission, and the next runs)."""
    session = (await rs.start_session()).id
    for text in ("one", "two"):
        await rs.submit(session, "trip", [], input={"text": text}, policy="ENQUEUE")
    trips = Trips(last="two")
    await serve(served, session, trips)
    assert trips.ran == [(t, n) for t in ("one", "two") for n in ("search", "book", "pay")]
    ledger = await rs.submissions(session)
    assert [(s.input, s.status) for s in ledger] == [
        ({"text": "one"}, "COMPLETED"),
        ({"text": "two"}, "COMPLETED"),
    ]
    for submission in ledger:
        assert submission.task_id is not None
        task = await rs.task(submission.task_id)
        assert [s.action for s in task.steps or ()] == ["search", "book", "pay"]
        assert {s.status for s in task.steps or ()} == {"SUCCESS"}


async def test_an_interrupt_stops_the_graph_at_the_next_super_step_and_runs_next(
    rs: Runstate, served: tuple[Server, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Guards ``serve_session`` and the saver's typed refusal: an INTERRUPT
    submitted while ``book`` runs lets ``book`` finish in the process, but the
    saver's next write (the checkpoint that ends its super-step) answers
    ``TaskInterrupted``: ``pay`` never runs, nothing of ``book`` is stored, the
    lease is let go and the thread's task ends CANCELLED, its submission
    INTERRUPTED; the interrupting input runs next, to COMPLETED. One line says so,
    and no warning or error is logged."""
    session = (await rs.start_session()).id
    first = await rs.submit(session, "trip", [], input={"text": "slow"})
    trips = Trips(last="urgent", pause_in="slow")

    async def interrupt() -> None:
        await trips.in_book.wait()
        urgent = await rs.submit(session, "trip", [], input={"text": "urgent"}, policy="INTERRUPT")
        assert urgent.status == "QUEUED"  # the slow thread's lease is live
        trips.gate.set()

    with caplog.at_level(logging.INFO, logger="runstate"):
        await asyncio.wait_for(asyncio.gather(serve(served, session, trips), interrupt()), 60)
    assert trips.ran == [
        ("slow", "search"),
        ("slow", "book"),
        ("urgent", "search"),
        ("urgent", "book"),
        ("urgent", "pay"),
    ]
    ledger = await rs.submissions(session)
    assert [(s.input["text"], s.status) for s in ledger] == [
        ("slow", "INTERRUPTED"),
        ("urgent", "COMPLETED"),
    ]
    assert first.task_id is not None
    stopped = await rs.task(first.task_id)
    assert stopped.status == "CANCELLED"
    assert stopped.lock is None
    assert [(s.action, s.status) for s in stopped.steps or ()] == [
        ("search", "SUCCESS"),
        ("book", "RUNNING"),
    ]
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert [m for _, level, m in said if level >= logging.WARNING] == []
    assert (
        "runstate.integrations.langgraph_ledger",
        logging.INFO,
        f"thread {first.task_id} stopped: submission 1 of session {session!r} was interrupted"
        f" by submission {ledger[1].id!r}: its task starts no new work. Nothing was written.",
    ) in said


async def waiting_at_its_interrupt(rs: Runstate, task_id: str) -> int:
    """Follow the thread until it waits at an interrupt; its version then."""
    watch = rs.watch(task_id)
    async with contextlib.aclosing(watch.__aiter__()) as events:
        async for event in events:
            if event.status == "AWAITING_DECISION":
                return event.task_version
    raise AssertionError("the watch ended")


async def let_go_to_wait(rs: Runstate, task_id: str) -> None:
    """Follow the thread until it waits at an interrupt and the helper let it go
    to wait for the answer: its run's end released the lease, the helper took it
    to read the thread, and released it again."""
    watch = rs.watch(task_id)
    waiting, released = False, 0
    async with contextlib.aclosing(watch.__aiter__()) as events:
        async for event in events:
            waiting = waiting or event.status == "AWAITING_DECISION"
            if waiting and event.kind == "LOCK_RELEASED":
                released += 1
            if released == 2:
                return
    raise AssertionError("the watch ended")


def answered(served: tuple[Server, str], task_id: str, version: int, value: Any) -> str:
    """A person's answer to the interrupt of the thread's ``book`` (step 1)."""
    server, token = served
    with Api(server.url, token) as api:
        answer = mutate(
            api, "answerInterrupt", "AnswerInterruptInput", "__typename",
            taskId=task_id, stepIndex=1, expectedVersion=version, value=value,
        )  # fmt: skip
    return str(answer["__typename"])


async def test_a_thread_waiting_at_interrupt_keeps_the_turn_until_a_person_answers(
    rs: Runstate, served: tuple[Server, str]
) -> None:
    """Guards ``serve_session`` on a graph that asks a person: its thread waits at
    ``interrupt()`` holding the session's turn (the next input does not run), the
    helper resumes it with the answer given where it is watched
    (``answerInterrupt``), and the next input runs once it completed."""
    session = (await rs.start_session()).id
    asking = await rs.submit(session, "trip", [], input={"text": "ask"})
    await rs.submit(session, "trip", [], input={"text": "two"}, policy="ENQUEUE")
    assert asking.task_id is not None
    trips = Trips(last="two", ask_in="ask")

    async def answer() -> None:
        assert asking.task_id is not None
        version = await waiting_at_its_interrupt(rs, asking.task_id)
        assert trips.ran == [("ask", "search"), ("ask", "book")]
        said = await asyncio.to_thread(answered, served, asking.task_id, version, "yes")
        assert said == "Task"

    await asyncio.wait_for(asyncio.gather(serve(served, session, trips), answer()), 60)
    assert trips.answers == ["yes"]
    assert trips.ran == [
        *[("ask", n) for n in ("search", "book", "book", "pay")],
        *[("two", n) for n in ("search", "book", "pay")],
    ]
    assert [s.status for s in await rs.submissions(session)] == ["COMPLETED", "COMPLETED"]


async def test_an_interrupt_ends_a_thread_waiting_for_a_person_and_runs_next(
    rs: Runstate, served: tuple[Server, str]
) -> None:
    """Guards ``serve_session``'s wait for an answer: the helper lets the waiting
    thread's lease go, so an INTERRUPT ends it CANCELLED at once (the new input
    ACTIVE in that request); the helper stops waiting for an answer that will
    not come, and the interrupting input runs."""
    session = (await rs.start_session()).id
    asking = await rs.submit(session, "trip", [], input={"text": "ask"})
    assert asking.task_id is not None
    trips = Trips(last="urgent", ask_in="ask")

    async def interrupt_it() -> None:
        assert asking.task_id is not None
        await let_go_to_wait(rs, asking.task_id)
        urgent = await rs.submit(session, "trip", [], input={"text": "urgent"}, policy="INTERRUPT")
        assert urgent.status == "ACTIVE"

    await asyncio.wait_for(asyncio.gather(serve(served, session, trips), interrupt_it()), 60)
    assert trips.answers == []
    assert trips.ran == [
        ("ask", "search"),
        ("ask", "book"),
        *[("urgent", n) for n in ("search", "book", "pay")],
    ]
    assert [s.status for s in await rs.submissions(session)] == ["INTERRUPTED", "COMPLETED"]
    assert (await rs.task(asking.task_id)).status == "CANCELLED"


async def test_runs_ended_waits_for_the_run_s_end_and_its_lease_let_go(
    rs: Runstate, served: tuple[Server, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards ``RunstateSaver.runs_ended``, which ``serve_session`` awaits before it
    reads the ledger again: a watched run's end is sent after ``ainvoke`` returned,
    and until it is stored (and the lease let go) the finished submission is still
    the ACTIVE one, whose thread the helper would run again. Here the end is held
    on its way: ``runs_ended`` is not done while the thread is still RUNNING and
    leased, and is once the end went (COMPLETED, no lease)."""
    server, token = served
    thread = (await rs.submit((await rs.start_session()).id, "trip", [], input="x")).task_id
    assert thread is not None
    reached, gate = asyncio.Event(), asyncio.Event()
    async with RunstateSaver.from_url(server.url, token, holder="graph-worker") as saver:
        sent = saver._client.record_graph_run

        async def held(**report: Any) -> Any:
            if report.get("ended") is not None:
                reached.set()
                await gate.wait()
            return await sent(**report)

        monkeypatch.setattr(saver._client, "record_graph_run", held)
        graph = saver.watch(Trips(last="x").compiled(saver))
        await graph.ainvoke({"text": "x"}, {"configurable": {"thread_id": thread}})
        await reached.wait()
        ending = asyncio.ensure_future(saver.runs_ended())
        try:
            before = await rs.task(thread)  # a round trip: time enough for a wait that is none
            assert not ending.done()
            assert (before.status, before.lock is not None) == ("RUNNING", True)
        finally:
            gate.set()  # the saver's close waits for the end held
        await asyncio.wait_for(ending, 30)
        after = await rs.task(thread)
        assert (after.status, after.lock) == ("COMPLETED", None)
