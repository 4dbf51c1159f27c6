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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tortoise.backends.base.executor import EXECUTOR_CACHE

from runstate.db import close_database, open_database
from runstate.models import Task
from runstate.services import history
from runstate.services.clock import utcnow
from runstate.services.loading import task_views
from runstate.services.views import TaskView, current_step, from_json
from tests.integration.test_history import check_history

FIXTURE = Path(__file__).parent.parent / "fixtures" / "v1.sqlite3"


def v1_snapshots(path: Path) -> dict[str, dict[int, TaskView]]:
    """Every task's v1 snapshots by seq, as views, read before migrating."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT seq, snapshot FROM task_events ORDER BY task_id, seq").fetchall()
    found: dict[str, dict[int, TaskView]] = {}
    for seq, text in rows:
        data: dict[str, Any] = json.loads(text)
        task_id = data["id"]
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


@pytest.fixture
async def migrated(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "v1.sqlite3"
    shutil.copy(FIXTURE, path)
    EXECUTOR_CACHE.clear()  # see tests/integration/test_history.py
    await open_database(f"sqlite://{path}")
    try:
        yield path
    finally:
        await close_database()


async def test_release_1_events_become_deltas_with_their_whole_history(
    migrated: Path,
) -> None:
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


def test_the_snapshot_column_is_gone(migrated: Path) -> None:
    with sqlite3.connect(migrated) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(task_events)")]
    assert "snapshot" not in columns
    assert {"status", "delta"} <= set(columns)
