"""OpenAI Agents runs as a kind of task on the server (``runOf: "openai-agents"``),
and what every ``RunstateSession`` of a process shares, against a real ``runstate
serve`` on SQLite and PostgreSQL.

A run saved by ``save_run_state`` is marked on the server as a run of this
framework: ``load_run_state`` claims only such tasks of its session, so an older
ordinary task neither hides a decided run nor gets a lease event from the
loader, and an ordinary ``claimTask`` (an SDK worker's) never gets a run. Every
session of a process sends through one loop thread and one HTTP client, so
sessions made and dropped leave no thread or connection behind.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents.testing import ScriptedModel, assistant_message

from runstate.client import Runstate
from runstate.client.http import Connections
from runstate.integrations import openai_agents
from runstate.integrations.openai_agents import RUN_OF, RunstateSession
from tests.agents.openai_agent import mailer
from tests.integration.test_openai_agents import TASK, decide, open_session, stopped_run
from tests.support import Api, Server, wait_until

__all__ = ["open_session"]  # the fixture, shared with test_openai_agents

EVENTS = """query($id: ID!) { task(id: $id) { ... on Task { version runOf lock { holderId }
  events { seq kind } } } }"""
LEASE = "query($id: ID!) { task(id: $id) { ... on Task { stalled status } } }"


async def decided_run(
    served: tuple[Server, str], session: RunstateSession, ran: Path, decision: str = "RETRY"
) -> str:
    """A run of the mailer stopped at its approval, saved, and decided on the server:
    its task's id."""
    server, token = served
    task_id = await session.save_run_state(await stopped_run(session, ran))
    with Api(server.url, token) as api:
        version = api(TASK, id=task_id)["task"]["version"]
        assert decide(api, task_id, decision, version)["__typename"] == "Task"
    return task_id


async def test_an_older_ordinary_task_hides_no_decided_run(
    served: tuple[Server, str], open_session: Any, tmp_path: Path
) -> None:
    """Guards ``load_run_state``'s claim of runs alone (``claimTask(runOf:
    "openai-agents")``): an ordinary task created in the session before the run,
    still PLANNED and free (the oldest task a plain claim would take), neither
    hides the decided run nor is touched: the loader hands the run out, the older
    task keeps its one event (TASK_CREATED, version 1, no lease), and the run is
    marked ``openai-agents``. Seen failing with ``_claim_decided`` claiming without
    ``run_of`` (the loader took the older task, wrote LOCK_ACQUIRED and
    LOCK_RELEASED on it, and answered None)."""
    server, token = served
    ran = tmp_path / "ran.log"
    session = open_session()
    async with Runstate(server.url, token) as rs:
        await rs.start_session(session.session_id)
        older = await rs.create_task(session.session_id, "an ordinary job", ["search"])
    task_id = await decided_run(served, session, ran)
    agent = mailer(ran, ScriptedModel([[assistant_message("sent")]]))
    state = await session.load_run_state(agent)
    assert state is not None
    await session.finish_run(output="sent")
    with Api(server.url, token) as api:
        untouched = api(EVENTS, id=older.id)["task"]
        run = api(EVENTS, id=task_id)["task"]
    assert untouched == {
        "version": 1,
        "runOf": None,
        "lock": None,
        "events": [{"seq": 1, "kind": "TASK_CREATED"}],
    }
    assert run["runOf"] == RUN_OF
    assert [e["kind"] for e in run["events"]].count("LOCK_ACQUIRED") == 2  # save, load


async def test_an_ordinary_claim_never_gets_a_run(
    served: tuple[Server, str], open_session: Any, tmp_path: Path
) -> None:
    """Guards the server's kind in ordinary claims: an SDK worker claiming on the
    session (``Runstate.claim`` without ``run_of``) gets nothing while the run
    waits for its decision, once it is decided (RUNNING with no live lease, which
    a plain claim would take as stalled), while it is handed out, and after its
    loader died (its lease lapsed: stalled again); the loader then puts the resume
    step in doubt. An ordinary task created afterwards is the worker's at once.
    Seen failing with the kind left out of ``leases._oldest_claimable`` and
    ``_still_claimable`` (the worker got the decided run, fencing token 2)."""
    server, token = served
    ran = tmp_path / "ran.log"
    session = open_session(lease_ttl=2)
    sid = session.session_id
    async with Runstate(server.url, token) as worker:
        task_id = await session.save_run_state(await stopped_run(session, ran))
        assert await worker.claim("worker", 60, session_id=sid) is None  # awaiting decision
        with Api(server.url, token) as api:
            version = api(TASK, id=task_id)["task"]["version"]
            assert decide(api, task_id, "RETRY", version)["__typename"] == "Task"
            assert api(LEASE, id=task_id)["task"] == {"stalled": True, "status": "RUNNING"}
            assert await worker.claim("worker", 60, session_id=sid) is None  # decided
            assert await session.load_run_state(mailer(ran, ScriptedModel())) is not None
            assert await worker.claim("worker", 60, session_id=sid) is None  # handed out
            running = session._running
            assert running is not None
            running.stop_soon()  # the loader dies while the run goes on
            stalled = lambda: api(LEASE, id=task_id)["task"]["stalled"]  # noqa: E731
            await asyncio.to_thread(wait_until, stalled, 10, "the handed-out run stalled")
            assert await worker.claim("worker", 60, session_id=sid) is None  # stalled
            later = open_session(sid)
            assert await later.load_run_state(mailer(ran, ScriptedModel())) is None
            steps = api(TASK, id=task_id)["task"]["steps"]
            assert [s["status"] for s in steps] == ["SUCCESS", "SUCCESS", "IN_DOUBT"]
        ordinary = await worker.create_task(sid, "an ordinary job", ["search"])
        lock = await worker.claim("worker", 60, session_id=sid)
        assert lock is not None
        assert (lock.task_id, lock.fencing_token) == (ordinary.id, 1)


async def test_a_claim_for_runs_gets_only_runs(
    served: tuple[Server, str], open_session: Any, tmp_path: Path
) -> None:
    """Guards the server's kind in claims naming it (``claimTask(runOf:
    "openai-agents")``): on a session holding an ordinary PLANNED task older than
    a decided run, a claim for runs gets the run (fencing token 2: the save held
    the first), then nothing, though the ordinary task is still free for an
    ordinary claim, which takes it. Seen failing with the kind left out of
    ``leases._oldest_claimable`` and ``_still_claimable`` (the claim for runs got
    the older ordinary task)."""
    server, token = served
    session = open_session()
    sid = session.session_id
    async with Runstate(server.url, token) as rs:
        await rs.start_session(sid)
        older = await rs.create_task(sid, "an ordinary job", ["search"])
        task_id = await decided_run(served, session, tmp_path / "ran.log")
        run = await rs.claim("loader", 60, session_id=sid, run_of=RUN_OF)
        assert run is not None
        assert (run.task_id, run.holder_id, run.fencing_token) == (task_id, "loader", 2)
        assert await rs.claim("loader", 60, session_id=sid, run_of=RUN_OF) is None
        plain = await rs.claim("worker", 60, session_id=sid)
        assert plain is not None
        assert (plain.task_id, plain.fencing_token) == (older.id, 1)
        assert (await rs.task(task_id)).run_of == RUN_OF
        assert (await rs.task(older.id)).run_of is None


def connections_to(port: int) -> int:
    """This process's open TCP sockets whose peer is ``port`` on this machine."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote, inode = fields[2], fields[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == port:
                found += 1
    return found


def alive(kind: type) -> int:
    """How many objects of ``kind`` are alive once garbage is collected."""
    gc.collect()
    return sum(isinstance(o, kind) for o in gc.get_objects())


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="counts sockets through /proc")
async def test_sessions_made_and_never_closed_leave_nothing_behind(
    served: tuple[Server, str], open_session: Any
) -> None:
    """Guards the process's one loop thread and one HTTP client (``_Shared``): after
    one session has sent (so that they exist), 200 more are made, each sends
    (starting its session and reading its items) and is dropped without
    ``close``; the process then runs exactly as many threads as before, holds no
    more connections to the server, and exactly as many HTTP clients and
    ``Runstate`` clients are alive (nothing keeps a dropped session's). Closing a
    session leaves the shared client serving the others. Seen failing with a
    loop, thread and HTTP client per session, as before: 202 threads against 2,
    and, with the thread count left unchecked, 41 connections to the server
    against 1 (the clients' objects were collected with their sessions, their
    sockets left to the collector)."""
    server, token = served
    port = int(server.url.rsplit(":", 1)[1])
    first = open_session()
    await first.get_items()
    threads, sockets = threading.active_count(), connections_to(port)
    clients, runstates = alive(Connections), alive(Runstate)
    assert sockets >= 1
    for n in range(200):
        session = RunstateSession(
            f"dropped-{n}-{uuid.uuid4().hex[:6]}", url=server.url, token=token
        )
        assert await session.get_items() == []
        del session
    assert threading.active_count() == threads
    assert connections_to(port) <= sockets
    assert (alive(Connections), alive(Runstate)) == (clients, runstates)
    closed = open_session()
    await closed.add_items([{"role": "user", "content": "hi"}])
    await closed.close()
    assert await first.get_items() == []  # the shared client still serves the others
    with pytest.raises(RuntimeError, match="closed"):
        await closed.get_items()
    shared = openai_agents._shared
    assert shared is not None
    assert shared.thread.is_alive()


async def test_a_dropped_session_stops_renewing_the_run_it_handed_out(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards ``RunstateSession._unheld``: a session that handed a run out and is
    then dropped without ``finish_run`` or ``close`` (nothing can finish that run
    any more) stops renewing its lease on the shared loop, which outlives it: the
    run stalls once its 2 s lease lapses, and the next loader puts its resume
    step in doubt. Seen failing with the finalizer left out (the run was still
    held, renewed, 10 s later)."""
    server, token = served
    ran = tmp_path / "ran.log"
    name = f"dropped-run-{uuid.uuid4().hex[:8]}"
    session = RunstateSession(name, url=server.url, token=token, lease_ttl=2)
    sid = session.session_id
    task_id = await decided_run(served, session, ran)
    assert await session.load_run_state(mailer(ran, ScriptedModel())) is not None
    del session
    gc.collect()
    with Api(server.url, token) as api:
        stalled = lambda: api(LEASE, id=task_id)["task"]["stalled"]  # noqa: E731
        await asyncio.to_thread(wait_until, stalled, 10, "the dropped session's run stalled")
        later = RunstateSession(sid, url=server.url, token=token)
        assert await later.load_run_state(mailer(ran, ScriptedModel())) is None
        steps = api(TASK, id=task_id)["task"]["steps"]
        assert [s["status"] for s in steps] == ["SUCCESS", "SUCCESS", "IN_DOUBT"]
