"""What the session ledger costs, beside what it replaces, in this one run.

1. **Statements.** ``createTask`` of a one-step task against ``submitInput`` of
   the same task into an idle session (admitted ACTIVE) and into a busy one
   (QUEUED), through the services on SQLite, each statement counted by SQLite's
   own trace hook.
2. **Server CPU.** ``runstate serve`` on SQLite: ``WRITES`` createTask calls, then
   ``WRITES`` submitInput (ENQUEUE) calls into one session, over HTTP from this
   process; the server's CPU per call (``/proc``) and the ratio.
3. **Schedules.** ``SCHEDULES`` schedules (``BENCH_SCHEDULES``, default 10,000) in
   100 sessions, each due once within one minute (a six-field expression naming
   its second), fired by two ``runstate serve`` processes on one database
   (SQLite file, then PostgreSQL): every due time fired exactly once (counted in
   the database), and the lag from due time to committed submission, p50 and p99.
   The schedules are made first, over HTTP; their first due time leaves room for
   that, measured on ``WARM`` schedules made before.

Run with ``make bench``; never part of ``make test``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg  # type: ignore[import-untyped]
from tortoise import connections

from bench.fanout import Graph, cpu_seconds, serving
from runstate.basics.enums import AdmissionPolicy
from runstate.services.actions import sessions, submissions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.write.house import House
from runstate.storage.database import open_database

USER = "bench"
WRITES = int(os.environ.get("BENCH_WRITES", "400"))
SCHEDULES = int(os.environ.get("BENCH_SCHEDULES", "10000"))
SESSIONS = 100
WARM = 100
"""Schedules made first, due next year, to measure how long making them takes."""
PLAN_INPUT = [{"action": "answer"}]
SPREAD = 60
"""Seconds the due times are spread over."""
PLAN = [StepPlan("answer", None, True)]
POSTGRES = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")


async def counted(work: Callable[[], Awaitable[Any]]) -> int:
    """The statements ``work`` ran on Tortoise's SQLite connection."""
    raw = connections.get("default")._connection  # aiosqlite.Connection
    assert isinstance(raw, aiosqlite.Connection)
    seen: list[str] = []
    await raw.set_trace_callback(seen.append)
    try:
        await work()
    finally:
        await raw.set_trace_callback(None)  # type: ignore[arg-type]  # None clears it
    return len(seen)


async def statements() -> dict[str, int]:
    house = House()
    with tempfile.TemporaryDirectory() as tmp:
        database = await open_database(f"sqlite://{Path(tmp) / 'ledger.db'}")
        try:
            session = (await sessions.start_session(house, USER, default_ttl=3600)).id

            async def create() -> None:
                await tasks.create_task(house, USER, session, goal="g", steps=PLAN)

            async def submit() -> None:
                await submissions.submit_input(
                    house, USER, session, goal="g", steps=PLAN, policy=AdmissionPolicy.ENQUEUE
                )

            await create()  # the user's first write opens its usage row
            found = {"createTask": await counted(create)}
            found["submitInput, idle session"] = await counted(submit)
            found["submitInput, busy session"] = await counted(submit)
        finally:
            await database.close()
    return found


async def per_call(url: str, token: str, pid: int) -> dict[str, float]:
    api = Graph(url, token)
    started = await api("mutation { startSession(input: {}) { ... on AgentSession { id } } }")
    session = started["startSession"]["id"]
    plan = [{"action": "answer"}]
    create = (
        "mutation($i: CreateTaskInput!) { createTask(input: $i) { ... on Task { id } } }",
        {"sessionId": session, "goal": "g", "steps": plan},
    )
    submit = (
        "mutation($i: SubmitInput!) { submitInput(input: $i) { ... on Submission { id } } }",
        {"sessionId": session, "goal": "g", "steps": plan, "policy": "ENQUEUE"},
    )
    found = {}
    for name, (query, input) in {"createTask": create, "submitInput": submit}.items():
        await api(query, i=input)  # warm
        before = cpu_seconds(pid)
        for _ in range(WRITES):
            await api(query, i=input)
        found[name] = (cpu_seconds(pid) - before) / WRITES * 1000
    await api.http.aclose()
    return found


def schedules(kind: str) -> dict[str, float]:
    """Fire ``SCHEDULES`` schedules due within a minute on two processes."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite://{Path(tmp) / 'ledger.db'}" if kind == "sqlite" else _fresh_postgres()
        where = url.removeprefix("sqlite://") if kind == "sqlite" else url
        with serving(2, url, RUNSTATE_MAX_SCHEDULES=str(SCHEDULES + WARM)) as (urls, token, _):
            first = asyncio.run(_create(urls[0], token))
            last = first + timedelta(seconds=SPREAD)
            deadline = time.monotonic() + (first - datetime.now(UTC)).total_seconds() + SPREAD + 120
            while time.monotonic() < deadline:
                if len(_rows(kind, where)) >= SCHEDULES and datetime.now(UTC) > last:
                    break
                time.sleep(1)
            return _lags(kind, where)


async def _create(url: str, token: str) -> datetime:
    """The schedules, in ``SESSIONS`` sessions, each due once in the minute after
    a lead long enough to create them all (measured on ``WARM`` schedules due next
    year, first): the first due time."""
    api = Graph(url, token)
    ids = []
    for _ in range(SESSIONS):
        started = await api("mutation { startSession(input: {}) { ... on AgentSession { id } } }")
        ids.append(started["startSession"]["id"])
    query = "mutation($i: CreateScheduleInput!) { createSchedule(input: $i) { __typename } }"
    gate = asyncio.Semaphore(16)

    async def one(n: int, at: datetime) -> None:
        cron = f"{at.second} {at.minute} {at.hour} {at.day} {at.month} *"
        input = {"sessionId": ids[n % SESSIONS], "cron": cron, "goal": "g", "steps": PLAN_INPUT}
        async with gate:
            made = await api(query, i=input)
        assert made["createSchedule"]["__typename"] == "Schedule", made

    next_year = datetime.now(UTC) + timedelta(days=200)
    began = time.monotonic()
    await asyncio.gather(*(one(n, next_year) for n in range(WARM)))
    rate = WARM / (time.monotonic() - began)
    lead = SCHEDULES / rate * 1.5 + 30
    first = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0)
    spread = [first + timedelta(seconds=n * SPREAD / SCHEDULES) for n in range(SCHEDULES)]
    await asyncio.gather(*(one(n, at) for n, at in enumerate(spread)))
    assert datetime.now(UTC) < first, "creating the schedules took past the first due time"
    print(f"  created {SCHEDULES} schedules at {rate:.0f} a second; the first due {lead:.0f} s on")
    await api.http.aclose()
    return first


def _fresh_postgres() -> str:
    name = f"bench_ledger_{os.getpid()}"

    async def make() -> None:
        conn = await asyncpg.connect(POSTGRES.replace("postgres://", "postgresql://", 1))
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
        await conn.close()

    asyncio.run(make())
    return POSTGRES.rpartition("/")[0] + f"/{name}"


FIRES = (
    "SELECT schedule_id, scheduled_for, created_at FROM submissions WHERE schedule_id IS NOT NULL"
)


def _rows(kind: str, path: str) -> list[tuple[Any, Any, Any]]:
    if kind == "sqlite":
        with sqlite3.connect(path) as db:
            return list(db.execute(FIRES))

    async def read() -> list[tuple[Any, Any, Any]]:
        conn = await asyncpg.connect(path.replace("postgres://", "postgresql://", 1))
        rows = await conn.fetch(FIRES)
        await conn.close()
        return [(r[0], r[1], r[2]) for r in rows]

    return asyncio.run(read())


def _lags(kind: str, path: str) -> dict[str, float]:
    rows = _rows(kind, path)
    lags = sorted((_time(r[2]) - _time(r[1])).total_seconds() for r in rows)
    return {
        "fired": float(len(rows)),
        "distinct": float(len({(r[0], _time(r[1])) for r in rows})),
        "p50": statistics.median(lags) * 1000,
        "p99": lags[int(len(lags) * 0.99) - 1] * 1000,
    }


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


def main() -> None:
    print(f"runstate ledger benchmark, load average {os.getloadavg()[0]:.2f}")
    found = asyncio.run(statements())
    base = found["createTask"]
    for name, count in found.items():
        print(f"  statements, {name:<28} {count:>4}  ({count / base:.2f}x createTask)")
    with serving(1, None, RUNSTATE_RATE_LIMIT="false") as (urls, token, pids):
        cpu = asyncio.run(per_call(urls[0], token, pids[0]))
    print(
        f"  server CPU per call over HTTP ({WRITES} each): createTask {cpu['createTask']:.2f} ms,"
        f" submitInput (ENQUEUE) {cpu['submitInput']:.2f} ms"
        f" ({cpu['submitInput'] / cpu['createTask']:.2f}x)"
    )
    for kind in ("sqlite", "postgres"):
        figures = schedules(kind)
        print(
            f"  {SCHEDULES} schedules due within {SPREAD} s, two processes, {kind}:"
            f" {figures['fired']:.0f} fires for {figures['distinct']:.0f} due times"
            f" (each once: {figures['fired'] == figures['distinct'] == SCHEDULES}),"
            f" lag p50 {figures['p50']:.0f} ms, p99 {figures['p99']:.0f} ms"
        )


if __name__ == "__main__":
    main()
