"""Trusted documents (``transport.trusted``) on a real server: a document of the
SDK or the LangGraph saver named by ``documentId`` is answered exactly as the
same document sent as text, refusals, replays and request errors included, and
an id the server does not register is a 400."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from runstate.client import documents as doc
from runstate.client.documents import document_id
from runstate.web import dashboard as page
from tests.support import Api, Server, create_token

NEW = "application/graphql-response+json"


@pytest.fixture(scope="module")
def carol(server: Server) -> Iterator[Api]:
    api = Api(server.url, create_token(server.database_url, "carol"))
    yield api
    api.close()


def both(
    body: str,
    variables: dict[str, Any],
    by_id: Api,
    as_text: Api | None = None,
    accept: str = "application/json",
) -> tuple[httpx.Response, httpx.Response]:
    """``body`` sent by id (by ``by_id``), then as text (by ``as_text``, the same
    caller unless given), with the same variables."""
    headers = {"accept": accept}
    named = by_id.http.post(
        "/graphql",
        json={"documentId": document_id(body), "variables": variables},
        headers=headers,
    )
    sent = (as_text or by_id).http.post(
        "/graphql", json={"query": body, "variables": variables}, headers=headers
    )
    return named, sent


def same(
    by_id: httpx.Response, as_text: httpx.Response, seen: Callable[[bytes], bytes] = bytes
) -> bytes:
    """Whether two answers have one status, media type and body (as ``seen``
    shows it); the body by id."""
    assert (by_id.status_code, by_id.headers["content-type"]) == (
        as_text.status_code,
        as_text.headers["content-type"],
    )
    assert seen(by_id.content) == seen(as_text.content)
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
    same(*both(doc.START_SESSION, start, carol))
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
        answer = same(*both(body, variables, carol))
        answer_new = same(*both(body, variables, carol, accept=NEW))
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
        {"query": doc.START_STEP, "extensions": {"runstateDocumentId": "x"}},
    ],
)
def test_an_unknown_document_id_is_a_400(carol: Api, body: dict[str, Any]) -> None:
    """Guards the refusals: an id the server does not register, one that is not
    text, a request that sends a document both ways, and one that claims by its
    own extension to have named its document by id (so to take the lean path) are
    each a 400 with the reason, before anything runs."""
    answer = carol.http.post("/graphql", json={**body, "variables": {"id": "x"}})
    assert answer.status_code == 400
    assert "documentid" in answer.json()["errors"][0]["message"].lower()


TIME = re.compile(rb"\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d)?")
"""A timestamp in an answer: the one thing two users' twin writes may differ in."""


def untimed(answer: bytes) -> bytes:
    return TIME.sub(b"T", answer)


HISTORY = """query($id: ID!) { task(id: $id) { ... on Task { version status eventSeq
  steps { index action status attempts output error }
  events(first: 100) { seq kind status taskVersion stepIndex actor note
    steps { index action status } } } } }"""


class Twins:
    """Two users making the same writes to tasks of the same ids: ``lean`` names
    each document by id (the lean path), ``standard`` sends its text (the standard
    path). Each answer pair must be the same bytes but for timestamps."""

    def __init__(self, lean: Api, standard: Api) -> None:
        self.lean = lean
        self.standard = standard
        self.kinds: list[str] = []

    def __call__(self, body: str, **variables: Any) -> dict[str, Any]:
        by_id, as_text = both(body, variables, self.lean, self.standard)
        same(by_id, as_text, untimed)
        answer: dict[str, Any] = by_id.json()
        if "errors" in answer:
            self.kinds.append("errors")
            return answer
        (value,) = answer["data"].values()
        self.kinds.append(value["__typename"])
        found: dict[str, Any] = value
        return found

    def text(self, body: str, **variables: Any) -> None:
        """A document both send as text (one the lean path does not run)."""
        for api in (self.lean, self.standard):
            api(body, **variables)

    def history(self, task_id: str) -> bytes:
        answers = [
            api.http.post("/graphql", json={"query": HISTORY, "variables": {"id": task_id}})
            for api in (self.lean, self.standard)
        ]
        lean, standard = (untimed(a.content) for a in answers)
        assert lean.replace(b"erin", b"U") == standard.replace(b"frank", b"U")
        return lean


def blob(text: str) -> dict[str, str]:
    return {"type": "json", "payload": base64.b64encode(text.encode()).decode()}


def test_every_lean_write_answers_and_logs_as_the_standard_path(server: Server) -> None:
    """Guards the lean path (``resolvers.lean``) against the standard one, over the
    write matrix: every write document it runs, each success, each refusal
    (VersionConflict, StaleFencingToken, InvalidTransition, InvalidInput, NotFound,
    LockHeld, IdempotencyKeyReused), an idempotent replay and a request error,
    answered by two users in twin tasks, one by id (lean) and one as text
    (standard): the same status, media type and bytes but for timestamps, and the
    same events. Seen failing with a key's order in the answer's plan changed, and
    with a refusal left raised instead of answered."""
    tokens = [create_token(server.database_url, name) for name in ("erin", "frank")]
    with Api(server.url, tokens[0]) as erin, Api(server.url, tokens[1]) as frank:
        twins = Twins(erin, frank)
        twins(doc.START_SESSION, input={"id": "s", "ttlSeconds": 3600})
        steps = [{"action": "a"}, {"action": "b"}, {"action": "pay", "idempotent": False}]
        twins.text(
            doc.CREATE_TASK, input={"sessionId": "s", "id": "t", "goal": "g", "steps": steps}
        )
        lock = twins(doc.ACQUIRE, input={"taskId": "t", "holderId": "w1", "ttlSeconds": 60})
        token = lock["fencingToken"]
        step = {"taskId": "t", "fencingToken": token}
        v = twins(doc.START_STEP, input={**step, "stepIndex": 0, "expectedVersion": 1})["version"]
        done = {**step, "stepIndex": 0, "expectedVersion": v, "output": {"x": 1}}
        v = twins(doc.COMPLETE_STEP, input={**done, "idempotencyKey": "k1"})["version"]
        twins(doc.COMPLETE_STEP, input={**done, "idempotencyKey": "k1"})  # a replay
        twins(doc.COMPLETE_STEP, input={**done, "output": {"x": 2}, "idempotencyKey": "k1"})
        twins(doc.START_STEP, input={**step, "stepIndex": 1, "expectedVersion": v - 1})
        twins(
            doc.START_STEP,
            input={**step, "fencingToken": token - 1, "stepIndex": 1, "expectedVersion": v},
        )
        twins(doc.FAIL_STEP, input={**step, "stepIndex": 1, "expectedVersion": v, "error": "no"})
        v = twins(
            doc.CHECKPOINT,
            input={
                **step,
                "expectedVersion": v,
                "steps": [{"index": 1, "status": "SUCCESS", "output": [1]}],
            },
        )["version"]
        twins(
            doc.CHECKPOINT,
            input={**step, "expectedVersion": v, "steps": [{"index": 7, "status": "SUCCESS"}]},
        )
        tool = {"taskId": "t", "toolName": "search", "fencingToken": token}
        twins(doc.TOOL, input={**tool, "outcome": "CALLING"})
        twins(doc.TOOL, input={**tool, "outcome": "FAILURE", "error": "down", "maxRetries": 1})
        twins(doc.TOOL, input={**tool, "outcome": "RATE_LIMITED", "retryAfterSeconds": 30})
        twins(doc.TOOL, input={**tool, "outcome": "CALLING"})
        twins(doc.DECIDE, input={**step, "stepIndex": 2, "expectedVersion": v, "decision": "SKIP"})
        decision = {"taskId": "t", "stepIndex": 2, "expectedVersion": v, "decision": "SKIP"}
        twins(page.PAGE_DECIDE, input=decision)  # the dashboard's: a problem's message
        twins(page.PAGE_FORK, input={"taskId": "t", "atSeq": 2, "id": "f"})
        answer = {"taskId": "t", "stepIndex": 2, "expectedVersion": v, "value": {"ok": True}}
        twins(page.PAGE_ANSWER, input=answer)  # not waiting at an interrupt
        v = twins(
            doc.SET_STATUS, input={**step, "expectedVersion": v, "status": "WAITING_TOOL"}
        ).get("version", v)
        v = twins(doc.SET_STATUS, input={**step, "expectedVersion": v, "status": "RUNNING"}).get(
            "version", v
        )
        graph = {"taskId": "t", "fencingToken": token, "metadata": {"run_id": "r1"}}
        put = {**graph, **blob("c"), "channelVersions": {"n": "1"}, "channels": []}
        twins(doc.PUT_GRAPH_CHECKPOINT, input={**put, "checkpointId": "c0"})
        node = {"graphTaskId": "g1", "name": "n1", "status": "SUCCESS", "superStep": 1}
        held = {
            "graphTaskId": "g1",
            "writes": [{"idx": 0, "channel": "n", **blob("1")}],
            "node": node,
        }
        twins(
            doc.PUT_GRAPH_CHECKPOINT,
            input={**put, "checkpointId": "c1", "parentId": "c0", "writes": [held]},
        )
        twins(
            doc.PUT_GRAPH_CHECKPOINT,
            input={**put, "checkpointId": "c1", "parentId": "c0", "writes": [held]},
        )
        twins(doc.PUT_GRAPH_CHECKPOINT, input={**put, "checkpointId": "c2", "payload": "%%%"})
        pending = {"taskId": "t", "fencingToken": token, "checkpointId": "c1", "graphTaskId": "g2"}
        twins(
            doc.PUT_GRAPH_WRITES,
            input={**pending, "writes": [{"idx": 0, "channel": "n", **blob("2")}]},
        )
        started = {**node, "graphTaskId": "g2", "name": "n2", "status": "RUNNING", "superStep": 2}
        twins(
            doc.RECORD_GRAPH_RUN, input={"taskId": "t", "fencingToken": token, "nodes": [started]}
        )
        twins(doc.COPY_GRAPH, input={"taskId": "t", "newTaskId": "t2"})
        twins(doc.PRUNE_GRAPH, input={"taskId": "t", "fencingToken": token})
        twins(doc.DELETE_GRAPH_RUNS, input={"runIds": ["r1"]})  # t is leased: LockHeld
        twins(doc.CLEAR_GRAPH, input={"taskId": "t2"})
        twins(doc.CLEAR_GRAPH, input={"taskId": "nope"})
        twins(doc.RENEW, input={"taskId": "t", "holderId": "w1", "ttlSeconds": 60})
        twins(doc.ACQUIRE, input={"taskId": "t", "holderId": "w2", "ttlSeconds": 60})
        twins(doc.RELEASE, input={"taskId": "t", "holderId": "w1"})
        twins(doc.DELETE_GRAPH_RUNS, input={"runIds": ["r1"]})
        twins(doc.CLAIM, input={"holderId": "w3", "ttlSeconds": 60, "sessionId": "s"})
        said = {"sessionId": "s", "items": [{"role": "user", "content": 'é "q"'}, [1, 2.5]]}
        twins(doc.ADD_SESSION_ITEMS, input={**said, "idempotencyKey": "k2"})
        twins(doc.ADD_SESSION_ITEMS, input={**said, "idempotencyKey": "k2"})  # a replay
        twins(doc.POP_SESSION_ITEM, input={"sessionId": "s"})
        twins(doc.CLEAR_SESSION_ITEMS, input={"sessionId": "s"})
        twins(doc.POP_SESSION_ITEM, input={"sessionId": "s"})  # none left: popped null
        twins(doc.ADD_SESSION_ITEMS, input={"sessionId": "nope", "items": [1]})
        twins(doc.START_STEP, input={"taskId": "t"})  # a request error
        for task_id in ("t", "t2"):
            assert b'"events":[{' in twins.history(task_id)
    assert set(twins.kinds) == {
        "AgentSession",
        "TaskLock",
        "Task",
        "ToolState",
        "VersionConflict",
        "StaleFencingToken",
        "InvalidTransition",
        "InvalidInput",
        "IdempotencyKeyReused",
        "NotFound",
        "LockHeld",
        "GraphRunsDeleted",
        "SessionItemsChanged",
        "errors",
    }
