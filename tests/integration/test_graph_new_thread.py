"""A new LangGraph thread in one request: ``putGraphCheckpoint``'s ``newThread``
makes the thread's task (and its session) when the task does not exist, then
stores the checkpoint (``threads.checkpoints.put_checkpoint``); ``RunstateSaver``
sends it with the first checkpoint of a thread it does not know, in place of a
refused checkpoint, a ``startSession`` and a ``createTask`` before it again."""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from runstate.integrations.langgraph import RunstateSaver
from tests.integration.test_langgraph_steps import counting
from tests.support import Api, Server

PUT = """
mutation($input: PutGraphCheckpointInput!) {
  putGraphCheckpoint(input: $input) {
    __typename
    ... on Task { id sessionId goal version eventSeq events { kind seq } }
    ... on Problem { code message }
    ... on InvalidInput { field }
  }
}"""

SESSION = """
query($id: ID!) {
  session(id: $id) {
    __typename
    ... on AgentSession { lastActiveAt expiresAt }
  }
}"""


def checkpoint(task_id: str, new_thread: dict[str, Any] | None) -> dict[str, Any]:
    """A first checkpoint of thread ``task_id`` as the saver sends one."""
    payload = base64.b64encode(b"{}").decode()
    return {
        "taskId": task_id,
        "checkpointId": "c1",
        "type": "json",
        "payload": payload,
        "metadata": {"step": -1},
        "channelVersions": {"a": "1"},
        "channels": [{"channel": "a", "version": "1", "type": "json", "payload": payload}],
        "newThread": new_thread,
    }


def put(api: Api, task_id: str, new_thread: dict[str, Any] | None) -> dict[str, Any]:
    answer: dict[str, Any] = api(PUT, input=checkpoint(task_id, new_thread))["putGraphCheckpoint"]
    return answer


def session_of(api: Api, session_id: str) -> dict[str, Any]:
    found: dict[str, Any] = api(SESSION, id=session_id)["session"]
    return found


def test_a_checkpoint_of_a_missing_thread_makes_it_first(alice: Api) -> None:
    """Guards ``newThread``: the task is made in the session, started with the TTL
    asked, its TASK_CREATED logged before the GRAPH_CHECKPOINT, all answered by
    the one request. Control: the same checkpoint without ``newThread`` is
    NotFound and makes nothing."""
    thread, session = f"thread-{uuid.uuid4()}", f"s-{uuid.uuid4()}"
    refused = put(alice, thread, None)
    assert refused["code"] == "NOT_FOUND"
    assert session_of(alice, session)["__typename"] == "NotFound"

    made = put(alice, thread, {"sessionId": session, "goal": "a thread", "sessionTtlSeconds": 90})
    assert made["__typename"] == "Task", made
    assert (made["id"], made["sessionId"], made["goal"]) == (thread, session, "a thread")
    assert [(e["kind"], e["seq"]) for e in made["events"]] == [
        ("TASK_CREATED", 1),
        ("GRAPH_CHECKPOINT", 2),
    ]
    started = session_of(alice, session)
    lived = datetime.fromisoformat(started["expiresAt"]) - datetime.fromisoformat(
        started["lastActiveAt"]
    )
    assert lived.total_seconds() == 90


def test_new_thread_is_ignored_once_the_task_exists(alice: Api) -> None:
    """Guards the order of ``put_checkpoint``: the checkpoint is tried first, so a
    thread that exists stays where it is and ``newThread``'s session is not made
    (the same checkpoint again writes nothing)."""
    thread, session = f"thread-{uuid.uuid4()}", f"s-{uuid.uuid4()}"
    first = put(alice, thread, {"sessionId": session, "goal": "a thread"})
    again = put(alice, thread, {"sessionId": f"other-{session}", "goal": "another"})
    assert again["__typename"] == "Task", again
    assert (again["sessionId"], again["goal"]) == (session, "a thread")
    assert (again["version"], again["eventSeq"]) == (first["version"], first["eventSeq"])
    assert session_of(alice, f"other-{session}")["__typename"] == "NotFound"


@pytest.mark.parametrize(
    ("wrong", "field"),
    [
        ({"sessionId": "not an id!"}, "newThread.sessionId"),
        ({"goal": " "}, "newThread.goal"),
        ({"sessionTtlSeconds": 0}, "newThread.sessionTtlSeconds"),
    ],
)
def test_a_bad_new_thread_is_refused_before_anything_is_written(
    alice: Api, wrong: dict[str, Any], field: str
) -> None:
    """Guards ``NewThread.checked``: a value the thread's writes would refuse is
    InvalidInput on its ``newThread`` field, and no session or task is made. Seen
    failing with the check left out: the empty goal left its session behind."""
    thread, session = f"thread-{uuid.uuid4()}", f"s-{uuid.uuid4()}"
    refused = put(alice, thread, {"sessionId": session, "goal": "g", **wrong})
    assert (refused["code"], refused["field"]) == ("INVALID_INPUT", field), refused
    assert session_of(alice, session)["__typename"] == "NotFound"
    assert put(alice, thread, None)["code"] == "NOT_FOUND"


class CreatedApart(RunstateSaver):
    """A saver that sends no ``newThread``: a new thread is made as before it."""

    def _new_thread(self, thread_id: str) -> dict[str, Any] | None:
        return None


async def requests(saver: RunstateSaver, thread: str) -> Counter[str]:
    """The requests a 3-node run on a new thread sends, by operation."""
    sent: Counter[str] = Counter()
    call = saver._client._call

    async def counted(document: str, name: str, **variables: Any) -> dict[str, Any]:
        sent[name] += 1
        return await call(document, name, **variables)

    saver._client._call = counted  # type: ignore[method-assign]
    graph = counting("n0", "n1", "n2").compile(checkpointer=saver)
    await graph.ainvoke({"count": 0}, {"configurable": {"thread_id": thread}}, durability="sync")
    return sent


async def test_the_saver_makes_a_new_thread_with_its_first_checkpoint(
    served: tuple[Server, str],
) -> None:
    """Guards ``RunstateSaver._new_thread``: a run on a new thread sends its read
    and its five checkpoints, nothing else, and its task is the saver's (session,
    goal). Control: a saver sending no ``newThread`` sends a refused checkpoint, a
    startSession and a createTask more."""
    server, token = served
    thread = f"thread-{uuid.uuid4()}"
    async with RunstateSaver.from_url(server.url, token, session_id="graphs") as saver:
        assert await requests(saver, thread) == {"graphCheckpoint": 1, "putGraphCheckpoint": 5}
        task = await saver._client.task(thread)
    assert (task.session_id, task.goal) == ("graphs", f"LangGraph thread {thread}")
    async with CreatedApart.from_url(server.url, token, session_id="graphs") as apart:
        assert await requests(apart, f"thread-{uuid.uuid4()}") == {
            "graphCheckpoint": 1,
            "putGraphCheckpoint": 6,
            "startSession": 1,
            "createTask": 1,
        }
