"""A SQLite transaction's statements run on the event loop's thread
(``runstate.storage.sqlite``): a write's one trip to SQLite's thread is its
COMMIT, and a write that must wait for another writer's lock waits there, with
the loop free meanwhile."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from tortoise.backends.sqlite.client import SqliteClient

from runstate.services.actions import sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.services.write.house import House
from runstate.storage import sqlite
from tests.support import opened

USER = "here"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "here.db"


@pytest.fixture
async def house(path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{path}?busy_timeout=10000") as house:
        yield house


async def new_task(house: House) -> str:
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan("search", {})]
    return (await tasks.create_task(house, USER, session.id, goal="g", steps=plan)).value.id


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What goes to SQLite's thread, by the name of what runs there."""
    went: list[str] = []
    threaded: Any = aiosqlite.Connection._execute

    async def counted(self: aiosqlite.Connection, fn: Callable[..., Any], *args: Any) -> Any:
        went.append(getattr(fn, "__name__", repr(fn)))
        return await threaded(self, fn, *args)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counted)
    return went


async def test_a_write_goes_to_sqlite_s_thread_for_its_commit_alone(
    house: House, trips: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards ``HereTransaction``: a startStep's eight statements run on the loop's
    thread, and only its COMMIT (the fsync) goes to SQLite's. Control: with
    Tortoise's own transactions it is five trips (a COMMIT of nothing, BEGIN, the
    compare-and-swap, the tail in one, COMMIT)."""
    task_id = await new_task(house)
    trips.clear()
    await tasks.start_step(house, USER, task_id, 0, expected_version=1)
    assert trips == ["commit"]

    monkeypatch.setattr(sqlite.Client, "_in_transaction", SqliteClient._in_transaction)
    trips.clear()
    await tasks.complete_step(house, USER, task_id, 0, expected_version=2, output="x")
    assert trips == ["commit", "execute", "_execute_fetchall", "_run_all", "commit"]


@pytest.fixture
def fallback(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a BEGIN goes to SQLite's thread to wait for the write lock."""
    went = threading.Event()
    begin = sqlite._begin

    def waiting(db: sqlite3.Connection) -> None:
        went.set()
        begin(db)

    monkeypatch.setattr(sqlite, "_begin", waiting)
    return went


async def test_a_write_waits_for_another_writer_s_lock_with_the_loop_free(
    house: House, fallback: threading.Event, path: Path
) -> None:
    """Guards ``_begun_here``: while another connection holds the write lock, a
    write's BEGIN goes to SQLite's thread at once and waits there; the loop answers
    meanwhile (a coroutine submitted from another thread completes), and once the
    lock is let go the write is done. Seen failing with the BEGIN taken on the
    loop's thread under ``busy_timeout``: no BEGIN reached SQLite's thread within
    the deadline, the loop blocked in the wait."""
    task_id = await new_task(house)
    loop = asyncio.get_running_loop()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        write = asyncio.create_task(tasks.start_step(house, USER, task_id, 0, expected_version=1))

        def loop_answers_while_it_waits() -> bool:
            if not fallback.wait(5):
                return False
            probe = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, result=True), loop)
            return probe.result(5)

        assert await asyncio.to_thread(loop_answers_while_it_waits)
        assert not write.done()
    finally:
        other.commit()
        other.close()
    assert (await write).value.version == 2


async def test_a_sqlite_not_built_serialized_keeps_every_statement_on_its_thread(
    house: House, trips: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards ``Client._in_transaction``'s check: with a SQLite whose connections
    threads may not share at once, a write runs as with Tortoise's own engine, all
    on SQLite's thread (a COMMIT left running there by a cancelled task could
    otherwise meet the next transaction's statements)."""
    task_id = await new_task(house)
    monkeypatch.setattr(sqlite3, "threadsafety", 1)
    trips.clear()
    await tasks.start_step(house, USER, task_id, 0, expected_version=1)
    assert trips == ["commit", "execute", "_execute_fetchall", "_run_all", "commit"]
