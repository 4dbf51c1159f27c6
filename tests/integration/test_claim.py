"""Dead workers replaced: stalled tasks, and claimTask across two server processes
on one database (SQLite file, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.test_api import create_task, start_session, step
from tests.integration.test_lifecycle import acquire
from tests.support import Api, Server, create_token, mutate, two_servers, wait_until

LOCK = """
  __typename
  ... on TaskLock { taskId holderId fencingToken expiresAt }
  ... on Problem { code message }
"""
WORKERS = 20
TASKS = 10


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Two server processes on one fresh database."""
    with two_servers(request.param, tmp_path_factory, "claim") as both:
        yield both


def claim(api: Api, holder: str, session_id: str | None = None, ttl: int = 60) -> dict[str, Any]:
    return mutate(
        api,
        "claimTask",
        "ClaimTaskInput",
        LOCK,
        holderId=holder,
        ttlSeconds=ttl,
        sessionId=session_id,
    )


def stalled_ids(api: Api, session_id: str) -> set[str]:
    data = api(
        "query($s: ID!) { tasks(sessionId: $s, stalled: true, first: 100) {"
        " edges { node { id stalled status } } } }",
        s=session_id,
    )
    nodes = [e["node"] for e in data["tasks"]["edges"]]
    assert all(n["stalled"] and n["status"] == "RUNNING" for n in nodes)
    return {n["id"] for n in nodes}


def stalled_tasks(api: Api, count: int) -> tuple[str, list[str]]:
    """A session with ``count`` tasks whose worker started them, then died: leases of
    one second, lapsed."""
    session = start_session(api)
    ids = []
    for _ in range(count):
        task = create_task(api, session["id"], steps=2)
        lock = acquire(api, task["id"], "dead-worker", ttl=1)
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
        ids.append(task["id"])
    wait_until(lambda: stalled_ids(api, session["id"]) == set(ids), 10, "the leases to lapse")
    return session["id"], ids


def test_twenty_workers_on_two_servers_claim_each_stalled_task_once(
    servers: tuple[Server, Server],
) -> None:
    """Guards claimTask: 20 workers, half on each server process, claim at once from
    10 stalled tasks: each task goes to exactly one worker, with a new fencing token,
    and the 10 others hear NotFound. The claimed tasks are stalled no more."""
    one, two = servers
    token = create_token(one.database_url, "pool")
    apis = [Api((one if i % 2 else two).url, token) for i in range(WORKERS)]
    session_id, ids = stalled_tasks(apis[0], TASKS)
    with ThreadPoolExecutor(WORKERS) as pool:
        answers = list(
            pool.map(lambda i: claim(apis[i], f"worker-{i}", session_id), range(WORKERS))
        )
    won = [a for a in answers if a["__typename"] == "TaskLock"]
    assert sorted(a["taskId"] for a in won) == sorted(ids), "every task, each once"
    assert {a["fencingToken"] for a in won} == {2}
    assert [a["__typename"] for a in answers].count("NotFound") == WORKERS - TASKS
    assert stalled_ids(apis[0], session_id) == set()
    for api in apis:
        api.close()


def test_a_claim_takes_the_oldest_task_that_needs_a_worker(servers: tuple[Server, Server]) -> None:
    """PLANNED tasks and stalled ones are claimed oldest first; a task with a live
    lease, a finished one and one never leased (RUNNING by hand) are left alone."""
    one, _ = servers
    api = Api(one.url, create_token(one.database_url, "solo"))
    session = start_session(api)
    live = create_task(api, session["id"], steps=1)
    assert acquire(api, live["id"], "alive", ttl=60)["__typename"] == "TaskLock"
    by_hand = create_task(api, session["id"], steps=1)
    step(api, "startStep", "StepRefInput", taskId=by_hand["id"], stepIndex=0, expectedVersion=1)
    planned = create_task(api, session["id"], steps=1)
    first = claim(api, "w1", session["id"])
    assert (first["taskId"], first["holderId"], first["fencingToken"]) == (planned["id"], "w1", 1)
    assert claim(api, "w2", session["id"])["__typename"] == "NotFound"
    other_session = claim(api, "w3", start_session(api)["id"])
    assert other_session["__typename"] == "NotFound"
    api.close()


def test_a_task_created_leased_is_its_creators_from_the_start(
    servers: tuple[Server, Server],
) -> None:
    """Guards ``CreateTaskInput.lease``: the task is written with its lease (fencing
    token 1, LOCK_ACQUIRED at seq 2) in the create's own transaction, so no claim
    finds it, even one sent to the other server right after; its holder takes it over
    with the same token, and its history has no lease at seq 1 and this one at seq 2.
    A lease that cannot be is refused as InvalidInput and writes no task. Control:
    the same task created without a lease is the first claim's."""
    one, two = servers
    token = create_token(one.database_url, "creator")
    api, other = Api(one.url, token), Api(two.url, token)
    session = start_session(api)["id"]
    leased = create_task(api, session, steps=2, lease={"holderId": "agent-1", "ttlSeconds": 60})
    assert (leased["lock"], leased["eventSeq"], leased["status"]) == (
        {"holderId": "agent-1"},
        2,
        "PLANNED",
    )
    assert claim(other, "worker", session)["__typename"] == "NotFound"
    took_over = acquire(api, leased["id"], "agent-1", ttl=5)
    assert (took_over["holderId"], took_over["fencingToken"]) == ("agent-1", 1)
    history = api(
        "query($id: ID!) { one: taskAt(id: $id, seq: 1) { ... on Task { lock { holderId } } }"
        " two: taskAt(id: $id, seq: 2) { ... on Task { lock { holderId } } }"
        " task(id: $id) { ... on Task { events { seq kind lock { fencingToken } } } } }",
        id=leased["id"],
    )
    assert history["one"]["lock"] is None
    assert history["two"]["lock"] == {"holderId": "agent-1"}
    assert history["task"]["events"] == [
        {"seq": 1, "kind": "TASK_CREATED", "lock": None},
        {"seq": 2, "kind": "LOCK_ACQUIRED", "lock": {"fencingToken": 1}},
    ]

    refused = create_task(api, session, lease={"holderId": "agent-2", "ttlSeconds": 0})
    assert (refused["__typename"], refused["field"]) == ("InvalidInput", "ttlSeconds")
    tasks = api("query($s: ID!) { tasks(sessionId: $s) { edges { node { id } } } }", s=session)
    assert tasks["tasks"]["edges"] == [{"node": {"id": leased["id"]}}]

    unleased = create_task(api, session, steps=2)
    assert claim(other, "worker", session)["taskId"] == unleased["id"]
    api.close()
    other.close()


def test_a_claim_may_leave_a_task_stalled_for_a_while(servers: tuple[Server, Server]) -> None:
    """Guards ``stalledForSeconds`` (``leases.claim_task``'s grace, both in the pick
    and in the UPDATE's check): a task stalled for a second or two is not claimed by
    a claim asking an hour, while a PLANNED task still is (the grace is about lapsed
    leases); the same claim asking nothing takes the stalled task (the control).
    Out of range it is InvalidInput naming the field."""
    one, two = servers
    api = Api(one.url, create_token(one.database_url, "patient"))
    session_id, (stalled,) = stalled_tasks(api, 1)
    patient = {"sessionId": session_id, "stalledForSeconds": 3600}
    found = mutate(api, "claimTask", "ClaimTaskInput", LOCK, holderId="w", ttlSeconds=60, **patient)
    assert found["__typename"] == "NotFound"
    planned = create_task(api, session_id, steps=1)
    found = mutate(api, "claimTask", "ClaimTaskInput", LOCK, holderId="w", ttlSeconds=60, **patient)
    assert (found["__typename"], found["taskId"]) == ("TaskLock", planned["id"])
    with Api(two.url, api.token) as other:
        taken = claim(other, "w0", session_id)
    assert (taken["__typename"], taken["taskId"]) == ("TaskLock", stalled)
    for bad in (-1, 3601):
        refused = mutate(
            api,
            "claimTask",
            "ClaimTaskInput",
            "__typename ... on InvalidInput { field }",
            holderId="w",
            ttlSeconds=60,
            stalledForSeconds=bad,
        )
        assert refused == {"__typename": "InvalidInput", "field": "stalledForSeconds"}
    api.close()


RUN = "openai-agents"
KIND = "... on Task { id runOf }"


def claim_kind(api: Api, holder: str, run_of: str, session_id: str | None = None) -> Any:
    return mutate(
        api,
        "claimTask",
        "ClaimTaskInput",
        LOCK + " ... on InvalidInput { field }",
        holderId=holder,
        ttlSeconds=60,
        sessionId=session_id,
        runOf=run_of,
    )


def test_a_claim_hands_out_only_tasks_of_the_kind_it_names(
    servers: tuple[Server, Server],
) -> None:
    """Guards ``runOf`` on the server (``leases.claim_task``: the kind in its pick and
    in its UPDATE's check): in one session an ordinary task, a run of one framework,
    a run of another and a second ordinary task, made in that order. Ordinary claims
    take the two ordinary tasks, oldest first, then find nothing (the runs left
    PLANNED and free); a claim naming a framework takes its run alone, by session
    or user-wide, then finds nothing; each task answers the ``runOf`` it was made
    with. Seen failing with the kind left out of ``_oldest_claimable`` and
    ``_still_claimable`` (the first ordinary claims took the runs in turn)."""
    one, two = servers
    token = create_token(one.database_url, "kinds")
    api, other = Api(one.url, token), Api(two.url, token)
    session = start_session(api)["id"]
    old = create_task(api, session, steps=1)
    run = create_task(api, session, steps=2, runOf=RUN)
    elsewhere = create_task(api, session, steps=1, runOf="another-framework")
    new = create_task(api, session, steps=1)
    assert [claim(api, "w1", session)["taskId"], claim(other, "w2")["taskId"]] == [
        old["id"],
        new["id"],
    ]
    assert claim(api, "w3", session)["__typename"] == "NotFound"
    assert claim(other, "w3")["__typename"] == "NotFound"
    taken = claim_kind(other, "loader", RUN)
    assert (taken["taskId"], taken["fencingToken"]) == (run["id"], 1)
    assert claim_kind(api, "loader", RUN, session)["__typename"] == "NotFound"
    assert claim_kind(api, "other", "another-framework", session)["taskId"] == elsewhere["id"]
    answered = api(
        "query($a: ID!, $b: ID!, $c: ID!) { a: task(id: $a) { " + KIND + " }"
        " b: task(id: $b) { " + KIND + " } c: task(id: $c) { " + KIND + " } }",
        a=old["id"],
        b=run["id"],
        c=elsewhere["id"],
    )
    assert answered == {
        "a": {"id": old["id"], "runOf": None},
        "b": {"id": run["id"], "runOf": RUN},
        "c": {"id": elsewhere["id"], "runOf": "another-framework"},
    }
    api.close()
    other.close()


def test_a_kind_that_cannot_be_is_refused_and_a_run_keeps_its_kind(
    servers: tuple[Server, Server],
) -> None:
    """Guards ``leases.run_kind`` and the kind as part of a task's content: a blank
    or 65-character ``runOf`` is InvalidInput on ``runOf`` at createTask (no task
    written) and at claimTask (nothing claimed), 64 characters are taken; a create
    repeated under its client-chosen id answers the task when the kind is the same
    and is InvalidInput on ``id`` when it is not (another task); a fork of a run is
    a run of the same framework, a fork of an ordinary task is ordinary. Seen
    failing with ``run_kind`` checking nothing (a blank kind was stored) and with
    ``tasks._existing`` comparing the asked kind with itself (the other kind's
    create answered the run)."""
    one, _ = servers
    api = Api(one.url, create_token(one.database_url, "names"))
    session = start_session(api)["id"]
    for bad in ("", "   ", "x" * 65):
        refused = create_task(api, session, steps=1, runOf=bad)
        assert (refused["__typename"], refused["field"]) == ("InvalidInput", "runOf")
        refused = claim_kind(api, "w", bad, session)
        assert (refused["__typename"], refused["field"]) == ("InvalidInput", "runOf")
    tasks = api("query($s: ID!) { tasks(sessionId: $s) { edges { node { id } } } }", s=session)
    assert tasks["tasks"]["edges"] == []
    longest = create_task(api, session, steps=1, runOf="x" * 64)
    assert longest["__typename"] == "Task"

    run = create_task(api, session, steps=1, id="run-1", runOf=RUN)
    again = create_task(api, session, steps=1, id="run-1", runOf=RUN)
    assert (again["id"], again["version"]) == (run["id"], 1)
    for kind in (None, "another-framework"):
        other = create_task(api, session, steps=1, id="run-1", runOf=kind)
        assert (other["__typename"], other["field"]) == ("InvalidInput", "id")

    plain = create_task(api, session, steps=1)
    forks = [
        mutate(api, "forkTask", "ForkTaskInput", KIND, taskId=source, atSeq=1)
        for source in (run["id"], plain["id"])
    ]
    assert [f["runOf"] for f in forks] == [RUN, None]
    api.close()
