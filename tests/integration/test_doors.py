"""Every door refuses alike: the same bad value sent to ``decideStep`` as a
GraphQL text document, as the SDK's trusted document named by id, and as an
AG-UI resume's answer gets the same refusal in the same words, and writes
nothing.

The rules of what may be stored live in the services (``domain.validation``),
every body is read by one parser (``transport.strict_json``) and every write
enters by one function (``services.write.door``); this test is what holds the
doors to that. A body the parser refuses is a 400 at each door; a value it lets
through is the service's ``InvalidInput`` naming its field (a Problem member on
GraphQL, a ``RUN_ERROR`` of code ``INVALID_INPUT`` on AG-UI).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from runstate.client import documents as doc
from runstate.client.documents import document_id
from tests.agui_client import post
from tests.integration.test_agui import in_doubt
from tests.support import Api, Server

BAD: dict[str, tuple[str, str]] = {
    "NUL in the note": ("note", '"a\\u0000b"'),
    "an unpaired surrogate in the note": ("note", '"\\ud800"'),
    "an unpaired surrogate in an output key": ("output", '{"\\udc00": 1}'),
    "NaN in the output": ("output", "NaN"),
    "a body nested past the recursion limit": ("output", "[" * 200_000 + "]" * 200_000),
    "a note past 1,000 characters": ("note", json.dumps("n" * 1001)),
    "an output 33 levels deep": ("output", "[" * 33 + "]" * 33),
    "an integer past 64 bits": ("output", str(2**64)),
    "a number past a double's range": ("output", "1e999"),
}
"""Bad values, by what is wrong: the field that carries one, and its JSON text
(sent as it is, not re-encoded)."""

Refusal = tuple[str, ...]
"""A refusal as the doors are compared: ``("400", message)`` or
``("INVALID_INPUT", message)``, the message naming the field."""


def _fields(task: dict[str, Any], field: str, raw: str) -> str:
    """The decision's fields as JSON text, ``field`` holding ``raw``."""
    return (
        f'"decision": "COMPLETE", "{field}": {raw}'
        if field == "note"
        else f'"decision": "COMPLETE", "output": {raw}'
    )


def _graphql(body: str, api: Api) -> Refusal:
    answer = api.http.post(
        "/graphql", content=body.encode(), headers={"content-type": "application/json"}
    )
    data = answer.json()
    if answer.status_code == 400:
        return ("400", data["errors"][0]["message"])
    assert answer.status_code == 200, answer.text
    problem = data["data"]["decideStep"]
    assert problem["__typename"] == "InvalidInput", problem
    return ("INVALID_INPUT", problem["message"])


def as_text(api: Api, server: Server, task: dict[str, Any], field: str, raw: str) -> Refusal:
    """The GraphQL door, the document sent as text."""
    variables = (
        f'{{"input": {{"taskId": "{task["id"]}", "stepIndex": 0,'
        f' "expectedVersion": {task["version"]}, {_fields(task, field, raw)}}}}}'
    )
    return _graphql(f'{{"query": {json.dumps(doc.DECIDE)}, "variables": {variables}}}', api)


def by_id(api: Api, server: Server, task: dict[str, Any], field: str, raw: str) -> Refusal:
    """The GraphQL door, the SDK's trusted document named by id."""
    variables = (
        f'{{"input": {{"taskId": "{task["id"]}", "stepIndex": 0,'
        f' "expectedVersion": {task["version"]}, {_fields(task, field, raw)}}}}}'
    )
    name = json.dumps(document_id(doc.DECIDE))
    return _graphql(f'{{"documentId": {name}, "variables": {variables}}}', api)


async def by_agui(api: Api, server: Server, task: dict[str, Any], field: str, raw: str) -> Refusal:
    """The AG-UI door: the same decision as a resume's answer to the interrupt."""
    interrupt = json.dumps(f"{task['id']}:0@{task['version']}")
    body = (
        f'{{"threadId": "{task["sessionId"]}", "runId": "r", "messages": [],'
        f' "resume": [{{"interruptId": {interrupt}, "status": "resolved",'
        f' "payload": {{{_fields(task, field, raw)}}}}}]}}'
    )
    answer = await post(server.url, api.token, task["id"], body.encode())
    if answer.status == 400:
        return ("400", answer.json()["message"])
    assert answer.types == ["RUN_STARTED", "RUN_ERROR"], answer.types
    ended = answer.frames[1].event
    assert ended["code"] == "INVALID_INPUT"
    prefix = f"resume: {task['id']}:0@{task['version']}: "
    assert ended["message"].startswith(prefix), ended["message"]
    return ("INVALID_INPUT", ended["message"].removeprefix(prefix))


def version_of(api: Api, task_id: str) -> tuple[int, int]:
    task = api("query($t: ID!) { task(id: $t) { ... on Task { version eventSeq } } }", t=task_id)
    return task["task"]["version"], task["task"]["eventSeq"]


@pytest.mark.parametrize("bad", list(BAD))
async def test_every_door_refuses_a_bad_value_alike(bad: str, server: Server, alice: Api) -> None:
    """Guards the one edge: for each bad value, the text door, the trusted door and
    the AG-UI door answer the same refusal (a 400 with the parser's words, or the
    service's InvalidInput with its field and words), and the task is as it was.
    Seen failing with AG-UI reading its body with ``json.loads`` as it did: five
    of nine differ (NUL and the surrogates refused by the service in other words,
    NaN read as a number, the deep body a 500)."""
    field, raw = BAD[bad]
    task = in_doubt(alice)
    before = version_of(alice, task["id"])
    doors: dict[str, Callable[..., Any]] = {"text": as_text, "id": by_id}
    answers = {name: door(alice, server, task, field, raw) for name, door in doors.items()}
    answers["agui"] = await by_agui(alice, server, task, field, raw)
    assert len(set(answers.values())) == 1, answers
    assert version_of(alice, task["id"]) == before
