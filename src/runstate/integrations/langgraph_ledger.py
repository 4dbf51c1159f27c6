"""``serve_session``: a LangGraph graph run for each input of a runstate session's
admission ledger, one after another in ledger order.

Each submission's task is the thread of its run (``thread_id`` = the task's id):
the graph is invoked on that thread with the submission's input, so the thread,
its checkpoints and its node steps are the submission's, and the ledger's rules
hold for the graph as for any task. An INTERRUPT or ROLLBACK of the running
submission makes the saver's next write answer ``TaskInterrupted``; the graph
runs with ``durability="sync"``, so that write is the checkpoint that ends the
super-step under way and the next super-step never starts. The helper catches it,
the saver lets the thread's lease go (which ends the task CANCELLED), and the
submission that interrupted it runs next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Command

from runstate.basics.enums import StepStatus, SubmissionStatus, TaskStatus
from runstate.client import Runstate
from runstate.client.exceptions import LockHeld, LockNotHeld, NotFound, TaskInterrupted
from runstate.client.records import Submission, Task
from runstate.integrations.langgraph import RunstateSaver

log = logging.getLogger(__name__)

ENDED = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})


async def serve_session(
    saver: RunstateSaver,
    graph: Pregel[Any, Any, Any, Any],
    session_id: str,
    *,
    config: RunnableConfig | None = None,
    idle_seconds: float = 1.0,
    stop: asyncio.Event | None = None,
) -> None:
    """Run ``graph`` (compiled with ``checkpointer=saver``) for each submission of
    the session, in ledger order, until ``stop`` is set: the submission whose turn
    it is (ACTIVE) is run on its own task as the thread, with its input as the
    graph's input; with none, the ledger is read again every ``idle_seconds``.
    ``config`` is given to every run (its ``thread_id`` is the submission's task).

    The saver must have a ``holder``: the helper leases the submission's thread to
    it before the run (a thread another process runs is left to it), and the saver
    writes under that lease, so an INTERRUPT or ROLLBACK stops the run at its next
    write (``TaskInterrupted``, caught here and logged) instead of ending the task
    beneath it. The graph is watched (``saver.watch``), so its nodes show as they
    start and each run's end ends its submission COMPLETED or FAILED. A node's
    error is raised, its submission FAILED.

    A thread waiting at an ``interrupt()`` keeps its submission's turn: the helper
    lets its lease go and waits for the person's answer (the dashboard, or
    ``answerInterrupt``), then resumes the graph with it (``Command(resume=...)``);
    an INTERRUPT meanwhile ends the waiting thread at once. A thread that holds
    checkpoints already (its process died mid-run) goes on from its last one."""
    holder = saver.holder
    if holder is None:
        raise ValueError("serve_session needs a saver with a holder (RunstateSaver(holder=...))")
    callbacks = (graph.config or {}).get("callbacks")
    if not (isinstance(callbacks, list) and saver.watcher in callbacks):
        graph = saver.watch(graph)
    stop = stop or asyncio.Event()
    async with Runstate(saver.url, saver.token) as rs:
        while not stop.is_set():
            turn = await _turn(rs, session_id, holder, max(1, round(saver.lease_ttl)))
            if turn is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), idle_seconds)
                continue
            task, submission = turn
            run_config: RunnableConfig = {**(config or {})}
            run_config["configurable"] = {
                **run_config.get("configurable", {}),
                "thread_id": task.id,
            }
            if task.status is TaskStatus.AWAITING_DECISION and _answer(task) is None:
                await _let_go(rs, task.id, holder)
                await _until_stopped(stop, _answered_or_ended(rs, task.id))
                continue
            await _run(saver, graph, await _input(saver, task, submission, run_config), run_config)


async def _turn(
    rs: Runstate, session_id: str, holder: str, ttl: int
) -> tuple[Task, Submission] | None:
    """The session's ACTIVE submission and its task, leased to ``holder`` and read
    under that lease; None when there is none, when another worker holds it, or
    when its turn ended meanwhile."""
    active = await rs.active_submission(session_id)
    if active is None or active.task_id is None:
        return None
    try:
        await rs.acquire_lock(active.task_id, holder, ttl)
        task = await rs.task(active.task_id)
    except (LockHeld, NotFound):  # another worker's, or rolled back meanwhile
        return None
    submission = task.submission
    if submission is None or submission.status is not SubmissionStatus.ACTIVE:
        await _let_go(rs, task.id, holder)
        return None
    return task, submission


async def _input(
    saver: RunstateSaver, task: Task, submission: Submission, config: RunnableConfig
) -> Any:
    """What the run is given: the person's answer to the interrupt the thread
    waits at, nothing when it holds a checkpoint (a run its process left goes on
    from the last one), else the submission's input."""
    answer = _answer(task)
    if task.status is TaskStatus.AWAITING_DECISION and answer is not None:
        return Command(resume=answer[0])
    if await saver.aget_tuple(config) is not None:
        return None
    return submission.input


async def _run(
    saver: RunstateSaver, graph: Pregel[Any, Any, Any, Any], given: Any, config: RunnableConfig
) -> None:
    """One run of the graph, its checkpoints stored before each next super-step;
    a ``TaskInterrupted`` from the saver's write ends it, said in one line."""
    try:
        await graph.ainvoke(given, config, durability="sync")
    except TaskInterrupted as stopped:
        log.info("thread %s stopped: %s", config["configurable"]["thread_id"], stopped)
    finally:
        await saver.runs_ended()  # its end sent, its lease let go: the ledger moves on


def _answer(task: Task) -> tuple[Any] | None:
    """The answer a person gave to the interrupt the thread waits at, if given."""
    for step in task.steps or ():
        asked = step.output
        if step.status is StepStatus.PENDING and isinstance(asked, dict) and "answer" in asked:
            return (asked["answer"],)
    return None


async def _answered_or_ended(rs: Runstate, task_id: str) -> None:
    """Follow the thread until a person answers its interrupt or it ends (an
    INTERRUPT ends a thread nobody leases at once)."""
    watch = rs.watch(task_id)
    async with contextlib.aclosing(watch.__aiter__()) as events:
        async for _ in events:
            task = watch.task
            if task is not None and (task.status in ENDED or _answer(task) is not None):
                return


async def _until_stopped(stop: asyncio.Event, waiting: Coroutine[Any, Any, None]) -> None:
    """``waiting``, given up when ``stop`` is set first; its error raised."""
    watching = asyncio.ensure_future(waiting)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({watching, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watching, stopping):
            task.cancel()
        await asyncio.gather(watching, stopping, return_exceptions=True)
    if not watching.cancelled():
        watching.result()


async def _let_go(rs: Runstate, task_id: str, holder: str) -> None:
    with contextlib.suppress(LockNotHeld, NotFound):
        await rs.release_lock(task_id, holder)
