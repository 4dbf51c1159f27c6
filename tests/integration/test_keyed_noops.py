"""Keyed writes that change nothing write nothing, on SQLite and PostgreSQL.

A write that finds nothing to change (``Unchanged``) moved the task's version and
seq in its opening statement; alone, its transaction rolls that back. Under an
idempotency key it runs inside the key's transaction, which commits the key's
row: the opening statement used to commit with it, leaving a seq with no event
(a hole ``taskAt`` failed on). Each keyed no-op here must answer as its unkeyed
twin does, leave version and seq where they were, keep the log gap-free, and
answer its retry alike. Then a keyed retry's lease: the one its first call showed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runstate.basics.enums import GraphPruneStrategy
from runstate.models import Task
from runstate.services.actions import leases, recovery, sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.domain.views import ResumePlanView, TaskView, Written
from runstate.services.read import history
from runstate.services.read.lookups import get_task
from runstate.services.threads import checkpoints
from runstate.services.write import idempotency
from runstate.services.write.house import House
from tests.integration.test_graphs import blob, pending
from tests.support import database, opened

USER = "keyed"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def house(url: str) -> AsyncIterator[House]:
    async with opened(url) as house:
        await sessions.start_session(house, USER, default_ttl=3600, session_id="s")
        yield house


async def keyed(
    house: House,
    key: str,
    write: Callable[[], Awaitable[Written[Any]]],
    kind: Any = TaskView,
    operation: str = "op",
) -> Any:
    """``write`` sent under ``key``, as the resolvers send a keyed mutation."""
    call = idempotency.keyed(USER, key, operation, {"key": key})
    return await idempotency.once(house, call, 3600, kind, write)


def shown(answer: Any) -> Any:
    """An answer as a client is shown it, whose steps and tool states the transport
    loads when selected (a write's answer leaves them unloaded, a replay's
    ``taskAt`` loads them): the same task either way."""
    if isinstance(answer, ResumePlanView):
        return replace(answer, task=shown(answer.task))
    return replace(answer, steps=None, tool_states=None)


async def gap_free(task_id: str) -> TaskView:
    """The task, after checking that its log is 1..eventSeq and taskAt answers every
    seq with that seq and the event's version."""
    head = await get_task(USER, task_id)
    log = await history.events(head, 0, 10_000)
    assert [e.seq for e in log] == list(range(1, head.event_seq + 1))
    for event in log:
        past = await history.task_at(head, event.seq)
        assert (past.event_seq, past.version) == (event.seq, event.task_version)
    return head


async def test_a_keyed_resume_that_changes_nothing_writes_nothing(house: House) -> None:
    """Guards the savepoint around a keyed no-op (``group_commit``): the issue's
    example. Resumed once (seq 2), then twice under keys: version and seq stay 2,
    the retry answers what the first keyed call did, taskAt answers every seq.
    Seen failing without it: version and seq 3 and 4, and taskAt(3) failing."""
    await tasks.create_task(house, USER, "s", goal="g", steps=[StepPlan("a")], task_id="t")
    await recovery.resume_task(house, USER, "t")
    plain = await recovery.resume_task(house, USER, "t")

    def resume() -> Awaitable[Written[ResumePlanView]]:
        return recovery.resume_task(house, USER, "t")

    first = await keyed(house, "r-1", resume, ResumePlanView)
    again = await keyed(house, "r-2", resume, ResumePlanView)
    assert (first.task.version, first.task.event_seq) == (2, 2)
    assert replace(first, task=replace(first.task, updated_at=plain.value.task.updated_at)) == (
        plain.value
    ), "answered as its unkeyed twin"
    assert again == first
    assert shown(await keyed(house, "r-1", resume, ResumePlanView)) == first
    assert (await gap_free("t")).version == 2


async def test_keyed_thread_writes_that_change_nothing_write_nothing(house: House) -> None:
    """Guards the same for the LangGraph thread writes whose no-op raises
    ``Unchanged``: clearGraph of a thread without checkpoints, pruneGraph
    KEEP_LATEST with one checkpoint, putGraphCheckpoint of a stored checkpoint,
    putGraphWrites of stored writes, copyGraph of an empty thread onto an existing
    task. Each under a key leaves version and seq as they were, and its retry
    answers alike; the log stays gap-free. Seen failing without the savepoint:
    one hole per call."""
    for task_id in ("t", "empty", "target"):
        await tasks.create_task(house, USER, "s", goal="thread", steps=[], task_id=task_id)

    def put() -> Awaitable[Written[TaskView]]:
        return checkpoints.put_checkpoint(
            house,
            USER,
            "t",
            namespace="",
            checkpoint_id="c1",
            parent_id=None,
            checkpoint=blob("c1"),
            metadata={},
            channel_versions={"a": "1"},
            channels=[checkpoints.ChannelValue("a", "1", blob("1"))],
        )

    def writes() -> Awaitable[Written[TaskView]]:
        return checkpoints.put_writes(
            house, USER, "t", namespace="", checkpoint_id="c1", writes=[pending("n", 0, "x")]
        )

    await put()
    await writes()
    noops: dict[str, tuple[str, Callable[[], Awaitable[Written[TaskView]]]]] = {
        "clearGraph": ("empty", lambda: checkpoints.clear(house, USER, "empty")),
        "pruneGraph": (
            "t",
            lambda: checkpoints.prune(house, USER, "t", GraphPruneStrategy.KEEP_LATEST),
        ),
        "putGraphCheckpoint": ("t", put),
        "putGraphWrites": ("t", writes),
        "copyGraph": ("target", lambda: checkpoints.copy(house, USER, "empty", "target")),
    }
    for name, (task_id, write) in noops.items():
        before = await get_task(USER, task_id)
        first = await keyed(house, f"{name}-1", write, operation=name)
        assert (first.version, first.event_seq) == (before.version, before.event_seq), name
        assert shown(await keyed(house, f"{name}-1", write, operation=name)) == first, name
        await gap_free(task_id)


async def test_keyed_noops_batched_with_other_writes_leave_no_hole(house: House) -> None:
    """Guards the no-op inside SQLite's group commit, where keyed writes share one
    transaction, each in a savepoint: twenty keyed resumes that change nothing sent
    at once beside twenty keyed starts and completions of other tasks' steps. Every
    log stays gap-free and the resumed task keeps its version. (On PostgreSQL the
    same calls run side by side.)"""
    await tasks.create_task(house, USER, "s", goal="g", steps=[StepPlan("a")], task_id="still")
    await recovery.resume_task(house, USER, "still")
    for i in range(20):
        await tasks.create_task(house, USER, "s", goal="g", steps=[StepPlan("a")], task_id=f"w{i}")

    async def work(i: int) -> None:
        await keyed(
            house,
            f"start-{i}",
            lambda: tasks.start_step(house, USER, f"w{i}", 0, expected_version=1),
        )
        await keyed(
            house,
            f"done-{i}",
            lambda: tasks.complete_step(house, USER, f"w{i}", 0, expected_version=2, output=i),
        )

    def resume() -> Awaitable[Written[ResumePlanView]]:
        return recovery.resume_task(house, USER, "still")

    resumes = [keyed(house, f"resume-{i}", resume, ResumePlanView) for i in range(20)]
    await asyncio.gather(*resumes, *(work(i) for i in range(20)))
    assert (await gap_free("still")).version == 2
    for i in range(20):
        assert (await gap_free(f"w{i}")).version == 3


async def test_a_keyed_retry_answers_the_lease_its_first_call_showed(house: House) -> None:
    """Guards the lease kept with a key's answer: a lease granted for 60 s and renewed
    to an hour (a renewal writes no event), then a keyed startStep with its token:
    the retry answers the lease as the first call showed it (an hour), not as
    taskAt knows it (60 s, from the grant). Seen failing without the lease kept:
    the retry's lease expired 59 minutes earlier."""
    await tasks.create_task(house, USER, "s", goal="g", steps=[StepPlan("a")], task_id="t")
    granted = await leases.acquire_task_lock(house, USER, "t", "worker", 60)
    renewed = await leases.renew_task_lock(house, USER, "t", "worker", 3600)
    token = granted.value.fencing_token

    def start() -> Awaitable[Written[TaskView]]:
        return tasks.start_step(house, USER, "t", 0, expected_version=1, fencing_token=token)

    first = await keyed(house, "start", start)
    assert first.lock == renewed.value
    assert first.lock.expires_at - granted.value.expires_at >= timedelta(seconds=3000)
    retry = await keyed(house, "start", start)
    assert shown(retry) == first
    row = await Task.get(public_id="t")
    assert (row.version, row.event_seq) == (2, 3)
