"""What a write costs follows its change, not the task's size: the statements of a
step write, and the bytes the history of a long task keeps (SQLite, in-process)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from tortoise import connections

from runstate.enums import StepStatus
from runstate.services import sessions, sql, tasks
from runstate.services.clock import utcnow
from runstate.services.house import House
from runstate.services.validation import StepPlan
from runstate.services.views import TaskView, Written
from runstate.services.write import engine
from runstate.services.write.engine import StepPatch
from tests.support import opened

USER = "counter"
STEPS = 1000
KB = 1024


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'cost.db'}") as house:
        yield house


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """The write path's clock, moving 1 ms per reading unless moved on by hand: so
    "less than a second since the session was touched" does not depend on how fast
    this machine is."""
    now = [utcnow()]

    def tick() -> datetime:
        now[0] += timedelta(milliseconds=1)
        return now[0]

    def advance(seconds: float) -> None:
        now[0] += timedelta(seconds=seconds)

    monkeypatch.setattr(engine, "utcnow", tick)
    return advance


def _sqlite() -> aiosqlite.Connection:
    """The aiosqlite connection inside Tortoise's SQLite client (a private attribute)."""
    connection: aiosqlite.Connection = connections.get("default")._connection
    return connection


class Statements:
    """Every SQL statement the database connection runs, BEGIN and COMMIT included,
    through SQLite's own trace hook on Tortoise's connection."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __aenter__(self) -> Statements:
        await _sqlite().set_trace_callback(self.seen.append)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await _sqlite().set_trace_callback(None)  # type: ignore[arg-type]  # None clears it

    def kinds(self) -> list[str]:
        return [" ".join(s.split()[:3]).replace('"', "") for s in self.seen]


async def long_task(house: House, steps: int = STEPS) -> str:
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}", {"i": i}) for i in range(steps)]
    task = (await tasks.create_task(house, USER, session.id, goal="long", steps=plan)).value
    return task.id


async def costs(
    house: House, task_id: str, first: int, version: int
) -> tuple[list[list[str]], int]:
    """The statements of a 10-patch checkpoint (steps first..first+9 to SUCCESS), then
    of startStep and completeStep of the step after them."""
    found = []
    patches = [StepPatch(i, StepStatus.SUCCESS) for i in range(first, first + 10)]
    calls: tuple[Callable[[int], Awaitable[Written[TaskView]]], ...] = (
        lambda v: tasks.checkpoint_task(house, USER, task_id, patches, expected_version=v),
        lambda v: tasks.start_step(house, USER, task_id, first + 10, expected_version=v),
        lambda v: tasks.complete_step(
            house, USER, task_id, first + 10, expected_version=v, output="x"
        ),
    )
    for call in calls:
        async with Statements() as statements:
            version = (await call(version)).value.version
        found.append(statements.kinds())
    return found, version


async def test_a_write_costs_the_same_at_step_5_and_at_step_995(
    house: House, clock: Callable[[float], None]
) -> None:
    """Guards the write path: no read of all steps, no re-read after the opening
    compare-and-swap, and a session touched at most once a second. A single-step
    write is 8 statements:

    - BEGIN and COMMIT;
    - UPDATE tasks ... RETURNING: the compare-and-swap (version, owner, lease), which
      also returns the task, its session's expiry, the step and the next unfinished;
    - UPDATE steps: the step's new state;
    - INSERT step_versions: the step as the event left it (history);
    - UPDATE tasks: its stored bytes, and status and currentStep when they moved;
    - INSERT task_events: the event;
    - UPDATE user_usage ... RETURNING: the user's byte count, within the quota.
    """
    task_id = await long_task(house)
    version = (await tasks.start_step(house, USER, task_id, 0, expected_version=1)).value.version
    early, version = await costs(house, task_id, 0, version)
    for first in range(11, 985, 100):
        patches = [StepPatch(i, StepStatus.SUCCESS) for i in range(first, min(first + 100, 985))]
        done = (
            await tasks.checkpoint_task(house, USER, task_id, patches, expected_version=version)
        ).value
        version = done.version
    late, version = await costs(house, task_id, 985, version)
    assert early == late
    checkpoint, start, complete = early
    single = [
        "BEGIN",
        "UPDATE tasks SET",
        "UPDATE steps SET",
        "INSERT INTO step_versions",
        "UPDATE tasks SET",
        "INSERT INTO task_events",
        "UPDATE user_usage SET",
        "COMMIT",
    ]
    assert start == single
    assert complete == single
    assert checkpoint.count("UPDATE steps SET") == 10
    assert len(checkpoint) == len(late[0])


async def test_the_opening_statement_reads_steps_by_index(house: House) -> None:
    """Guards the indexes the write path relies on: SQLite's plan for the opening
    UPDATE ... RETURNING of a step write searches every table by an index, never
    scans one (a scan would grow with the task, or with all tasks)."""
    task_id = await long_task(house, 50)
    async with Statements() as statements:
        await tasks.start_step(house, USER, task_id, 0, expected_version=1)
    (opening,) = [s for s in statements.seen if s.startswith('UPDATE "tasks"') and "RETURNING" in s]
    client = connections.get("default")
    _, plan = await client.execute_query(f"EXPLAIN QUERY PLAN {opening}")
    details = [str(row[-1]) for row in plan]
    assert not [d for d in details if d.startswith("SCAN")], details
    assert any(d.startswith("SEARCH n USING INDEX") for d in details), details


async def test_the_opening_statement_is_one_text_at_every_step(
    house: House, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the step index bound as a parameter: the opening UPDATE of a write to
    step 3 and of one to step 40 are one statement text, so the statement caches
    (SQLite's, asyncpg's, ``sql.in_dialect``'s) hold one entry for every position.
    With the index written into the text, as before, the two texts differ."""
    texts: list[str] = []
    fetch = sql.fetch

    async def recorded(conn: Any, text: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        texts.append(text)
        return await fetch(conn, text, params)

    task_id = await long_task(house, 50)
    monkeypatch.setattr(sql, "fetch", recorded)
    version = (await tasks.start_step(house, USER, task_id, 3, expected_version=1)).value.version
    await tasks.start_step(house, USER, task_id, 40, expected_version=version)
    opening = [t for t in texts if t.startswith('UPDATE "tasks"')]
    assert len(opening) == 2
    assert opening[0] == opening[1]


async def test_a_write_a_second_after_the_last_touches_the_session(
    house: House, clock: Callable[[float], None]
) -> None:
    """Guards the session's activity: the write after a second of quiet moves
    ``lastActiveAt`` (one statement more); the next, a moment later, does not."""
    task_id = await long_task(house, 3)
    version = (await tasks.start_step(house, USER, task_id, 0, expected_version=1)).value.version
    clock(1.5)
    async with Statements() as quiet:
        version = (
            (await tasks.complete_step(house, USER, task_id, 0, expected_version=version)).value
        ).version
    async with Statements() as busy:
        await tasks.start_step(house, USER, task_id, 1, expected_version=version)
    assert quiet.kinds().count("UPDATE sessions SET") == 1
    assert busy.kinds().count("UPDATE sessions SET") == 0


async def test_the_history_of_a_long_task_costs_what_it_changed(house: House) -> None:
    """Guards deltas in storage: a 1,000-step task whose steps each get a 1 KB output
    keeps events and step history within 3x the bytes of those outputs (with the
    task in every event, as release 1 stored it, it was over 100x)."""
    task_id = await long_task(house)
    version = 1
    output = "x" * KB
    for index in range(STEPS):
        version = (
            (await tasks.start_step(house, USER, task_id, index, expected_version=version)).value
        ).version
        view = (
            await tasks.complete_step(
                house, USER, task_id, index, expected_version=version, output=output
            )
        ).value
        version = view.version
    assert view.event_seq == 2 * STEPS + 1
    client = connections.get("default")
    _, rows = await client.execute_query(
        "SELECT SUM(pgsize) FROM dbstat WHERE name IN"
        " (SELECT name FROM sqlite_master WHERE tbl_name IN ('task_events', 'step_versions'))"
    )
    stored = rows[0][0]
    assert stored < 3 * STEPS * KB, f"{stored} bytes of history for {STEPS * KB} of outputs"
