"""Migration 0016 on a database whose task logs have holes, written the old way.

``tests/fixtures/holes.sqlite3`` was written by the release before the fix (commit
f7b689f) through its API, as a user of it would: keyed writes that changed
nothing (a ``resumeTask`` of a task already resumed, a ``clearGraph`` of a thread
with no checkpoints) moved the task's version and seq with no event.

- ``t-end``: created, resumed (seq 2), resumed again under a key: seq 3 is a hole
  at the head of the log.
- ``t-mid``: created, resumed (seq 2), resumed twice more under two keys (holes
  at 3 and 4), then step 0 started (5) and completed (6), step 1 started (7).
- ``t-thread``: created, then ``clearGraph`` under a key: seq 2 is a hole.

Opened the way a server opens it (migrations applied), on SQLite and on
PostgreSQL (the same rows copied into a PostgreSQL database at migration 0015),
every seq from 1 to ``eventSeq`` has its event and ``taskAt`` answers each.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tortoise.backends.base.executor import EXECUTOR_CACHE

from runstate.basics.enums import TaskEventKind, TaskStatus
from runstate.models import Task, TaskEvent
from runstate.services.domain.errors import InvalidInputError
from runstate.services.read import history
from runstate.services.read.convert import task_views
from runstate.storage.clock import utcnow
from runstate.storage.database import open_database
from tests.integration.test_migration import copy_to_postgres, fixture_database

FIXTURE = Path(__file__).parent.parent / "fixtures" / "holes.sqlite3"
TABLES = (
    "user_usage",
    "sessions",
    "tasks",
    "steps",
    "step_versions",
    "tool_states",
    "task_events",
    "idempotency_keys",
)
HOLES = {"t-end": [3], "t-mid": [3, 4], "t-thread": [2]}


def _holes_in_fixture() -> dict[str, list[int]]:
    """Each task's missing seqs, read from the fixture as it is (before migrating)."""
    with sqlite3.connect(FIXTURE) as db:
        tasks = db.execute("SELECT id, public_id, event_seq FROM tasks").fetchall()
        found = {}
        for pk, task_id, event_seq in tasks:
            seqs = {s for (s,) in db.execute("SELECT seq FROM task_events WHERE task_id = ?", [pk])}
            found[task_id] = [s for s in range(1, event_seq + 1) if s not in seqs]
    return found


@pytest.fixture(params=["sqlite", "postgres"])
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of each backend: a copy of the fixture, or an empty PostgreSQL."""
    with fixture_database(request.param, FIXTURE, tmp_path) as url:
        yield url


@pytest.fixture
async def migrated(empty: str) -> AsyncIterator[str]:
    """The fixture's rows on each backend, opened as a server opens them (0016 runs)."""
    if empty.startswith("postgres"):
        await copy_to_postgres(empty, FIXTURE, TABLES, "runstate.0015_spend")
    EXECUTOR_CACHE.clear()
    database = await open_database(empty)
    try:
        yield empty
    finally:
        await database.close()


def test_the_fixture_has_the_holes_the_old_release_left() -> None:
    """The control: before migrating, the logs lack exactly these seqs."""
    assert _holes_in_fixture() == HOLES


async def test_every_seq_has_its_event_and_task_at_answers_it(migrated: str) -> None:
    """Guards migration 0016: after it, every task's log is 1..eventSeq with no gap,
    each filled event is a TASK_STATUS_CHANGED to the status the task already had,
    one version past the event before it, with the note saying why; taskAt of a
    filled seq is the task as at the seq before, with the filled version. (Without
    0016, taskAt of a hole answers InvalidInput and the log skips it.)"""
    for task_id, holes in HOLES.items():
        (head,) = await task_views([await Task.get(public_id=task_id)], utcnow())
        log = await history.events(head, 0, 1000)
        assert [e.seq for e in log] == list(range(1, head.event_seq + 1)), task_id
        for event in log:
            if event.seq not in holes:
                continue
            before = log[event.seq - 2]
            assert event.kind is TaskEventKind.TASK_STATUS_CHANGED
            assert (event.status, event.task_version) == (before.status, before.task_version + 1)
            assert event.steps == ()
            assert event.actor == "alice"
            assert event.note is not None
            assert event.note.startswith("Filled by runstate's migration 0016")
            filled = await history.task_at(head, event.seq)
            previous = await history.task_at(head, event.seq - 1)
            assert filled.version == event.task_version
            assert filled.steps == previous.steps
            assert filled.status == previous.status
        versions = [e.task_version for e in log]
        assert versions == sorted(versions), task_id
        assert versions[-1] == head.version


async def test_the_filled_rows_are_counted(migrated: str) -> None:
    """Guards the count: each filled event row adds 100 bytes to its task's stored
    bytes, as an event row written by a write does."""
    with sqlite3.connect(FIXTURE) as db:
        before = dict(db.execute("SELECT public_id, stored_bytes FROM tasks").fetchall())
    for task_id, holes in HOLES.items():
        task = await Task.get(public_id=task_id)
        assert task.stored_bytes == before[task_id] + 100 * len(holes)


async def test_task_at_of_a_missing_event_is_invalid_input(migrated: str) -> None:
    """Guards the answer for a hole that may still be served: InvalidInput on seq,
    not an unexpected error (an event row removed by hand makes one)."""
    task = await Task.get(public_id="t-mid")
    (head,) = await task_views([task], utcnow())
    await TaskEvent.filter(task_id=task.id, seq=5).delete()
    with pytest.raises(InvalidInputError, match="holds no event 5"):
        await history.task_at(head, 5)
    assert (await history.task_at(head, 6)).status is TaskStatus.RUNNING
