"""OpenAI Agents runs as a kind of task on the server (``runOf: "openai-agents"``),
against a real ``runstate serve`` on SQLite and PostgreSQL.

A run saved by ``save_run_state`` is marked on the server as a run of this
framework: ``load_run_state`` claims only such tasks of its session, so an older
ordinary task neither hides a decided run nor gets a lease event from the
loader, and an ordinary ``claimTask`` (an SDK worker's) never gets a run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agents.testing import ScriptedModel, assistant_message

from runstate.client import Runstate
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
            session._loop.call_soon_threadsafe(running.stop_renewing)  # the loader dies
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
