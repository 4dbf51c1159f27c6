"""Live progress over WebSocket: snapshots, replay, gap-free order, isolation, auth."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.integration.test_api import create_task, new_task, start_session, step
from tests.support import GRAPHQL_WS, Api, Server, Subscriber, SubscriptionError

PROGRESS = """
subscription($id: ID!, $after: Int) {
  taskProgress(taskId: $id, afterSeq: $after) {
    seq kind taskVersion stepIndex status steps { index status } task { status currentStep }
  }
}"""

ACTIVITY = """
subscription($id: ID!) { sessionActivity(sessionId: $id) { taskId seq kind } }"""


def seqs(events: list[dict[str, Any]], field: str = "taskProgress") -> list[int]:
    return [e[field]["seq"] for e in events]


def completed(event: dict[str, Any]) -> bool:
    return bool(event["taskProgress"]["status"] == "COMPLETED")


def drive(api: Api, task_id: str, steps: int, version: int = 1) -> int:
    """Start and complete each step in turn; return the final version."""
    for index in range(steps):
        for name, input_type in (
            ("startStep", "StepRefInput"),
            ("completeStep", "CompleteStepInput"),
        ):
            result = step(
                api, name, input_type, taskId=task_id, stepIndex=index, expectedVersion=version
            )
            assert result["__typename"] == "Task", result
            version = result["version"]
    return version


async def test_two_watchers_see_the_same_gap_free_steps(server: Server, alice: Api) -> None:
    task = new_task(alice, steps=10)
    variables = {"id": task["id"]}
    async with (
        Subscriber(server.url, alice.token, PROGRESS, variables) as one,
        Subscriber(server.url, alice.token, PROGRESS, variables) as two,
    ):
        first = [await one.next(), await two.next()]
        assert [e["taskProgress"]["kind"] for e in first] == ["SNAPSHOT", "SNAPSHOT"]
        await asyncio.to_thread(drive, alice, task["id"], 10)
        a = await one.until(completed)
        b = await two.until(completed)
    assert seqs(a) == seqs(b) == list(range(1, 22))
    assert a == b
    assert a[-1]["taskProgress"] == {
        "seq": 21,
        "kind": "STEP_SUCCEEDED",
        "taskVersion": 21,
        "stepIndex": 9,
        "status": "COMPLETED",
        "steps": [{"index": 9, "status": "SUCCESS"}],
        "task": None,
    }


async def test_resubscribing_after_a_seq_replays_exactly_the_missed_events(
    server: Server, alice: Api
) -> None:
    task = new_task(alice, steps=3)
    drive(alice, task["id"], 2)
    async with Subscriber(
        server.url, alice.token, PROGRESS, {"id": task["id"], "after": 2}
    ) as late:
        replayed = [await late.next() for _ in range(3)]
        assert seqs(replayed) == [3, 4, 5]
        assert [e["taskProgress"]["kind"] for e in replayed] == [
            "STEP_SUCCEEDED",
            "STEP_STARTED",
            "STEP_SUCCEEDED",
        ]
        await asyncio.to_thread(drive, alice, task["id"], 0)
        step(alice, "startStep", "StepRefInput", taskId=task["id"], stepIndex=2, expectedVersion=5)
        live = await late.next()
    assert live["taskProgress"]["seq"] == 6


async def test_a_cursor_past_the_head_gets_a_snapshot_then_live_events(
    server: Server, alice: Api
) -> None:
    """Guards the resync: an afterSeq the task never reached (a cursor kept from
    before a database reset) answers a SNAPSHOT of the task as it stands, then
    the next live event; never silence. A negative one is a request error."""
    task = new_task(alice, steps=2)
    async with Subscriber(
        server.url, alice.token, PROGRESS, {"id": task["id"], "after": 100}
    ) as ahead:
        first = (await ahead.next())["taskProgress"]
        assert (first["kind"], first["seq"], first["task"]["status"]) == ("SNAPSHOT", 1, "PLANNED")
        step(alice, "startStep", "StepRefInput", taskId=task["id"], stepIndex=0, expectedVersion=1)
        live = (await ahead.next())["taskProgress"]
    assert (live["kind"], live["seq"]) == ("STEP_STARTED", 2)
    async with Subscriber(
        server.url, alice.token, PROGRESS, {"id": task["id"], "after": -1}
    ) as negative:
        with pytest.raises(SubscriptionError, match="afterSeq"):
            await negative.next()


async def until_live(watch: Subscriber, api: Api, task_id: str) -> None:
    """Until ``watch``'s sessionActivity delivers: it follows events from when the
    server has subscribed, which the client cannot see, so a tool report on
    ``task_id`` is sent each round until one arrives (a poll with a deadline)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        api(
            'mutation($t: ID!) { recordToolCall(input: {taskId: $t, toolName: "ping",'
            " outcome: CALLING}) { __typename } }",
            t=task_id,
        )
        try:
            await watch.next(wait=0.5)
        except TimeoutError:
            continue
        while True:  # the reports sent before it, if they did arrive
            try:
                await watch.next(wait=0.5)
            except TimeoutError:
                return
    raise AssertionError("sessionActivity delivered nothing for 10 s")


async def test_session_activity_includes_tasks_created_later(server: Server, alice: Api) -> None:
    session = start_session(alice)
    before = create_task(alice, session["id"], steps=1)
    async with Subscriber(server.url, alice.token, ACTIVITY, {"id": session["id"]}) as watch:
        await until_live(watch, alice, before["id"])
        started = step(
            alice, "startStep", "StepRefInput", taskId=before["id"], stepIndex=0, expectedVersion=1
        )
        later = create_task(alice, session["id"], steps=1)
        step(alice, "startStep", "StepRefInput", taskId=later["id"], stepIndex=0, expectedVersion=1)
        got = [(await watch.next())["sessionActivity"] for _ in range(3)]
    assert got == [
        {"taskId": before["id"], "seq": started["eventSeq"], "kind": "STEP_STARTED"},
        {"taskId": later["id"], "seq": 1, "kind": "TASK_CREATED"},
        {"taskId": later["id"], "seq": 2, "kind": "STEP_STARTED"},
    ]


async def test_someone_elses_task_fails_like_an_unknown_id(
    server: Server, alice: Api, bob: Api
) -> None:
    task = new_task(alice)
    answers = []
    for task_id in (task["id"], "never-made"):
        async with Subscriber(server.url, bob.token, PROGRESS, {"id": task_id}) as spy:
            with pytest.raises(SubscriptionError) as refused:
                await spy.next()
        answers.append(str(refused.value).replace(task_id, "<id>"))
    assert answers[0] == answers[1]
    assert "not found" in answers[0]


async def test_another_users_watch_of_a_session_receives_nothing(
    server: Server, alice: Api, bob: Api
) -> None:
    session = start_session(alice)
    async with Subscriber(server.url, bob.token, ACTIVITY, {"id": session["id"]}) as spy:
        with pytest.raises(SubscriptionError, match="not found"):
            await spy.next()


@pytest.mark.parametrize("payload", [{}, {"authorization": "Bearer rs_nope"}, {"authorization": 7}])
async def test_websocket_without_a_valid_token_is_closed_4403(
    server: Server, payload: dict[str, Any]
) -> None:
    async with connect(
        server.url.replace("http://", "ws://") + "/graphql",
        subprotocols=GRAPHQL_WS,
    ) as socket:
        await socket.send(json.dumps({"type": "connection_init", "payload": payload}))
        await socket.wait_closed()
        assert socket.close_code == 4403


async def test_a_stalled_watcher_does_not_hold_up_the_others(server: Server, alice: Api) -> None:
    """One client that stops reading; the other still gets every event, and the stalled
    one, once it reads again, is caught up from the database with no hole."""
    task = new_task(alice, steps=40)
    variables = {"id": task["id"]}
    big = PROGRESS.replace("steps { index status }", "steps { action input output }")
    async with (
        Subscriber(server.url, alice.token, big, variables) as stalled,
        Subscriber(server.url, alice.token, PROGRESS, variables) as reader,
    ):
        await stalled.next()
        await reader.next()
        await asyncio.to_thread(drive, alice, task["id"], 40)
        fast = await reader.until(completed)
        assert seqs(fast) == list(range(1, 82))
        slow = await stalled.until(completed)
    assert seqs(slow) == list(range(1, 82))


async def test_an_oversized_websocket_frame_closes_the_socket(server: Server) -> None:
    """The server closes with 1009 (message too big). Frames are not compressed, so
    it may do so while the client is still sending: then the send itself fails,
    with the server's close frame received."""
    async with connect(
        server.url.replace("http://", "ws://") + "/graphql", subprotocols=GRAPHQL_WS
    ) as socket:
        huge = {"authorization": "x" * 2_000_000}
        received = None
        try:
            await socket.send(json.dumps({"type": "connection_init", "payload": huge}))
            await socket.wait_closed()
            received = socket.close_code
        except ConnectionClosed as closed:
            received = None if closed.rcvd is None else closed.rcvd.code
        assert received == 1009  # message too big


async def test_graphiql_style_headers_in_connection_init_are_accepted(
    server: Server, alice: Api
) -> None:
    """GraphiQL sends its Headers pane as the connection_init payload."""
    task = new_task(alice)
    async with connect(
        server.url.replace("http://", "ws://") + "/graphql", subprotocols=GRAPHQL_WS
    ) as socket:
        headers = {"Authorization": f"Bearer {alice.token}"}
        await socket.send(json.dumps({"type": "connection_init", "payload": headers}))
        assert json.loads(await socket.recv())["type"] == "connection_ack"
        subscribe = {"query": PROGRESS, "variables": {"id": task["id"]}}
        await socket.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
        first = json.loads(await socket.recv())
    assert first["payload"]["data"]["taskProgress"]["kind"] == "SNAPSHOT"
