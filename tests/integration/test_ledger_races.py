"""The ledger under contention, on two server processes sharing one database
(SQLite file, PostgreSQL): REJECT admits one of four racing clients, ENQUEUE
keeps one order and one task running at a time, an INTERRUPT of a task whose
agent was killed hands the session to the new submission as soon as the dead
agent's lease lapses, and a device on the other process watches the ledger
change in commit order."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api import start_session
from tests.integration.test_claim import claim
from tests.integration.test_ledger import run_step, submit
from tests.support import (
    AgentProcess,
    Api,
    Server,
    Subscriber,
    create_token,
    require_service,
    two_servers,
    wait_until,
)

CLIENTS = 4
ROUNDS = 30
INPUTS = 40
ENV = {
    "RUNSTATE_RATE_LIMIT": "false",
    "RUNSTATE_REDIS_URL": "redis://127.0.0.1:6379/0",
    # A stream that missed its wake-up would read the database again only after
    # this: every event below arrives through Redis, as a device on the other
    # process would see it.
    "RUNSTATE_CATCH_UP_SECONDS": "120",
}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    require_service("Redis", "127.0.0.1", 6379)
    with two_servers(request.param, tmp_path_factory, "ledger-races", **ENV) as both:
        yield both


@pytest.fixture(scope="module")
def clients(servers: tuple[Server, Server]) -> Iterator[list[Api]]:
    """Four clients of one user, two on each process."""
    token = create_token(servers[0].database_url, "alice")
    apis = [Api(servers[i % 2].url, token) for i in range(CLIENTS)]
    yield apis
    for api in apis:
        api.close()


def ledger(api: Api, session_id: str) -> list[dict[str, Any]]:
    data = api(
        "query($s: ID!) { session(id: $s) { ... on AgentSession { submissions(first: 100)"
        " { seq status taskId task { steps { startedAt completedAt } } } } } }",
        s=session_id,
    )
    found: list[dict[str, Any]] = data["session"]["submissions"]
    return found


def test_reject_admits_exactly_one_of_four_racing_clients(clients: list[Api]) -> None:
    """Guards REJECT's decision under the session row's lock: each of 30 rounds,
    four clients on two processes submit REJECT to one idle session at once;
    exactly one is admitted, the others answer SessionBusy, and the ledger holds
    one entry."""
    with ThreadPoolExecutor(CLIENTS) as pool:
        for _ in range(ROUNDS):
            session = start_session(clients[0])["id"]
            answers = list(pool.map(submit, clients, [session] * CLIENTS, ["REJECT"] * CLIENTS))
            kinds = sorted(a["__typename"] for a in answers)
            assert kinds == ["SessionBusy"] * 3 + ["Submission"], answers
            assert len(ledger(clients[0], session)) == 1


def _checked_then_submitted(api: Api, session_id: str) -> dict[str, Any]:
    """The naive client: reads whether the session is idle, then submits."""
    data = api(
        "query($s: ID!) { session(id: $s) { ... on AgentSession { activeSubmission { id } } } }",
        s=session_id,
    )
    if data["session"]["activeSubmission"] is not None:
        return {"__typename": "SessionBusy"}
    return submit(api, session_id, "ENQUEUE")


def test_control_a_check_before_the_transaction_admits_two(clients: list[Api]) -> None:
    """The control: clients that check the session is idle, then submit, let two
    or more through in some round of 30."""
    admitted = []
    with ThreadPoolExecutor(CLIENTS) as pool:
        for _ in range(ROUNDS):
            session = start_session(clients[0])["id"]
            answers = list(pool.map(_checked_then_submitted, clients, [session] * CLIENTS))
            admitted.append(sum(a["__typename"] == "Submission" for a in answers))
            if max(admitted) >= 2:
                break
    assert max(admitted) >= 2, admitted


def test_enqueued_inputs_keep_one_order_and_run_one_at_a_time(clients: list[Api]) -> None:
    """Guards ENQUEUE: 40 inputs from four clients on two processes get seqs
    1..40; two workers claiming on both processes run their tasks in seq order,
    and no task of the session starts before the one before it completed (the
    database's own timestamps)."""
    session = start_session(clients[0])["id"]
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(
            pool.map(
                lambda i: submit(clients[i % CLIENTS], session, "ENQUEUE", input=i),
                range(INPUTS),
            )
        )
    assert sorted(a["seq"] for a in answers) == list(range(1, INPUTS + 1))
    order: list[str] = []

    def work(api: Api, holder: str) -> None:
        while len(order) < INPUTS:
            lease = claim(api, holder, session_id=session)
            if lease["__typename"] != "TaskLock":
                continue
            order.append(lease["taskId"])
            done = run_step(api, lease["taskId"], 0, lease["fencingToken"])
            assert done["status"] == "COMPLETED", done

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(work, clients[:2], ["w1", "w2"]))
    entries = ledger(clients[0], session)
    assert [e["taskId"] for e in entries] == order
    assert {e["status"] for e in entries} == {"COMPLETED"}
    spans = [
        (at(e["task"]["steps"][0]["startedAt"]), at(e["task"]["steps"][0]["completedAt"]))
        for e in entries
    ]
    assert all(later[0] >= earlier[1] for earlier, later in pairwise(spans))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_an_interrupted_task_whose_agent_was_killed_gives_way_when_its_lease_lapses(
    servers: tuple[Server, Server], clients: list[Api], tmp_path: Path
) -> None:
    """INTERRUPT with the active task's agent killed (SIGKILL) mid-step: the claim
    hands out nothing while the dead agent's lease is live (its task is never
    claimable again), then, once the lease lapsed, the new submission's task;
    the interrupted one ends CANCELLED. A lapsed stop is ended by the claim itself
    (``stops.end_lapsed`` in ``claim_task``) and by each process's firing round,
    whichever comes first: seen failing with both removed, passing with either."""
    api = clients[0]
    session = start_session(api)["id"]
    first = submit(api, session, steps=[{"action": "book flight"}, {"action": "mail"}])
    agent = AgentProcess(
        servers[0].url, api.token, first["taskId"], "--holder", "doomed", "--ttl", "3",
        "--pause-at", "book flight", "--effects", str(tmp_path / "effects.txt"),
    )  # fmt: skip
    try:
        agent.until(lambda line: line.get("event") == "paused")
    finally:
        agent.kill()
    second = submit(api, session, "INTERRUPT")
    assert second["status"] == "QUEUED"
    claims: list[dict[str, Any]] = []

    def claimed() -> bool:
        claims.append(claim(clients[1], "next", session_id=session))
        return bool(claims[-1]["__typename"] == "TaskLock")

    wait_until(claimed, 10, "the new submission's task to be claimable")
    assert claims[-1]["taskId"] == second["taskId"]
    assert all(c["__typename"] == "NotFound" for c in claims[:-1])
    states = {e["seq"]: e["status"] for e in ledger(api, session)}
    assert states == {1: "INTERRUPTED", 2: "ACTIVE"}


LEDGER_EVENTS = """subscription($s: ID!) { sessionSubmissions(sessionId: $s) {
  kind submissions { seq status } } }"""


def test_a_device_on_the_other_process_sees_the_ledger_in_commit_order(
    servers: tuple[Server, Server], clients: list[Api]
) -> None:
    """Guards sessionSubmissions across processes: a watcher on one process gets a
    SNAPSHOT of the unfinished submissions, then, as inputs are submitted and a
    task finishes on the other, each change in commit order (ADMITTED for a new
    one, CHANGED for one that moved), woken through Redis alone."""
    writer = clients[1]  # on the second process
    session = start_session(writer)["id"]
    first = submit(writer, session)

    async def watch() -> list[dict[str, Any]]:
        async with Subscriber(
            servers[0].url, writer.token, LEDGER_EVENTS, {"s": session}
        ) as watcher:
            await watcher.next()
            await asyncio.to_thread(submit, writer, session, "ENQUEUE")
            lease = await asyncio.to_thread(claim, writer, "w", session)
            await asyncio.to_thread(run_step, writer, first["taskId"], 0, lease["fencingToken"])
            await watcher.until(lambda e: len(e["sessionSubmissions"]["submissions"]) == 1
                                and e["sessionSubmissions"]["submissions"][0]["status"] == "ACTIVE"
                                and e["sessionSubmissions"]["submissions"][0]["seq"] == 2,
                                within=20)  # fmt: skip
            return [e["sessionSubmissions"] for e in watcher.events]

    events = asyncio.run(watch())
    seen = [(e["kind"], [(s["seq"], s["status"]) for s in e["submissions"]]) for e in events]
    assert seen == [
        ("SNAPSHOT", [(1, "ACTIVE")]),
        ("ADMITTED", [(2, "QUEUED")]),
        ("CHANGED", [(1, "COMPLETED")]),
        ("CHANGED", [(2, "ACTIVE")]),
    ]
