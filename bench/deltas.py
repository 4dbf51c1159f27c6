"""How a task's size shows in what a write costs and what its history keeps.

In-process on SQLite, through the service layer: for tasks of 10, 300 and 1,000
steps whose steps each get a 1 KB output, the bytes of stored history per event
and the median time of a step write (start + complete); for the 1,000-step task,
that time near step 5 and near step 995, and their ratio (1.0x: the write does not
grow with the task); and the time to read its whole log and one past state. Run with
``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tortoise import connections

from runstate.services.actions import sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.read import history, lookups
from runstate.services.write.house import House
from runstate.storage.database import open_database

USER = "bench"
OUTPUT = "x" * 1024


async def history_bytes() -> int:
    """Bytes of the event log and step history, indexes included (SQLite dbstat)."""
    _, rows = await connections.get("default").execute_query(
        "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN (SELECT name FROM"
        " sqlite_master WHERE tbl_name IN ('task_events', 'step_versions'))"
    )
    return int(rows[0][0])


async def run_task(house: House, steps: int) -> tuple[str, list[float]]:
    """A task of ``steps`` steps, each started and completed with a 1 KB output; the
    seconds each start + complete pair took."""
    session = await sessions.start_session(house, USER, default_ttl=86400)
    plan = [StepPlan(f"step-{i}", {"i": i}) for i in range(steps)]
    task = (await tasks.create_task(house, USER, session.id, goal="bench", steps=plan)).value
    version, took = 1, []
    for index in range(steps):
        began = time.perf_counter()
        version = (
            await tasks.start_step(house, USER, task.id, index, expected_version=version)
        ).value.version
        view = (
            await tasks.complete_step(
                house, USER, task.id, index, expected_version=version, output=OUTPUT
            )
        ).value
        version = view.version
        took.append(time.perf_counter() - began)
    return task.id, took


async def main() -> None:
    house = House()  # the services, with the default limits
    with tempfile.TemporaryDirectory() as tmp:
        print(f"runstate history benchmark, SQLite, load average {os.getloadavg()[0]:.2f}")
        print(
            f"{'steps':>6} {'events':>7} {'history bytes':>14} {'bytes/event':>12}"
            f" {'start+complete p50':>19}"
        )
        p50: dict[int, float] = {}
        for steps in (10, 300, 1000):
            database = await open_database(f"sqlite://{Path(tmp) / f'bench-{steps}.db'}")
            task_id, took = await run_task(house, steps)
            events = 2 * steps + 1
            stored = await history_bytes()
            p50[steps] = statistics.median(took) * 1000
            print(
                f"{steps:>6} {events:>7} {stored:>14,} {stored / events:>12,.0f}"
                f" {p50[steps]:>16.2f} ms"
            )
            if steps == 1000:
                early = statistics.median(took[:20]) * 1000
                late = statistics.median(took[-20:]) * 1000
                print(
                    f"\nstart+complete p50 near step 5: {early:.2f} ms, near step 995:"
                    f" {late:.2f} ms, ratio {late / early:.2f}x (target 1.0x); p50 of a"
                    f" 1,000-step task against a 10-step one: {p50[1000] / p50[10]:.2f}x"
                    " (target 1.0x)"
                )
                head = await lookups.get_task(USER, task_id)
                began = time.perf_counter()
                log = []
                for page in range(10):  # a page holds at most 100 events
                    log += await history.events(head, 100 * page, 100)
                print(
                    f"events, 10 pages of 100: {len(log)} events in"
                    f" {(time.perf_counter() - began) * 1000:.1f} ms"
                )
                began = time.perf_counter()
                await lookups.get_task_at(USER, task_id, 1001)
                took_ms = (time.perf_counter() - began) * 1000
                print(f"taskAt(seq 1001) of 2001: {took_ms:.1f} ms")
            await database.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
