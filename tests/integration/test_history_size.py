"""Calls that pick among a user's tasks cost the same however many finished tasks
the user keeps (SQLite, in-process): claimTask, which looks for the oldest task
that needs a worker, and the page of stalled tasks, the newest first.

Cost is counted in SQLite virtual-machine steps (its progress handler), which do
not depend on this machine's speed: one call against a user with FEW finished
tasks, the same call against one with MANY."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tortoise import connections

from runstate.basics.enums import TaskStatus
from runstate.services.actions import leases, sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.read import lookups
from tests.integration.test_write_cost import _sqlite
from tests.support import opened

USER = "keeper"
FEW = 50
MANY = 2000
PER_TICK = 10
"""Virtual-machine steps per progress-handler call."""


async def steps_of(call: Callable[[], Awaitable[Any]]) -> int:
    """SQLite's virtual-machine steps (in ``PER_TICK``s) that ``call`` takes."""
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0  # go on

    await _sqlite().set_progress_handler(tick, PER_TICK)
    try:
        await call()
    finally:
        await _sqlite().set_progress_handler(None, PER_TICK)  # type: ignore[arg-type]
    return ticks[0]


def add_finished(path: Path, count: int, template: int, name: str) -> None:
    """``count`` copies of the finished task ``template``, named ``name-1`` and so on:
    the user's history."""
    with sqlite3.connect(path) as db:
        columns = [r[1] for r in db.execute('PRAGMA table_info("tasks")') if r[1] != "id"]
        chosen = ", ".join("? || n.i" if c == "public_id" else c for c in columns)
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            f" INSERT INTO tasks ({', '.join(columns)}) SELECT {chosen} FROM n, tasks t"
            " WHERE t.id = ?",
            (count, f"{name}-", template),
        )


async def costs(path: Path, finished: int) -> dict[str, int]:
    """Steps of a claim and of the stalled page for a user with ``finished`` finished
    tasks older than a claimable one, and as many newer than a stalled one."""
    async with opened(f"sqlite://{path}") as house:
        session = await sessions.start_session(house, USER, default_ttl=3600)
        done = (
            await tasks.create_task(house, USER, session.id, goal="done", steps=[StepPlan("a", {})])
        ).value
        for call in (tasks.start_step, tasks.complete_step):
            done = (await call(house, USER, done.id, 0, expected_version=done.version)).value
        assert done.status is TaskStatus.COMPLETED
        add_finished(path, finished, done.pk, "older")
        planned = (await tasks.create_task(house, USER, session.id, goal="planned", steps=[])).value
        stalled = (await tasks.create_task(house, USER, session.id, goal="stalled", steps=[])).value
        lease = (await leases.acquire_task_lock(house, USER, stalled.id, "gone", 60)).value
        head = await lookups.get_task(USER, stalled.id)
        await tasks.set_task_status(
            house,
            USER,
            stalled.id,
            TaskStatus.RUNNING,
            expected_version=head.version,
            fencing_token=lease.fencing_token,
        )
        await leases.release_task_lock(house, USER, stalled.id, "gone")
        add_finished(path, finished, done.pk, "newer")
        page = await lookups.list_tasks(USER, status=None, stalled_only=True, first=10, after=None)
        assert [t.id for t in page.items] == [stalled.id]
        found: dict[str, int] = {}

        async def claim() -> None:
            lock = (await leases.claim_task(house, USER, "worker", 30)).value
            assert lock.task_id == planned.id
            await leases.release_task_lock(house, USER, planned.id, "worker")

        found["claimTask"] = await steps_of(claim)
        found["stalled page"] = await steps_of(
            lambda: lookups.list_tasks(USER, status=None, stalled_only=True, first=10, after=None)
        )
        return found


async def test_picking_a_task_costs_the_same_behind_a_long_history(tmp_path: Path) -> None:
    """Guards the per-status lookups of ``leases._oldest_claimable`` and
    ``lookups._page_by_status``: with one ``status IN (...)`` lookup ordered by id,
    SQLite walks every task of the user, and 2,000 finished tasks cost about 40
    times what 50 do."""
    few = await costs(tmp_path / "few.db", FEW)
    many = await costs(tmp_path / "many.db", MANY)
    for call, steps in few.items():
        assert many[call] < 1.5 * steps, (call, few, many)


async def test_sqlite_keeps_64_mib_of_pages(tmp_path: Path) -> None:
    """Guards that Tortoise applies ``db.SQLITE_PRAGMAS`` from the URL: SQLite's own
    2 MiB page cache makes reads of old tasks slower as the history grows."""
    async with opened(f"sqlite://{tmp_path / 'cache.db'}"):
        _, rows = await connections.get("default").execute_query("PRAGMA cache_size")
        assert rows[0][0] == -65536
