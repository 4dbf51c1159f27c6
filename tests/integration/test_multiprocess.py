"""Two `runstate serve` processes on one SQLite file: no "database is locked", no lost update."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import runstate
from tests.integration.test_api import create_task, start_session
from tests.integration.test_concurrency import cas_increments
from tests.support import Api, Server, create_token, database, query_value

MIGRATIONS = sorted(
    p.name for p in (Path(runstate.__file__).parent / "models" / "migrations").glob("[0-9]*.py")
)
WRITERS_PER_SERVER = 10
STEPS = 10
SHARED_INCREMENTS = 5


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[Server, Server, str]]:
    url = f"sqlite://{tmp_path / 'shared.db'}"
    token = create_token(url, "alice")
    first = Server(url, tmp_path / "a.log").start()
    second = Server(url, tmp_path / "b.log").start()
    try:
        yield first, second, token
    finally:
        first.stop()
        second.stop()
        for server in (first, second):
            assert "database is locked" not in server.log()


async def drive(client: httpx.AsyncClient, task_id: str) -> list[str]:
    """Start and complete every step of one task; return anything that was not a Task."""
    bad: list[str] = []
    version = 1
    for index in range(STEPS):
        for name, input_type in (
            ("startStep", "StepRefInput"),
            ("completeStep", "CompleteStepInput"),
        ):
            query = (
                f"mutation($i: {input_type}!) {{ {name}(input: $i) {{ __typename"
                " ... on Task { version } ... on Problem { message } } }"
            )
            input = {"taskId": task_id, "stepIndex": index, "expectedVersion": version}
            response = await client.post(
                "/graphql", json={"query": query, "variables": {"i": input}}
            )
            body: dict[str, Any] = response.json() if response.status_code == 200 else {}
            result = body.get("data", {}).get(name) if body.get("data") else None
            if result is None or result["__typename"] != "Task":
                bad.append(f"{response.status_code} {response.text[:200]}")
                return bad
            version = result["version"]
    return bad


async def test_two_processes_share_one_sqlite_file(two_servers: tuple[Server, Server, str]) -> None:
    first, second, token = two_servers
    # Closed even when a write fails: a leaked socket is reported in a later test.
    with Api(first.url, token) as api:
        shared = start_session(api)
        tasks = [
            create_task(api, shared["id"], steps=STEPS)["id"] for _ in range(2 * WRITERS_PER_SERVER)
        ]
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx.AsyncClient(base_url=first.url, headers=headers, timeout=120) as a,
            httpx.AsyncClient(base_url=second.url, headers=headers, timeout=120) as b,
        ):
            clients = [a] * WRITERS_PER_SERVER + [b] * WRITERS_PER_SERVER
            drives, _ = await asyncio.gather(
                asyncio.gather(*(drive(c, t) for c, t in zip(clients, tasks, strict=True))),
                asyncio.gather(
                    *(cas_increments(c, shared["id"], SHARED_INCREMENTS) for c in clients)
                ),
            )
        assert [line for lines in drives for line in lines] == []
        listed = api(
            "query($s: ID) { tasks(sessionId: $s, first: 100) { edges { node {"
            " status version eventSeq currentStep } } } }",
            s=shared["id"],
        )["tasks"]["edges"]
        assert [e["node"] for e in listed] == [
            {
                "status": "COMPLETED",
                "version": 2 * STEPS + 1,
                "eventSeq": 2 * STEPS + 1,
                "currentStep": STEPS,
            }
        ] * len(tasks)
        session = api(
            "query($id: ID!) { session(id: $id) { ... on AgentSession { version messageCount } } }",
            id=shared["id"],
        )["session"]
        total = 2 * WRITERS_PER_SERVER * SHARED_INCREMENTS
        assert session == {"version": total + 1, "messageCount": total}


# ------------------------------------------------ control: why the write goes first

ROUNDS = 300


def _writer(path: str, read_first: bool, errors: Any, ready: Any, go: Any) -> None:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    locked = 0
    ready.release()
    go.wait(timeout=60)  # both writers start together, or they might never overlap
    for _ in range(ROUNDS):
        try:
            db.execute("BEGIN")
            if read_first:
                (value,) = db.execute("SELECT n FROM counter WHERE id = 1").fetchone()
                db.execute("UPDATE counter SET n = ? WHERE id = 1", (value + 1,))
            else:
                db.execute("UPDATE counter SET n = n + 1 WHERE id = 1")
                db.execute("SELECT n FROM counter WHERE id = 1").fetchone()
            db.execute("COMMIT")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e):
                raise
            locked += 1
            db.execute("ROLLBACK")
    errors.put(locked)
    db.close()


def locked_errors(tmp_path: Path, read_first: bool) -> int:
    path = str(tmp_path / f"control-{read_first}.db")
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)")
        db.execute("INSERT INTO counter VALUES (1, 0)")
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    ready, go = context.Semaphore(0), context.Event()
    workers = [
        context.Process(target=_writer, args=(path, read_first, errors, ready, go))
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    for _ in workers:
        assert ready.acquire(timeout=60)
    go.set()
    counts = [errors.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    return sum(counts)


def test_control_read_first_transactions_hit_database_is_locked(tmp_path: Path) -> None:
    """Control: deferred transactions that read before writing fail across processes."""
    assert locked_errors(tmp_path, read_first=True) > 0


def test_write_first_transactions_never_do(tmp_path: Path) -> None:
    assert locked_errors(tmp_path, read_first=False) == 0


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_servers_started_together_migrate_once(kind: str, tmp_path: Path) -> None:
    """Migrations run one process at a time, so a fleet may start at once on an empty database.

    Without the migration lock this failed in 3 of 6 runs ("table already exists");
    being a timing race, that control is not repeatable enough to run here.
    """
    with database(kind, tmp_path) as url:
        servers = [Server(url, tmp_path / f"{i}.log") for i in range(3)]
        for server in servers:
            server.launch()
        try:
            for server in servers:
                server.wait_healthy()
            applied = query_value(url, "SELECT COUNT(*) FROM tortoise_migrations")
            assert applied == len(MIGRATIONS)
            assert query_value(url, "SELECT COUNT(*) FROM installation") == 1
        finally:
            for server in servers:
                server.stop()
