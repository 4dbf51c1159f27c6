"""The sweep at scale: indexed, batched, never in writers' way, and never deleting a
session whose agent still holds a lease."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from tortoise import connections

from runstate.services.actions import leases, sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.lifecycle import sweep
from runstate.services.write.house import House
from runstate.storage.clock import utcnow
from tests.integration.test_api import create_task, start_session, step
from tests.integration.test_write_cost import Statements
from tests.support import Api, Server, create_token, opened, query_value, wait_until

USER = "sweeper"


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    url = f"sqlite://{tmp_path / 'sweep.db'}"
    async with opened(url) as house:
        yield house


async def plans(statements: list[str]) -> list[str]:
    """SQLite's plan of each statement on sessions, one line per step."""
    client = connections.get("default")
    found = []
    for statement in statements:
        if "sessions" in statement and not statement.startswith(("BEGIN", "COMMIT")):
            _, plan = await client.execute_query(f"EXPLAIN QUERY PLAN {statement}")
            found += [str(row[-1]) for row in plan]
    return found


async def test_every_statement_of_the_sweep_uses_an_index(
    house: House, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the indexed sweep: no statement it runs scans the sessions table (the
    sweep once ran ``SCAN sessions``, a cost that grows with every session kept)."""
    for _ in range(3):
        await sessions.start_session(house, USER, default_ttl=1)
    later = utcnow() + timedelta(seconds=30)
    monkeypatch.setattr(sweep, "utcnow", lambda: later)
    async with Statements() as statements:
        result = await sweep.sweep(retention_seconds=1)
    assert (result.expired, result.deleted) == (3, 3)
    steps = await plans(statements.seen)
    assert steps
    assert [s for s in steps if s.startswith("SCAN")] == []


async def test_the_index_check_can_fail(house: House) -> None:
    """Control: the unbatched statement the sweep used before scans the table."""
    steps = await plans(
        [
            "UPDATE sessions SET status = 'EXPIRED'"
            " WHERE expires_at <= '2026' AND status <> 'EXPIRED'"
        ]
    )
    assert any(s.startswith("SCAN sessions") for s in steps)


async def test_a_session_whose_task_holds_a_live_lease_is_kept(
    house: House, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the lease check: an expired session past its retention stays while a
    task of its holds a live lease, and goes once the lease has lapsed."""
    session = await sessions.start_session(house, USER, default_ttl=1)
    task = (await tasks.create_task(house, USER, session.id, goal="g", steps=[StepPlan("a")])).value
    await leases.acquire_task_lock(house, USER, task.id, "worker-1", 60)
    await sessions.start_session(house, USER, default_ttl=1)  # expires too, with no lease
    now = utcnow()
    monkeypatch.setattr(sweep, "utcnow", lambda: now + timedelta(seconds=30))
    first = await sweep.sweep(retention_seconds=1)
    assert (first.expired, first.deleted) == (2, 1)
    monkeypatch.setattr(sweep, "utcnow", lambda: now + timedelta(seconds=120))
    second = await sweep.sweep(retention_seconds=1)
    assert (second.expired, second.deleted) == (0, 1)


async def test_the_sweep_goes_in_batches(house: House, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards batching: 7 sessions with a batch of 3 take three statements each way,
    and every session is marked and deleted once."""
    for _ in range(7):
        await sessions.start_session(house, USER, default_ttl=1)
    later = utcnow() + timedelta(seconds=30)
    monkeypatch.setattr(sweep, "utcnow", lambda: later)
    async with Statements() as statements:
        result = await sweep.sweep(retention_seconds=1, batch=3)
    assert (result.expired, result.deleted) == (7, 7)
    assert statements.kinds().count("UPDATE sessions SET") == 3
    # SQLite's trace repeats a DELETE for each table its cascade reaches: count distinct.
    deletes = {s for s in statements.seen if s.startswith('DELETE FROM "sessions"')}
    assert len(deletes) == 3


def test_100000_expired_sessions_are_swept_while_writers_write(tmp_path: Path) -> None:
    """100,000 sessions expired long ago, swept by the server every 0.2 s while four
    writers drive tasks through it: every write succeeds and every old session goes."""
    url = f"sqlite://{tmp_path / 'many.db'}"
    token = create_token(url, USER)
    server = Server(
        url,
        tmp_path / "server.log",
        RUNSTATE_SWEEP_SECONDS="0.2",
        RUNSTATE_RETENTION="1",
        RUNSTATE_RATE_LIMIT="false",
    ).start()
    try:
        expired = "2020-01-01 00:00:00+00:00"  # as Tortoise writes datetimes on SQLite
        path = url.removeprefix("sqlite://")
        with sqlite3.connect(path, timeout=30) as raw:
            raw.executemany(
                "INSERT INTO sessions (public_id, user_id, status, version, message_count,"
                " ttl_seconds, created_at, last_active_at, expires_at)"
                " VALUES (?, 'old', 'ACTIVE', 1, 0, 60, ?, ?, ?)",
                ((f"s{i}", expired, expired, expired) for i in range(100_000)),
            )
        failures: list[str] = []
        done = threading.Event()

        def write() -> None:
            with Api(server.url, token) as api:
                while not done.is_set():
                    try:
                        session = start_session(api)
                        task = create_task(api, session["id"], steps=2)
                        version = 1
                        for index in range(2):
                            for name in ("startStep", "completeStep"):
                                answer = step(
                                    api,
                                    name,
                                    "StepRefInput" if name == "startStep" else "CompleteStepInput",
                                    taskId=task["id"],
                                    expectedVersion=version,
                                    stepIndex=index,
                                )
                                assert answer["__typename"] == "Task", answer
                                version = answer["version"]
                    except Exception as error:  # every failure is reported below
                        failures.append(repr(error))

        writers = [threading.Thread(target=write) for _ in range(4)]
        for writer in writers:
            writer.start()
        try:
            wait_until(
                lambda: (
                    query_value(url, "SELECT COUNT(*) FROM sessions WHERE user_id = 'old'") == 0
                ),
                300,
                "the sweep to delete the old sessions",
            )
        finally:
            done.set()
            for writer in writers:
                writer.join()
        assert failures == []
        assert "expiry sweep failed" not in server.log()
    finally:
        server.stop()
