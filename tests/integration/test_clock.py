"""One clock (issue 38, item 2): expiry, leases and retention are judged by the
database's clock, so a server process whose own clock is wrong can neither
expire, delete nor grant anything early (``storage.clock``).

The wrong clocks come from libfaketime (Debian's ``libfaketime``), preloaded into
a second server, or a ``runstate sweep``, beside a correct one, on one PostgreSQL
database: the database server's clock is the one that counts. (On SQLite the
database's clock is the machine's, which every process on it shares.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api import create_task, start_session, step
from tests.integration.test_claim import claim
from tests.integration.test_lifecycle import acquire
from tests.support import (
    IN_CI,
    SESSION,
    Api,
    Server,
    create_token,
    postgres_database,
    runstate,
    wait_until,
)

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def skewed(offset: str) -> dict[str, Any]:
    """The environment of a process whose clocks run ``offset`` (``+2h``) ahead."""
    if not os.path.exists(FAKETIME):
        reason = f"libfaketime is not installed ({FAKETIME}; apt-get install libfaketime)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    return {"LD_PRELOAD": FAKETIME, "FAKETIME": offset}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with postgres_database() as database_url:
        yield database_url


@pytest.fixture(scope="module")
def right(url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose clock is right."""
    tmp = tmp_path_factory.mktemp("clock-right")
    with Server(url, tmp / "server.log", RUNSTATE_RATE_LIMIT="false") as srv:
        yield srv


def server_ahead(url: str, tmp: Path, offset: str) -> Server:
    """A server on the same database whose own clock runs ``offset`` ahead."""
    return Server(url, tmp / f"ahead{offset}.log", RUNSTATE_RATE_LIMIT="false", **skewed(offset))


def session_state(api: Api, session_id: str) -> str:
    """The session's status, or the problem a read of it answers."""
    data = api("query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=session_id)
    found: dict[str, Any] = data["session"]
    return str(found.get("status") or found["__typename"])


def test_a_server_two_hours_fast_neither_expires_nor_deletes_a_live_session(
    url: str, right: Server, tmp_path: Path
) -> None:
    """Guards the database's clock for expiry and retention: a session active a
    moment ago with an hour to live is ACTIVE when read through a server 2 h fast,
    and a sweep run 2 h fast (retention 1 s) deletes neither it nor its task (it
    was marked EXPIRED for every server and deleted within 3 s). Control: a
    session whose 1-second expiry has passed by the database's clock is deleted by
    that same sweep, so the sweep does run and delete."""
    token = create_token(url, "clockwise")
    with Api(right.url, token) as api, server_ahead(url, tmp_path, "+2h") as ahead:
        live = start_session(api, ttlSeconds=3600)
        task = create_task(api, live["id"], steps=2)
        gone = start_session(api, ttlSeconds=1)
        swept = runstate("sweep", "--retention", "1", database_url=url, **skewed("+2h"))
        assert session_state(api, live["id"]) == "ACTIVE", swept.stdout + swept.stderr
        with Api(ahead.url, token) as fast:
            assert session_state(fast, live["id"]) == "ACTIVE"
            started = step(
                fast, "startStep", "StepRefInput", taskId=task["id"], stepIndex=0, expectedVersion=1
            )
            assert started["status"] == "RUNNING"
        # The first sweep may already have deleted it: a CLI that takes two seconds
        # to start on a busy machine runs past its expiry and retention both.
        wait_until(
            lambda: session_state(api, gone["id"]) in ("SessionExpired", "NotFound"),
            10,
            "the 1 s session",
        )
        wait_until(
            lambda: (
                runstate("sweep", "--retention", "1", database_url=url, **skewed("+2h"))
                and session_state(api, gone["id"]) == "NotFound"
            ),
            15,
            "the expired session to be deleted",
        )
        found = api("query($id: ID!) { task(id: $id) { __typename } }", id=task["id"])
        assert found["task"]["__typename"] == "Task"


def test_a_server_fifteen_minutes_fast_grants_no_live_lease(
    url: str, right: Server, tmp_path: Path
) -> None:
    """Guards the database's clock for leases: a worker's 10-minute lease, taken a
    moment ago through a correct server, is held for a server 15 min fast: a second
    worker's ``acquireTaskLock`` there answers LockHeld and its ``claimTask`` finds
    nothing to claim (it handed the lease to the second worker). Control: the same
    server grants a lease that has lapsed by the database's clock."""
    token = create_token(url, "leaseholder")
    with Api(right.url, token) as api, server_ahead(url, tmp_path, "+15m") as ahead:
        session = start_session(api)
        task = create_task(api, session["id"], steps=2)
        lock = acquire(api, task["id"], "first", ttl=600)
        started = step(
            api,
            "startStep",
            "StepRefInput",
            taskId=task["id"],
            stepIndex=0,
            expectedVersion=1,
            fencingToken=lock["fencingToken"],
        )
        assert started["status"] == "RUNNING"
        with Api(ahead.url, token) as fast:
            assert acquire(fast, task["id"], "second", ttl=60)["__typename"] == "LockHeld"
            assert claim(fast, "second", session["id"])["__typename"] == "NotFound"
            brief = create_task(api, session["id"], steps=1)
            assert acquire(api, brief["id"], "first", ttl=1)["__typename"] == "TaskLock"
            wait_until(
                lambda: acquire(fast, brief["id"], "second", ttl=60)["__typename"] == "TaskLock",
                10,
                "the 1 s lease to lapse by the database's clock",
            )
