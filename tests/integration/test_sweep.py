"""The expiry sweep: expired sessions are marked, then deleted after the retention,
with everything below them, and nobody else's data is touched."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.test_api import create_task, start_session, step
from tests.integration.test_expiry import session
from tests.support import Api, Server, create_token, database, query_value, wait_until


@pytest.fixture(params=["sqlite", "postgres"])
def sweeping_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    with database(request.param, tmp_path) as url:
        server = Server(
            url, tmp_path / "server.log", RUNSTATE_RETENTION="1", RUNSTATE_SWEEP_SECONDS="0.2"
        ).start()
        try:
            yield server
        finally:
            server.stop()


def rows_of(url: str, session_pk: int) -> dict[str, int]:
    tasks = f"SELECT id FROM tasks WHERE session_id = {session_pk}"
    return {
        "sessions": query_value(url, f"SELECT COUNT(*) FROM sessions WHERE id = {session_pk}"),
        "tasks": query_value(url, f"SELECT COUNT(*) FROM ({tasks}) t"),
        "steps": query_value(url, f"SELECT COUNT(*) FROM steps WHERE task_id IN ({tasks})"),
        "events": query_value(url, f"SELECT COUNT(*) FROM task_events WHERE task_id IN ({tasks})"),
    }


def pk_of(url: str, user: str, session_id: str) -> int:
    return int(
        query_value(
            url, f"SELECT id FROM sessions WHERE user_id = '{user}' AND public_id = '{session_id}'"
        )
    )


def test_sweep_deletes_expired_sessions_after_retention(sweeping_server: Server) -> None:
    url = sweeping_server.database_url
    alice = Api(sweeping_server.url, create_token(url, "alice"))
    bob = Api(sweeping_server.url, create_token(url, "bob"))
    short = start_session(alice, ttlSeconds=1)
    doomed = create_task(alice, short["id"], steps=2)
    kept = start_session(alice)
    create_task(alice, kept["id"])
    theirs = start_session(bob, ttlSeconds=3600, id=short["id"])
    their_task = create_task(bob, theirs["id"], steps=2)
    step(bob, "startStep", "StepRefInput", taskId=their_task["id"], stepIndex=0, expectedVersion=1)
    short_pk, kept_pk, their_pk = (
        pk_of(url, "alice", short["id"]),
        pk_of(url, "alice", kept["id"]),
        pk_of(url, "bob", theirs["id"]),
    )
    assert rows_of(url, short_pk) == {"sessions": 1, "tasks": 1, "steps": 2, "events": 1}

    wait_until(lambda: session(alice, short["id"])["__typename"] == "SessionExpired", 10, "expiry")
    assert create_task(alice, short["id"])["__typename"] == "SessionExpired"
    wait_until(lambda: rows_of(url, short_pk)["sessions"] == 0, 15, "the sweep to delete it")
    assert rows_of(url, short_pk) == {"sessions": 0, "tasks": 0, "steps": 0, "events": 0}
    assert session(alice, short["id"])["__typename"] == "NotFound"
    assert doomed["id"] not in str(alice("{ tasks { edges { node { id } } } }"))
    assert rows_of(url, kept_pk) == {"sessions": 1, "tasks": 1, "steps": 3, "events": 1}
    assert rows_of(url, their_pk) == {"sessions": 1, "tasks": 1, "steps": 2, "events": 2}
    alice.close()
    bob.close()


SWEEPERS = 3
EXPIRED = 5
RETENTION = 1


def test_sweeps_running_at_once_handle_each_session_once(tmp_path: Path) -> None:
    """`runstate sweep` from cron on several hosts: every session is marked once and
    deleted once, whichever sweep gets it."""
    url = f"sqlite://{tmp_path / 'cron.db'}"
    token = create_token(url, "alice")
    server = Server(url, tmp_path / "server.log").start()  # its own sweep waits 60 s
    try:
        api = Api(server.url, token)
        made = [start_session(api, ttlSeconds=1) for _ in range(EXPIRED)]
        api.close()
    finally:
        server.stop()
    eligible = max(datetime.fromisoformat(s["expiresAt"]) for s in made) + timedelta(
        seconds=RETENTION
    )
    wait_until(lambda: datetime.now(UTC) > eligible, 10, "the retention to pass")
    env = {**os.environ, "RUNSTATE_DATABASE_URL": url}
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "runstate", "sweep", "--retention", str(RETENTION)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(SWEEPERS)
    ]
    outputs = [run.communicate(timeout=60)[0] for run in runs]
    assert [run.returncode for run in runs] == [0] * SWEEPERS
    line = r"(\d+) sessions expired, (\d+) deleted, \d+ idempotency keys deleted\n"
    counts = [re.fullmatch(line, out) for out in outputs]
    assert all(counts), outputs
    assert sum(int(m.group(1)) for m in counts if m) == EXPIRED
    assert sum(int(m.group(2)) for m in counts if m) == EXPIRED
    assert query_value(url, "SELECT COUNT(*) FROM sessions") == 0
