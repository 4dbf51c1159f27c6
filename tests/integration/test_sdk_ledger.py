"""The SDK's side of a session's admission ledger against a real server: ``submit``
under each policy with its typed refusal, reading and cancelling, and ``serve``
running a session's submissions in ledger order and stepping aside, cleanly,
for an INTERRUPT."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from runstate.client import (
    EveryNSteps,
    InvalidTransition,
    NotFound,
    Runstate,
    SessionBusy,
    TaskInterrupted,
    TaskRunner,
)
from tests.support import AgentProcess, Server, create_token, sqlite_server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    with sqlite_server(tmp_path_factory, "sdk-ledger") as server:
        yield server, create_token(server.database_url, "ledger-user")


@pytest.fixture
async def rs(served: tuple[Server, str]) -> AsyncIterator[Runstate]:
    server, token = served
    async with Runstate(server.url, token) as client:
        yield client


def plan(*actions: str) -> list[dict[str, Any]]:
    return [{"action": action} for action in actions]


async def statuses(rs: Runstate, session_id: str) -> list[tuple[Any, str]]:
    """The session's ledger as (input, status), in order."""
    return [(s.input, s.status) for s in await rs.submissions(session_id)]


async def test_submit_admits_under_each_policy_and_refuses_busy_with_session_busy(
    rs: Runstate,
) -> None:
    """Guards ``submit`` and its reads: the first input is ACTIVE under REJECT; a
    second REJECT raises ``SessionBusy`` carrying the active submission; ENQUEUE
    queues; INTERRUPT ends the unleased active task at once and runs next, ahead of
    the queued one; ROLLBACK removes the task it stops; the same idempotency key
    answers the same submission; ``active_submission``, ``submissions`` (by status
    too) and ``cancel_submission`` read and change the ledger as the server keeps
    it."""
    session = (await rs.start_session()).id
    first = await rs.submit(session, "answer", plan("think"), input={"text": "one"})
    assert (first.seq, first.status, first.policy, first.input) == (
        1,
        "ACTIVE",
        "REJECT",
        {"text": "one"},
    )
    with pytest.raises(SessionBusy) as busy:
        await rs.submit(session, "answer", plan("think"), input="refused")
    assert (busy.value.active.id, busy.value.active.seq) == (first.id, 1)

    queued = await rs.submit(session, "answer", plan("think"), input="two", policy="ENQUEUE")
    assert (queued.seq, queued.status) == (2, "QUEUED")
    again = await rs.submit(
        session, "answer", plan("think"), input="three", policy="INTERRUPT", idempotency_key="k3"
    )
    assert (again.seq, again.status) == (3, "ACTIVE")
    retried = await rs.submit(
        session, "answer", plan("think"), input="three", policy="INTERRUPT", idempotency_key="k3"
    )
    assert retried.id == again.id
    assert first.task_id is not None
    assert (await rs.task(first.task_id)).status == "CANCELLED"

    rolled = await rs.submit(session, "answer", plan("think"), input="four", policy="ROLLBACK")
    assert rolled.status == "ACTIVE"
    assert again.task_id is not None
    with pytest.raises(NotFound):
        await rs.task(again.task_id)
    active = await rs.active_submission(session)
    assert active is not None
    assert active.id == rolled.id

    with pytest.raises(InvalidTransition):
        await rs.cancel_submission(rolled.id)
    cancelled = await rs.cancel_submission(queued.id, note="not needed")
    assert (cancelled.status, cancelled.reason, cancelled.task_id) == (
        "CANCELLED",
        "not needed",
        None,
    )
    assert await statuses(rs, session) == [
        ({"text": "one"}, "INTERRUPTED"),
        ("two", "CANCELLED"),
        ("three", "ROLLED_BACK"),
        ("four", "ACTIVE"),
    ]
    assert [s.seq for s in await rs.submissions(session, status="INTERRUPTED")] == [1]
    assert (await rs.submission(first.id)).displaced_by == again.id


async def test_serve_runs_enqueued_submissions_in_ledger_order(rs: Runstate) -> None:
    """Guards ``serve``: three ENQUEUEd inputs are handed to the handler one after
    another in seq order, each with its submission's input and a runner on its
    task, and each ends COMPLETED; another session's input is left alone (seen
    run, with the claims made without the session)."""
    elsewhere = await rs.submit((await rs.start_session()).id, "answer", ["x"], input="other")
    session = (await rs.start_session()).id
    for text in ("one", "two", "three"):
        await rs.submit(session, "answer", plan("read", "reply"), input=text, policy="ENQUEUE")
    handled: list[tuple[Any, str]] = []
    stop = asyncio.Event()

    async def answer(text: Any, run: TaskRunner) -> None:
        assert run.submission is not None
        handled.append((text, run.submission.task_id or ""))
        for step in run.remaining:
            await run.begin(step.index)
            await run.succeed(step.index, f"{step.action} {text}")
        if len(handled) == 3:
            stop.set()

    await asyncio.wait_for(rs.serve(session, answer, holder="w", idle_seconds=0.1, stop=stop), 60)
    ledger = await rs.submissions(session)
    assert handled == [(s.input, s.task_id) for s in ledger]
    assert [s.input for s in ledger] == ["one", "two", "three"]
    assert {s.status for s in ledger} == {"COMPLETED"}
    assert (await rs.submission(elsewhere.id)).status == "ACTIVE"


async def test_an_interrupt_between_steps_is_refused_by_the_server_and_served_next(
    rs: Runstate,
) -> None:
    """Guards ``serve`` on the server's refusal: an INTERRUPT arriving between two
    steps makes the next ``begin`` raise ``TaskInterrupted`` (the server's answer,
    naming the submission); ``serve`` catches it, the runner lets its lease go,
    which ends the task CANCELLED with its first step kept, and the interrupting
    input is served next."""
    session = (await rs.start_session()).id
    await rs.submit(session, "answer", plan("read", "reply"), input="slow")
    seen: list[Any] = []
    refused: list[TaskInterrupted] = []
    stop = asyncio.Event()

    async def answer(text: Any, run: TaskRunner) -> None:
        seen.append(text)
        for step in run.remaining:
            if text == "slow" and step.index == 1:
                await rs.submit(session, "fix", plan("reply"), input="urgent", policy="INTERRUPT")
            try:
                await run.begin(step.index)
            except TaskInterrupted as stopped:
                refused.append(stopped)
                raise
            await run.succeed(step.index, text)
        if text == "urgent":
            stop.set()

    await asyncio.wait_for(rs.serve(session, answer, holder="w", idle_seconds=0.1, stop=stop), 60)
    assert seen == ["slow", "urgent"]
    ledger = await rs.submissions(session)
    assert [(s.input, s.status) for s in ledger] == [
        ("slow", "INTERRUPTED"),
        ("urgent", "COMPLETED"),
    ]
    assert [r.submission.id for r in refused] == [ledger[0].id]
    assert ledger[0].task_id is not None
    stopped = await rs.task(ledger[0].task_id)
    assert stopped.status == "CANCELLED"
    assert stopped.lock is None
    assert [s.status for s in stopped.steps or ()] == ["SUCCESS", "PENDING"]


async def test_a_refused_start_under_a_buffered_policy_keeps_the_steps_before_it(
    rs: Runstate,
) -> None:
    """Guards ``TaskRunner.begin`` under a policy that buffers: a start of a step
    that is not idempotent, refused with ``TaskInterrupted``, leaves the runner
    without its RUNNING patch, so leaving it writes the two steps that finished
    before (SUCCESS) and the task ends CANCELLED. Seen failing with the patch
    kept: leaving sent it again, was refused again, and wrote nothing."""
    session = (await rs.start_session()).id
    submitted = await rs.submit(
        session, "answer", ["a", "b", {"action": "mail", "idempotent": False}], input="x"
    )
    assert submitted.task_id is not None

    async def interrupted_at_the_mail(task_id: str) -> None:
        async with rs.run(task_id, holder="w", policy=EveryNSteps(5)) as run:
            for step in run.remaining:
                if step.action == "mail":
                    await rs.submit(session, "answer", plan("reply"), policy="INTERRUPT")
                await run.begin(step.index)
                await run.succeed(step.index, step.action)

    with pytest.raises(TaskInterrupted):
        await interrupted_at_the_mail(submitted.task_id)
    task = await rs.task(submitted.task_id)
    assert task.status == "CANCELLED"
    assert [s.status for s in task.steps or ()] == ["SUCCESS", "SUCCESS", "PENDING"]


def test_an_interrupt_mid_step_stops_the_served_task_cleanly_and_runs_next(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards ``serve`` and the runner's own refusal, in an agent process: an
    INTERRUPT submitted while a step runs lets that step finish (its success is
    written and ends the task CANCELLED), the agent's next ``begin`` raises
    ``TaskInterrupted`` without a write, ``serve`` logs one line, lets the lease
    go and runs the interrupting input next. No traceback in the agent's stderr
    nor in the server's log; the agent's lines show the order."""
    server, token = served
    asyncio.run(_interrupt_mid_step(server, token, tmp_path))


async def _interrupt_mid_step(server: Server, token: str, tmp_path: Path) -> None:
    async with Runstate(server.url, token) as rs:
        session = (await rs.start_session()).id
        first = await rs.submit(session, "trip", plan("search", "book", "mail"), input="trip")
        stderr = tmp_path / "agent.err"
        agent = AgentProcess(
            server.url, token, session, "--pause-at", "book", "--last", "cancel",
            module="tests.agents.ledger_agent", stderr=stderr,
        )  # fmt: skip
        try:
            await asyncio.to_thread(agent.until, lambda line: line.get("action") == "book")
            urgent = await rs.submit(
                session, "cancel", plan("undo"), input="cancel", policy="INTERRUPT"
            )
            assert urgent.status == "QUEUED"  # the trip's agent holds its lease
            agent.send("\n")
            lines = await asyncio.to_thread(agent.rest)
        finally:
            agent.kill()
        assert [(line["event"], line.get("action")) for line in lines] == [
            ("done", "book"),
            ("began", "undo"),
            ("done", "undo"),
            ("finished", None),
        ]
        assert first.task_id is not None
        task = await rs.task(first.task_id)
        assert task.status == "CANCELLED"
        assert task.lock is None
        assert [s.status for s in task.steps or ()] == ["SUCCESS", "SUCCESS", "PENDING"]
        assert await statuses(rs, session) == [("trip", "INTERRUPTED"), ("cancel", "COMPLETED")]
    errors = stderr.read_text()
    assert f"task {first.task_id} stopped: submission 1 of session" in errors, errors
    assert "Traceback" not in errors, errors
    assert "Traceback" not in server.log()
