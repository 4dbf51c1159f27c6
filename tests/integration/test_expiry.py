"""Session expiry on access: SessionExpired after the ttl, for reads and writes alike."""

from __future__ import annotations

from tests.integration.test_api import create_task, start_session, step, update_session
from tests.support import SESSION, Api, wait_until


def session(api: Api, session_id: str) -> dict[str, object]:
    result: dict[str, object] = api(
        "query($id: ID!) { session(id: $id) { " + SESSION + " } }", id=session_id
    )["session"]
    return result


def test_an_inactive_session_expires_and_stays_expired(alice: Api) -> None:
    s = start_session(alice, ttlSeconds=1)
    t = create_task(alice, s["id"])
    wait_until(
        lambda: session(alice, s["id"])["__typename"] == "SessionExpired",
        timeout=10,
        what="the session to expire",
    )
    expired = session(alice, s["id"])
    assert (expired["code"], expired["sessionId"]) == ("SESSION_EXPIRED", s["id"])
    refused = create_task(alice, s["id"])
    assert (refused["__typename"], refused["sessionId"]) == ("SessionExpired", s["id"])
    write = step(alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=1)
    assert write["__typename"] == "SessionExpired"
    update = update_session(
        alice,
        s["id"],
        1,
        status="ACTIVE",
    )
    assert update["__typename"] == "SessionExpired"
    read = alice("query($id: ID!) { task(id: $id) { __typename } }", id=t["id"])
    assert read["task"] == {"__typename": "SessionExpired"}
    listed = alice("{ sessions(status: EXPIRED, first: 100) { edges { node { id status } } } }")
    assert {"id": s["id"], "status": "EXPIRED"} in [e["node"] for e in listed["sessions"]["edges"]]
    active = alice("{ sessions(status: ACTIVE, first: 100) { edges { node { id } } } }")
    assert s["id"] not in [e["node"]["id"] for e in active["sessions"]["edges"]]


def test_writes_keep_a_session_alive(alice: Api) -> None:
    s = start_session(alice, ttlSeconds=3)
    t = create_task(alice, s["id"])
    first_expiry = s["expiresAt"]
    moved = step(alice, "startStep", "StepRefInput", taskId=t["id"], stepIndex=0, expectedVersion=1)
    assert moved["__typename"] == "Task"
    now = session(alice, s["id"])
    assert now["expiresAt"] > first_expiry
    assert now["version"] == 1
