"""Trusted documents (``transport.trusted``) on a real server: a document of the
SDK or the LangGraph saver named by ``documentId`` is answered exactly as the
same document sent as text, refusals, replays and request errors included, and
an id the server does not register is a 400."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from runstate.client import documents as doc
from runstate.client.documents import document_id
from tests.support import Api, Server, create_token

NEW = "application/graphql-response+json"


@pytest.fixture(scope="module")
def carol(server: Server) -> Iterator[Api]:
    api = Api(server.url, create_token(server.database_url, "carol"))
    yield api
    api.close()


def both(
    api: Api, body: str, variables: dict[str, Any], accept: str = "application/json"
) -> tuple[httpx.Response, httpx.Response]:
    """``body`` sent by id, then as text, with the same variables."""
    headers = {"accept": accept}
    by_id = api.http.post(
        "/graphql",
        json={"documentId": document_id(body), "variables": variables},
        headers=headers,
    )
    as_text = api.http.post(
        "/graphql", json={"query": body, "variables": variables}, headers=headers
    )
    return by_id, as_text


def same(by_id: httpx.Response, as_text: httpx.Response) -> bytes:
    assert (by_id.status_code, by_id.headers["content-type"]) == (
        as_text.status_code,
        as_text.headers["content-type"],
    )
    assert by_id.content == as_text.content
    return by_id.content


def event_seq(api: Api, task_id: str) -> int:
    seq: int = api("query($id: ID!) { task(id: $id) { ... on Task { eventSeq } } }", id=task_id)[
        "task"
    ]["eventSeq"]
    return seq


def test_a_document_by_id_is_answered_as_its_text_byte_for_byte(carol: Api) -> None:
    """Guards the registry's lookup (``Trusted.request``): for reads, every kind of
    refusal (VersionConflict, NotFound, InvalidInput, StaleFencingToken, LockHeld),
    an idempotent replay and a request error, the answer by id has the status, the
    media type and the bytes of the answer by text, and neither writes an event.
    Seen failing with the variables dropped from a request by id."""
    session = str(uuid.uuid4())
    task_id = str(uuid.uuid4())
    start = {"input": {"id": session, "idempotencyKey": uuid.uuid4().hex}}
    same(*both(carol, doc.START_SESSION, start))
    created = {
        "input": {
            "sessionId": session,
            "id": task_id,
            "goal": "trusted",
            "steps": [{"action": "a"}, {"action": "b"}],
        }
    }
    carol.http.post(
        "/graphql", json={"documentId": document_id(doc.CREATE_TASK), "variables": created}
    )
    leased = {"input": {"taskId": task_id, "holderId": "w1", "ttlSeconds": 60}}
    carol.http.post("/graphql", json={"documentId": document_id(doc.ACQUIRE), "variables": leased})
    lock = carol(
        "query($id: ID!) { task(id: $id) { ... on Task { version lock { fencingToken } } } }",
        id=task_id,
    )["task"]
    version, token = lock["version"], lock["lock"]["fencingToken"]
    seq = event_seq(carol, task_id)
    started = {
        "input": {
            "taskId": task_id,
            "stepIndex": 0,
            "expectedVersion": version,
            "fencingToken": token,
            "idempotencyKey": "start-0",
        }
    }
    first = carol.http.post(
        "/graphql", json={"documentId": document_id(doc.START_STEP), "variables": started}
    )
    assert b'"__typename":"Task"' in first.content
    seq += 1
    cases: list[tuple[str, dict[str, Any]]] = [
        (doc.TASK_QUERY, {"id": task_id}),
        (doc.TASK_AT_QUERY, {"id": task_id, "seq": 1}),
        (doc.START_STEP, started),  # a replay: answered as the first time
        (doc.START_STEP, {"input": {**started["input"], "idempotencyKey": None}}),
        (
            doc.COMPLETE_STEP,
            {"input": {**started["input"], "taskId": "nope", "idempotencyKey": None}},
        ),
        (
            doc.COMPLETE_STEP,
            {"input": {**started["input"], "fencingToken": token - 1, "idempotencyKey": None}},
        ),
        (
            doc.CHECKPOINT,
            {
                "input": {
                    "taskId": task_id,
                    "expectedVersion": version + 1,
                    "fencingToken": token,
                    "steps": [{"index": 9, "status": "SUCCESS"}],
                }
            },
        ),
        (doc.ACQUIRE, {"input": {"taskId": task_id, "holderId": "w2", "ttlSeconds": 30}}),
        (doc.START_STEP, {"input": {"taskId": task_id}}),  # a request error
    ]
    kinds = set()
    for body, variables in cases:
        answer = same(*both(carol, body, variables))
        answer_new = same(*both(carol, body, variables, accept=NEW))
        kinds.add(
            answer.split(b'"__typename":"', 1)[-1].split(b'"', 1)[0]
            if b"__typename" in answer
            else b"errors"
        )
        assert answer_new.startswith(b"{")
    assert kinds == {
        b"Task",
        b"VersionConflict",
        b"NotFound",
        b"StaleFencingToken",
        b"InvalidInput",
        b"LockHeld",
        b"errors",
    }
    assert event_seq(carol, task_id) == seq


@pytest.mark.parametrize(
    "body",
    [
        {"documentId": "sha256:" + "0" * 64},
        {"documentId": 42},
        {"documentId": document_id(doc.TASK_QUERY), "query": doc.TASK_QUERY},
    ],
)
def test_an_unknown_document_id_is_a_400(carol: Api, body: dict[str, Any]) -> None:
    """Guards the refusals: an id the server does not register, one that is not
    text, and a request that sends a document both ways are each a 400 with the
    reason, before anything runs."""
    answer = carol.http.post("/graphql", json={**body, "variables": {"id": "x"}})
    assert answer.status_code == 400
    assert "documentId" in answer.json()["errors"][0]["message"]
