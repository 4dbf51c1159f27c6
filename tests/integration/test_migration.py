"""Migration 0003 on a database written by release 1 (tests/fixtures/v1.sqlite3).

The fixture was made with release 1's code (commit 7a6c46c) through its services:
a trip task with a lease, tool calls (a failure and a success), steps started,
completed, skipped by a decision, added, checkpointed, failed and reset, and a
second task moved through RUNNING, WAITING_TOOL and CANCELLED. Release 1 kept the
whole task in every event row (``snapshot``): those snapshots are the truth that
the converted history must reproduce.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from tortoise.backends.base.executor import EXECUTOR_CACHE
from tortoise.context import TortoiseContext
from tortoise.migrations.api.migrate import migrate

from runstate.models import Task, TaskEvent
from runstate.services.domain.views import TaskView, current_step, from_json
from runstate.services.read import history
from runstate.services.read.convert import task_views
from runstate.storage.clock import utcnow
from runstate.storage.database import open_database, tortoise_config
from tests.integration.test_history import check_history
from tests.support import postgres_database

FIXTURE = Path(__file__).parent.parent / "fixtures" / "v1.sqlite3"


def v1_snapshots(path: Path) -> dict[str, dict[int, TaskView]]:
    """Every task's v1 snapshots by seq, as views, read before migrating. Release 1
    had no ``stalled``: a task is stalled after a seq when it is RUNNING or
    WAITING_TOOL, was leased by then, and no lease is live."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT seq, kind, snapshot FROM task_events ORDER BY task_id, seq"
        ).fetchall()
    found: dict[str, dict[int, TaskView]] = {}
    leased: set[str] = set()
    for seq, kind, text in rows:
        data: dict[str, Any] = json.loads(text)
        task_id = data["id"]
        if kind == "LOCK_ACQUIRED":
            leased.add(task_id)
        working = data["status"] in ("RUNNING", "WAITING_TOOL")
        data["stalled"] = working and data["lock"] is None and task_id in leased
        statuses = [s["status"] for s in data["steps"]]
        data["tool_states"] = [{**t, "task_id": task_id} for t in data["tool_states"]]
        if data["lock"] is not None:
            data["lock"] = {**data["lock"], "task_id": task_id}
        view = from_json(
            TaskView,
            {**data, "current_step": current_step(statuses), "total_steps": len(statuses)},
        )
        found.setdefault(task_id, {})[seq] = view
    return found


async def copy_to_postgres(
    url: str,
    fixture: Path = FIXTURE,
    tables: Sequence[str] = ("sessions", "tasks", "steps", "tool_states", "task_events"),
    target: str = "runstate.0002_installation",
) -> None:
    """A SQLite fixture's rows in a PostgreSQL database migrated to ``target``, the
    schema the fixture's release wrote (release 1's, 0002, by default): the same
    data, as that release would have written it there."""
    EXECUTOR_CACHE.clear()
    async with TortoiseContext():  # closed on leaving, as the test's own
        await migrate(config=tortoise_config(url), target=target)
    conn = await asyncpg.connect(url.replace("postgres://", "postgresql://", 1))
    try:
        with sqlite3.connect(fixture) as db:
            for table in tables:
                kinds = dict(
                    await conn.fetch(
                        "SELECT column_name, data_type FROM information_schema.columns"
                        " WHERE table_name = $1",
                        table,
                    )
                )
                cursor = db.execute(f"SELECT * FROM {table}")
                names = [c[0] for c in cursor.description]
                marks = ", ".join(f"${i}" for i in range(1, len(names) + 1))
                columns = ", ".join(f'"{n}"' for n in names)
                for row in cursor.fetchall():
                    values = [_pg(kinds[n], v) for n, v in zip(names, row, strict=True)]
                    await conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", *values)
                if "id" in names:
                    await conn.execute(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), MAX(id))"
                        f" FROM {table}"
                    )
    finally:
        await conn.close()


def _pg(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind.startswith("timestamp"):
        return datetime.fromisoformat(value)
    if kind == "boolean":
        return bool(value)
    return value


@contextmanager
def fixture_database(kind: str, fixture: Path, tmp_path: Path) -> Iterator[str]:
    """A database of ``kind`` for a SQLite ``fixture``: a copy of the file, or an
    empty PostgreSQL database (``copy_to_postgres`` fills it)."""
    if kind == "sqlite":
        path = tmp_path / fixture.name
        shutil.copy(fixture, path)
        yield f"sqlite://{path}"
    else:
        with postgres_database() as url:
            yield url


@pytest.fixture(params=["sqlite", "postgres"])
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of each backend: the SQLite fixture itself, or an empty PostgreSQL."""
    with fixture_database(request.param, FIXTURE, tmp_path) as url:
        yield url


@pytest.fixture
async def migrated(empty: str) -> AsyncIterator[str]:
    """The release-1 data on each backend, then opened the way a server opens it
    (which applies migration 0003)."""
    if empty.startswith("postgres"):
        await copy_to_postgres(empty)
    EXECUTOR_CACHE.clear()  # see tests/integration/test_history.py
    database = await open_database(empty)
    try:
        yield empty
    finally:
        await database.close()


async def test_release_1_events_become_deltas_with_their_whole_history(migrated: str) -> None:
    """Guards migration 0003: for every task and every seq of a release-1 database,
    taskAt equals the v1 snapshot at that seq, and the converted events replayed
    from seq 1 give every snapshot too. Nothing of the history is lost."""
    truth = v1_snapshots(FIXTURE)
    assert sorted(truth) == ["other", "trip"]
    assert len(truth["trip"]) == 16
    for task_id, snapshots in truth.items():
        (head,) = await task_views([await Task.get(public_id=task_id)], utcnow())
        assert head.event_seq == max(snapshots)
        for seq, snapshot in snapshots.items():
            assert await history.task_at(head, seq) == snapshot, f"{task_id} at seq {seq}"
        check_history(snapshots, await history.events(head, 1, 1000))


async def test_the_snapshot_column_is_gone(migrated: str) -> None:
    row = (await TaskEvent.all().limit(1).values())[0]
    assert "snapshot" not in row
    assert {"status", "delta"} <= set(row)
