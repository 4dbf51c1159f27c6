"""Does a database of 1,000,000 tasks answer as fast as one of 10,000?

Two SQLite files, built side by side: one user's history of SMALL (then LARGE)
finished tasks (each 3 steps, 7 events, 6 step versions, 100 to a session,
cloned from one real task in SQL), and then, through the service layer, a live
session of LIVE planned tasks. The same calls then run against both, in
alternating rounds: reading a random old task, its events, its past state, the
newest pages of tasks, sessions, one session's tasks and the stalled ones, a
step write, and a claim (the oldest claimable task, behind a million finished
ones). Each figure is the median of every sample; the ratio of the two sizes is
the figure (target 1.2x or less). In process, so HTTP and GraphQL costs (the same
at any size) stay out of it. Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from runstate.services.actions import leases, sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.read import history, lookups
from runstate.services.write.house import House
from runstate.storage.database import open_database

SMALL = 10_000
LARGE = int(os.environ.get("BENCH_LARGE", "1000000"))
LIVE = 250
PER_SESSION = 100
ROUNDS = 3
SAMPLES = 40
USER = "bench"
RESULTS = Path(__file__).parent / "results" / "scale.json"
PLAN = [StepPlan(f"step-{i}", {"i": i}) for i in range(3)]


async def template(house: House) -> tuple[int, int]:
    """One finished task in its own session, the row every old task is cloned from:
    (session pk, task pk)."""
    session = await sessions.start_session(house, USER, default_ttl=10**7)
    task = (await tasks.create_task(house, USER, session.id, goal="old", steps=PLAN)).value
    version = task.version
    for index in range(len(PLAN)):
        version = (
            await tasks.start_step(house, USER, task.id, index, expected_version=version)
        ).value.version
        done = (
            await tasks.complete_step(
                house, USER, task.id, index, expected_version=version, output={"ok": index}
            )
        ).value
        version = done.version
    row = await lookups.get_task(USER, task.id)
    return int(row.session_pk), int(row.pk)


def clone(db: sqlite3.Connection, count: int, session_pk: int, task_pk: int) -> None:
    """``count`` copies of the template task (with its steps, events and versions) in
    ``count / PER_SESSION`` copies of its session, by INSERT ... SELECT."""

    def copy(table: str, where: str, numbers: str, overrides: dict[str, str]) -> None:
        columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")') if r[1] != "id"]
        if "id" in overrides:
            columns.insert(0, "id")
        chosen = ", ".join(overrides.get(c, f't."{c}"') for c in columns)
        names = ", ".join(f'"{c}"' for c in columns)
        db.execute(
            f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {numbers})"
            f' INSERT INTO "{table}" ({names}) SELECT {chosen} FROM n, "{table}" t WHERE {where}'
        )

    sessions_ = count // PER_SESSION
    base = session_pk + LIVE  # room for nothing else: ids only need to be unique
    copy(
        "sessions",
        f"t.id = {session_pk}",
        str(sessions_ - 1),
        {"id": f"{base} + n.i", "public_id": "'old-s-' || n.i"},
    )
    tasks_base = task_pk + 1
    copy(
        "tasks",
        f"t.id = {task_pk}",
        str(count - 1),
        {
            "id": f"{tasks_base} + n.i",
            "public_id": "'old-t-' || n.i",
            "session_id": f"{base} + n.i / {PER_SESSION}",
        },
    )
    for table in ("steps", "task_events", "step_versions"):
        copy(table, f"t.task_id = {task_pk}", str(count - 1), {"task_id": f"{tasks_base} + n.i"})
    db.commit()


async def build(house: House, path: Path, count: int) -> dict[str, Any]:
    """A database of ``count`` old tasks and LIVE planned ones; what the calls need."""
    url = f"sqlite://{path}"
    database = await open_database(url)
    session_pk, task_pk = await template(house)
    await database.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA synchronous=OFF")
        clone(db, count, session_pk, task_pk)
    database = await open_database(url)
    live = await sessions.start_session(house, USER, default_ttl=10**7)
    ids = [
        (await tasks.create_task(house, USER, live.id, goal="live", steps=PLAN)).value.id
        for _ in range(LIVE)
    ]
    await database.close()
    return {"url": url, "count": count, "session": live.id, "live": ids, "next": 0}


def mib(folder: Path, count: int) -> float:
    """The size of the database of ``count`` old tasks, its WAL included."""
    return sum(f.stat().st_size for f in folder.glob(f"scale-{count}.db*")) / 2**20


Call = Callable[[], Awaitable[Any]]


async def measure(house: House, db: dict[str, Any]) -> dict[str, list[float]]:
    """One round of every call against one database: seconds per sample."""
    database = await open_database(db["url"])
    old = [f"old-t-{random.randrange(db['count'] - 1)}" for _ in range(SAMPLES)]
    heads = [await lookups.get_task(USER, task_id) for task_id in old]

    async def write() -> None:  # start and complete the next live task's first step
        task_id = db["live"][LIVE // 2 + db["next"]]
        db["next"] += 1
        began = (await tasks.start_step(house, USER, task_id, 0, expected_version=1)).value
        await tasks.complete_step(house, USER, task_id, 0, expected_version=began.version)

    async def claim() -> None:  # released again, untimed, after each sample
        await leases.claim_task(house, USER, "bench-worker", 30)

    calls: dict[str, Callable[[int], Call]] = {
        "task by id": lambda i: lambda: lookups.get_task(USER, old[i]),
        "events, first 100": lambda i: lambda: history.events(heads[i], 0, 100),
        "taskAt(seq 4)": lambda i: lambda: lookups.get_task_at(USER, old[i], 4),
        "tasks, newest 50": lambda _: (
            lambda: lookups.list_tasks(USER, status=None, first=50, after=None)
        ),
        "sessions, newest 50": lambda _: (
            lambda: lookups.list_sessions(USER, status=None, first=50, after=None)
        ),
        "one session's tasks, 50": lambda _: (
            lambda: lookups.list_tasks(
                USER, session_id=db["session"], status=None, first=50, after=None
            )
        ),
        "stalled tasks, 50": lambda _: (
            lambda: lookups.list_tasks(USER, status=None, stalled_only=True, first=50, after=None)
        ),
        "startStep + completeStep": lambda _: write,
        "claimTask": lambda _: claim,
    }
    took: dict[str, list[float]] = {}
    for name, call in calls.items():
        for i in range(SAMPLES):
            began = time.perf_counter()
            await call(i)()
            took.setdefault(name, []).append(time.perf_counter() - began)
            if name == "claimTask":  # the oldest claimable: the first live task
                await leases.release_task_lock(house, USER, db["live"][0], "bench-worker")
    await database.close()
    return took


async def main() -> None:
    house = House()  # the services, with the default limits
    print(f"runstate at scale, SQLite, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        dbs = []
        for count in (SMALL, LARGE):
            began = time.perf_counter()
            dbs.append(await build(house, Path(tmp) / f"scale-{count}.db", count))
            print(
                f"built {count:,} old tasks + {LIVE} live in"
                f" {time.perf_counter() - began:.0f} s, {mib(Path(tmp), count):,.0f} MiB"
            )
        took: list[dict[str, list[float]]] = [{}, {}]
        for _ in range(ROUNDS):
            for side, db in enumerate(dbs):
                for name, samples in (await measure(house, db)).items():
                    took[side].setdefault(name, []).extend(samples)
    print(f"\n{'call':<26} {SMALL:>10,} {LARGE:>10,}  ratio  (target 1.2x or less)")
    results = {}
    for name in took[0]:
        small, large = (statistics.median(t[name]) * 1000 for t in took)
        verdict = "met" if large / small <= 1.2 else "NOT MET"
        print(f"{name:<26} {small:>7.2f} ms {large:>7.2f} ms  {large / small:.2f}x  {verdict}")
        results[name] = {"small_ms": small, "large_ms": large, "ratio": large / small}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"small": SMALL, "large": LARGE, "calls": results}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
