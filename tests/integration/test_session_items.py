"""A session's conversation items over HTTP, on SQLite and PostgreSQL: order,
newest-N reads, pop and clear, batches whole, idempotency, quotas, isolation,
and concurrent writers."""

from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api import start_session, update_session
from tests.support import (
    Api,
    Server,
    Subscriber,
    SubscriptionError,
    create_token,
    mutate,
    require_service,
)

PROBLEM = """
  __typename
  ... on Problem { code message }
  ... on NotFound { id }
  ... on InvalidInput { field }
  ... on SessionExpired { sessionId }
"""

ITEM = "seq item addedAt"
CHANGED = (
    "... on SessionItemsChanged { sessionId itemSeq messageCount added removed"
    f" popped {{ {ITEM} }} }}" + PROBLEM
)
PAGE = f"... on SessionItemPage {{ sessionId itemSeq messageCount hasMore items {{ {ITEM} }} }}"


def new_session(api: Api) -> str:
    session_id = f"conv-{uuid.uuid4().hex[:10]}"
    assert start_session(api, id=session_id)["__typename"] == "AgentSession"
    return session_id


def add(api: Api, session_id: str, items: list[Any], key: str | None = None) -> dict[str, Any]:
    return mutate(
        api,
        "addSessionItems",
        "AddSessionItemsInput",
        CHANGED,
        sessionId=session_id,
        items=items,
        idempotencyKey=key,
    )


def pop(api: Api, session_id: str, key: str | None = None) -> dict[str, Any]:
    return mutate(
        api, "popSessionItem", "PopSessionItemInput", CHANGED, sessionId=session_id,
        idempotencyKey=key,
    )  # fmt: skip


def clear(api: Api, session_id: str) -> dict[str, Any]:
    return mutate(api, "clearSessionItems", "ClearSessionItemsInput", CHANGED, sessionId=session_id)


def read(api: Api, session_id: str, **arguments: Any) -> dict[str, Any]:
    data = api(
        "query($s: ID!, $last: Int, $before: Int) { sessionItems(sessionId: $s, last: $last,"
        f" beforeSeq: $before) {{ {PAGE} {PROBLEM} }} }}",
        s=session_id,
        last=arguments.get("last"),
        before=arguments.get("before"),
    )
    result: dict[str, Any] = data["sessionItems"]
    return result


def every_item(api: Api, session_id: str) -> list[dict[str, Any]]:
    """The whole conversation, read page by page from the newest back."""
    found: list[dict[str, Any]] = []
    before = None
    while True:
        page = read(api, session_id, before=before)
        found[:0] = page["items"]
        if not page["hasMore"]:
            return found
        before = page["items"][0]["seq"]


def items_of(api: Api, session_id: str, **arguments: Any) -> list[Any]:
    return [i["item"] for i in read(api, session_id, **arguments)["items"]]


def session(api: Api, session_id: str) -> dict[str, Any]:
    data = api(
        "query($id: ID!) { session(id: $id) { ... on AgentSession { version messageCount } } }",
        id=session_id,
    )
    result: dict[str, Any] = data["session"]
    return result


def message(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {n}", "type": "message"}


def test_items_keep_their_order_and_read_newest_n_oldest_first(alice: Api) -> None:
    """Guards the read: all items in seq order; ``last: N`` the newest N, oldest
    first; ``last: 0`` none; ``beforeSeq`` pages back with hasMore."""
    s = new_session(alice)
    first = add(alice, s, [message(1), message(2)])
    assert (first["itemSeq"], first["added"], first["messageCount"]) == (2, 2, 2)
    assert add(alice, s, [message(3)])["itemSeq"] == 3
    page = read(alice, s)
    assert [i["seq"] for i in page["items"]] == [1, 2, 3]
    assert [i["item"] for i in page["items"]] == [message(1), message(2), message(3)]
    assert (page["itemSeq"], page["messageCount"], page["hasMore"]) == (3, 3, False)
    assert items_of(alice, s, last=2) == [message(2), message(3)]
    assert items_of(alice, s, last=0) == []
    older = read(alice, s, last=1, before=3)
    assert ([i["seq"] for i in older["items"]], older["hasMore"]) == ([2], True)
    assert session(alice, s) == {"version": 3, "messageCount": 3}


def test_pop_answers_exactly_what_was_stored_and_removes_the_newest(alice: Api) -> None:
    """Guards pop: the newest item by the server's order comes back byte for byte
    (hostile and non-ASCII text, numbers, nesting, key order) and is gone; popping
    an empty conversation answers null and writes nothing."""
    s = new_session(alice)
    odd: dict[str, Any] = {
        "z": "last key first", "content": "héllo 🌍 \t \\\" '; DROP TABLE x; --",
        "n": [1, 2.5, -0.0, 10**15, True, None, {}], "a": {"nested": [[[]]]},
    }  # fmt: skip
    add(alice, s, [message(1), odd])
    popped = pop(alice, s)
    assert popped["popped"]["seq"] == 2
    assert json.dumps(popped["popped"]["item"]) == json.dumps(odd)
    assert (popped["messageCount"], popped["removed"], popped["itemSeq"]) == (1, 1, 3)
    assert items_of(alice, s) == [message(1)]
    assert pop(alice, s)["popped"]["item"] == message(1)
    before = session(alice, s)
    empty = pop(alice, s)
    assert (empty["popped"], empty["removed"], empty["messageCount"]) == (None, 0, 0)
    assert session(alice, s) == before


def test_clear_removes_every_item_and_the_count_follows(alice: Api) -> None:
    """Guards clear and messageCount: the count is the items' count after adds,
    pops and a clear; seqs go on from the log's position after a clear."""
    s = new_session(alice)
    add(alice, s, [message(n) for n in range(5)])
    pop(alice, s)
    assert session(alice, s)["messageCount"] == 4
    cleared = clear(alice, s)
    assert (cleared["removed"], cleared["messageCount"]) == (4, 0)
    assert items_of(alice, s) == []
    again = add(alice, s, [message(9)])
    assert (again["itemSeq"], again["messageCount"]) == (cleared["itemSeq"] + 1, 1)
    assert [i["seq"] for i in read(alice, s)["items"]] == [again["itemSeq"]]


def test_a_batch_with_one_bad_item_stores_nothing(alice: Api) -> None:
    """Guards atomic batches and the JSON limits: an item nested past the depth
    limit, one past the payload limit, an empty batch, each InvalidInput naming the
    item; nothing stored. (A null item is refused by its type, ``[JSON!]!``.)"""
    s = new_session(alice)
    add(alice, s, [message(0)])
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    refusals = [
        ([message(1), deep], "items[1]"),
        ([message(1), "x" * 70_000], "items[1]"),
        ([], "items"),
    ]
    for items, field in refusals:
        refused = add(alice, s, items)
        assert (refused["__typename"], refused["field"]) == ("InvalidInput", field)
    assert items_of(alice, s) == [message(0)]
    assert session(alice, s) == {"version": 2, "messageCount": 1}


def test_a_retried_add_stores_its_items_once(alice: Api) -> None:
    """Guards idempotency: the same key sent again answers as the first call and
    stores nothing more. Control: the same retry without a key stores them twice."""
    s = new_session(alice)
    key = f"k-{uuid.uuid4().hex}"
    first = add(alice, s, [message(1), message(2)], key)
    assert add(alice, s, [message(1), message(2)], key) == first
    assert items_of(alice, s) == [message(1), message(2)]
    add(alice, s, [message(3)])
    add(alice, s, [message(3)])
    assert items_of(alice, s) == [message(1), message(2), message(3), message(3)]


def test_items_are_the_callers_own(alice: Api, bob: Api) -> None:
    """Guards isolation: another user's session answers NotFound, read or written,
    exactly as an unknown id does, and nothing of it changes."""
    s = new_session(alice)
    add(alice, s, [message(1)])
    assert read(bob, s)["__typename"] == "NotFound"
    assert add(bob, s, [message(2)])["__typename"] == "NotFound"
    assert pop(bob, s)["__typename"] == "NotFound"
    assert clear(bob, s)["__typename"] == "NotFound"
    unknown = read(bob, "no-such-session")
    assert read(bob, s) == {k: str(v).replace("no-such-session", s) for k, v in unknown.items()}
    assert items_of(alice, s) == [message(1)]


def test_items_count_toward_the_quota_until_removed(server: Server) -> None:
    """Guards the byte quota: items raise the caller's usage by what they hold, a
    pop, a clear and deleting the session give it back, and changing the session's
    metadata keeps the items' share (it once set the session's count to its
    metadata's alone). Measured on a user of its own, so the figures are exact."""
    with Api(server.url, create_token(server.database_url, f"q-{uuid.uuid4().hex[:8]}")) as api:
        s = new_session(api)

        def usage() -> int:
            return int(api("{ usage { storedBytes } }")["usage"]["storedBytes"])

        empty = usage()
        add(api, s, [message(1), message(2)])
        each = 100 + len(json.dumps(message(1), separators=(",", ":")))
        assert usage() == empty + 2 * each
        pop(api, s)
        assert usage() == empty + each
        clear(api, s)
        assert usage() == empty
        add(api, s, [message(1), message(2)])
        version = session(api, s)["version"]
        assert update_session(api, s, version, metadata={"m": "x" * 50})["version"] == version + 1
        assert usage() == empty + 2 * each + len('{"m":""}') + 50
        api("mutation($id: ID!) { deleteSession(input: {id: $id}) { __typename } }", id=s)
        assert usage() == 0  # the items' bytes left with their session


def test_concurrent_writers_store_every_item_once_in_whole_batches(alice: Api) -> None:
    """Guards the server's seq: eight writers adding batches of three to one session
    at once; every item is stored exactly once, each batch's seqs are consecutive,
    and two readers agree on one order. (The control, a seq read before the write,
    is ``test_a_seq_read_before_the_write_loses_items``.)"""
    s = new_session(alice)

    def writer(w: int) -> list[int]:
        seqs = []
        for b in range(5):
            batch = [{"w": w, "b": b, "i": i} for i in range(3)]
            done = add(alice, s, batch)
            assert done["__typename"] == "SessionItemsChanged", done
            seqs.append(done["itemSeq"])
        return seqs

    with ThreadPoolExecutor(8) as pool:
        ends = [seq for seqs in pool.map(writer, range(8)) for seq in seqs]
    stored = every_item(alice, s)
    assert len(stored) == 8 * 5 * 3
    assert [i["seq"] for i in stored] == list(range(1, 121))
    by_seq = {i["seq"]: i["item"] for i in stored}
    for end in ends:
        batch = [by_seq[end - 2], by_seq[end - 1], by_seq[end]]
        assert [x["i"] for x in batch] == [0, 1, 2]
        assert len({(x["w"], x["b"]) for x in batch}) == 1
    assert every_item(alice, s) == stored


CONVERSATION = f"""subscription($s: ID!, $after: Int) {{ sessionConversation(sessionId: $s,
  afterSeq: $after) {{ kind itemSeq messageCount items {{ {ITEM} }} }} }}"""


def event(data: dict[str, Any]) -> tuple[str, int, list[Any]]:
    got = data["sessionConversation"]
    return got["kind"], got["itemSeq"], [i["item"] for i in got["items"]]


async def test_a_second_device_sees_the_conversation_as_it_grows(
    server: Server, alice: Api
) -> None:
    """Guards the conversation stream: a SNAPSHOT, then each batch as ITEMS_ADDED
    in order, a pop and a clear as a SNAPSHOT of what is left; resumed with the
    itemSeq it held, only what came after; a long conversation in pages."""
    s = new_session(alice)
    add(alice, s, [message(1)])
    async with Subscriber(server.url, alice.token, CONVERSATION, {"s": s}) as device:
        assert event(await device.next()) == ("SNAPSHOT", 1, [message(1)])
        await asyncio.to_thread(add, alice, s, [message(2), message(3)])
        assert event(await device.next()) == ("ITEMS_ADDED", 3, [message(2), message(3)])
        await asyncio.to_thread(pop, alice, s)
        assert event(await device.next()) == ("SNAPSHOT", 4, [message(1), message(2)])
        await asyncio.to_thread(clear, alice, s)
        assert event(await device.next()) == ("SNAPSHOT", 5, [])
    await asyncio.to_thread(add, alice, s, [message(n) for n in range(150)])
    async with Subscriber(server.url, alice.token, CONVERSATION, {"s": s, "after": 5}) as later:
        first, second = event(await later.next()), event(await later.next())
        assert (first[0], first[1], first[2]) == (
            "ITEMS_ADDED",
            105,
            [message(n) for n in range(100)],
        )
        assert second == ("ITEMS_ADDED", 155, [message(n) for n in range(100, 150)])
    async with Subscriber(server.url, alice.token, CONVERSATION, {"s": s, "after": 155}) as idle:
        with pytest.raises(TimeoutError):
            await idle.next(1)  # nothing after the position it holds


async def test_the_stream_of_another_users_session_is_not_found(server: Server, bob: Api) -> None:
    """Guards the stream's isolation: someone else's session answers NotFound before
    anything is sent, as an unknown one does."""
    with Api(server.url, create_token(server.database_url, "carol")) as carol:
        s = new_session(carol)
    async with Subscriber(server.url, bob.token, CONVERSATION, {"s": s}) as spy:
        with pytest.raises(SubscriptionError, match="not found"):
            await spy.next()


async def test_a_watcher_on_another_process_hears_each_add_by_redis(tmp_path: Path) -> None:
    """Guards the wake-up across processes: head checks every two minutes, so the
    items can only reach the other process's watcher through Redis. Control: with
    in-process brokers the same watcher hears nothing within 3 s."""
    require_service("Redis", "127.0.0.1", 6379)
    for redis in (True, False):
        url = f"sqlite://{tmp_path / f'{redis}.db'}"
        token = create_token(url, "alice")
        env = {"RUNSTATE_CATCH_UP_SECONDS": "120"}
        if redis:
            env["RUNSTATE_REDIS_URL"] = "redis://127.0.0.1:6379/0"
        with (
            Server(url, tmp_path / f"w{redis}.log", **env) as writer,
            Server(url, tmp_path / f"r{redis}.log", **env) as reader,
            Api(writer.url, token) as api,
        ):
            s = new_session(api)
            async with Subscriber(reader.url, token, CONVERSATION, {"s": s}) as device:
                assert event(await device.next()) == ("SNAPSHOT", 0, [])
                await asyncio.to_thread(add, api, s, [message(1)])
                if redis:
                    assert event(await device.next()) == ("ITEMS_ADDED", 1, [message(1)])
                else:
                    with pytest.raises(TimeoutError):
                        await device.next(3)
