"""``TaskRunner(durability="async")``: idempotent steps written in the background,
in order, while the next step runs; a step that is not idempotent waits for them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runstate.client import EveryStep, InvalidInput, Runstate, Task
from runstate.client.runner import Durability
from tests.support import AgentProcess, Server, create_token, sqlite_server

TRIP = ["search flights", "compare prices", "pick seat"]
CHARGE = "charge card"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    with sqlite_server(tmp_path_factory, "durability") as server:
        yield server, create_token(server.database_url, "async-agent")


@pytest.fixture
async def rs(served: tuple[Server, str]) -> AsyncIterator[Runstate]:
    server, token = served
    async with Runstate(server.url, token) as client:
        yield client


async def trip(rs: Runstate) -> Task:
    """A task of three idempotent steps, a charge that is not, and a last step."""
    session = await rs.start_session()
    return await rs.create_task(
        session.id,
        "book a trip",
        [*TRIP, {"action": CHARGE, "idempotent": False}, "send confirmation"],
        id=f"trip-{uuid.uuid4().hex[:8]}",
    )


async def statuses(rs: Runstate, task_id: str) -> list[str]:
    return [s.status for s in (await rs.task(task_id)).steps or ()]


async def step_log(rs: Runstate, task_id: str) -> list[tuple[str, int | None]]:
    """The task's events as (kind, step index), in order."""
    head = await rs.task(task_id)
    log: list[tuple[str, int | None]] = []
    async with contextlib.aclosing(rs.watch(task_id, after_seq=0).__aiter__()) as watched:
        async for event in watched:
            log.append((event.kind, event.step_index))
            if event.seq == head.event_seq:
                return log
    raise AssertionError("the watch ended early")


async def run_all(rs: Runstate, task_id: str, durability: Durability) -> None:
    """Every step of the task, each after 5 ms of work."""
    async with rs.run(task_id, holder="runner", policy=EveryStep(), durability=durability) as run:
        for step in run.remaining:
            await run.begin(step.index)
            await asyncio.sleep(0.005)
            await run.succeed(step.index, {"done": step.action})


async def test_a_queued_run_ends_as_a_synchronous_one(rs: Runstate) -> None:
    """Guards the queue's completeness: a whole run with durability="async" leaves
    every step as the same run with "sync" does (the control): status and output."""
    queued, waited = await trip(rs), await trip(rs)
    await run_all(rs, queued.id, "async")
    await run_all(rs, waited.id, "sync")
    ended = [(s.status, s.output) for s in (await rs.task(queued.id)).steps or ()]
    assert ended == [(s.status, s.output) for s in (await rs.task(waited.id)).steps or ()]
    assert ended == [
        ("SUCCESS", {"done": action}) for action in [*TRIP, CHARGE, "send confirmation"]
    ]
    assert (await rs.task(queued.id)).status == "COMPLETED"


async def test_writes_that_wait_together_go_as_one_checkpoint(rs: Runstate) -> None:
    """Guards the batching: step 0's start is committed alone (flush), then five
    writes are queued while nothing lets the sender run; they go as one
    checkpointTask, one event, with RUNNING then SUCCESS of a step merged."""
    task = await trip(rs)
    async with rs.run(task.id, holder="runner", durability="async") as run:
        await run.begin(0)
        await run.flush()
        await run.succeed(0, "found")
        for index in (1, 2):
            await run.begin(index)
            await run.succeed(index, f"out-{index}")
    assert await step_log(rs, task.id) == [
        ("TASK_CREATED", None),
        ("LOCK_ACQUIRED", None),
        ("TASK_STATUS_CHANGED", None),
        ("STEP_STARTED", 0),
        ("CHECKPOINT", None),
        ("LOCK_RELEASED", None),
    ]
    steps = (await rs.task(task.id)).steps or ()
    assert [(s.status, s.output) for s in steps[:4]] == [
        ("SUCCESS", "found"),
        ("SUCCESS", "out-1"),
        ("SUCCESS", "out-2"),
        ("PENDING", None),
    ]


async def test_a_refused_background_write_is_raised_and_stops_the_queue(rs: Runstate) -> None:
    """Guards the queue's failure rule: step 0's success is refused in the background
    (an output over the 64 KiB limit), sent alone. The refusal reaches the agent by
    flush at the latest, and the writes queued after it are never sent: step 1
    stays PENDING. If they were sent, step 1 would be recorded while step 0's end
    never was."""
    task = await trip(rs)

    async def refused() -> None:
        async with rs.run(task.id, holder="runner", durability="async") as run:
            await run.begin(0)
            await run.flush()
            await run.succeed(0, "x" * 70_000)
            await asyncio.sleep(0)  # one turn of the loop: the sender takes it alone
            await run.begin(1)
            await run.succeed(1, "fine")
            await run.flush()

    with pytest.raises(InvalidInput):
        await refused()
    assert await statuses(rs, task.id) == ["RUNNING"] + ["PENDING"] * 4


async def test_killed_with_writes_queued_it_loses_only_idempotent_steps(
    served: tuple[Server, str], rs: Runstate, tmp_path: Path
) -> None:
    """Guards the barrier before a step that is not idempotent. The agent writes
    every step with durability="async"; the server is frozen (SIGSTOP) once the
    first two steps are committed. The agent goes on: its third step is done while
    its writes wait in the queue (the loss async durability accepts), but the charge
    does not begin while they are uncommitted: within a second of asking, nothing
    more happens. Killed there, it leaves the charge unperformed and PENDING, so the
    next agent repeats at most the idempotent third step (its write was in flight)
    and charges once. Without the barrier, the agent would print "began" and charge
    with its queue unsent."""
    server, token = served
    task = await trip(rs)
    effects = tmp_path / "effects.txt"
    agent = AgentProcess(
        server.url,
        token,
        task.id,
        str(effects),
        "--pause-after",
        TRIP[1],
        module="tests.agents.queued_agent",
    )
    assert server.process is not None
    try:
        agent.until(lambda line: line == {"event": "done", "action": TRIP[1]})
        await committed(rs, task.id, 2)
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            agent.send("\n")
            agent.until(lambda line: line == {"event": "done", "action": TRIP[2]})
            agent.until(lambda line: line == {"event": "beginning", "action": CHARGE})
            with pytest.raises(queue.Empty):  # the charge waits for the queue
                agent.lines.get(timeout=1.0)
            agent.kill()
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
    finally:
        agent.kill()
    assert effects.read_text().splitlines() == TRIP
    held = await statuses(rs, task.id)
    assert held[:2] == ["SUCCESS", "SUCCESS"]
    # The third step's write was in flight to the frozen server: it may land or not,
    # and land after this read, so the next agent may or may not repeat the step.
    assert held[2] in ("PENDING", "RUNNING", "SUCCESS")
    assert held[3:] == ["PENDING", "PENDING"]
    second = AgentProcess(
        server.url, token, task.id, str(effects), module="tests.agents.queued_agent"
    )
    try:
        assert second.rest(within=60)[-1] == {"event": "finished"}
    finally:
        second.kill()
    done = effects.read_text().splitlines()
    assert done[:3] == TRIP
    assert done[3:] in ([CHARGE, "send confirmation"], [TRIP[2], CHARGE, "send confirmation"])
    assert await statuses(rs, task.id) == ["SUCCESS"] * 5


async def committed(rs: Runstate, task_id: str, steps: int) -> None:
    """Wait (60 s at most) until the task's first ``steps`` steps are SUCCESS."""
    async with asyncio.timeout(60):
        while (await statuses(rs, task_id))[:steps] != ["SUCCESS"] * steps:  # noqa: ASYNC110 - a poll, with a deadline, of the server
            await asyncio.sleep(0.02)
