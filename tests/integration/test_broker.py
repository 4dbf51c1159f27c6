"""One contract suite for every broker backend: in-process and Redis."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from runstate.pubsub import RESYNC, Broker, MemoryBroker
from runstate.pubsub.redis import RedisBroker
from tests.support import RedisServer, require_service, wait_until

REDIS_URL = "redis://127.0.0.1:6379/0"

MakeBroker = Callable[[], Awaitable[Broker]]


@pytest.fixture(params=["memory", "redis"])
async def make_broker(request: pytest.FixtureRequest) -> AsyncIterator[MakeBroker]:
    """Brokers of one backend that share channels, as server processes would."""
    if request.param == "redis":
        require_service("Redis", "127.0.0.1", 6379)
    prefix = f"test:{uuid.uuid4().hex}:"
    made: list[Broker] = []
    shared = MemoryBroker()

    async def make() -> Broker:
        broker = shared if request.param == "memory" else RedisBroker(REDIS_URL, prefix)
        await broker.start()
        made.append(broker)
        return broker

    yield make
    for broker in made:
        await broker.close()


async def test_messages_arrive_in_order(make_broker: MakeBroker) -> None:
    sender, receiver = await make_broker(), await make_broker()
    async with receiver.subscription(["a"]) as inbox:
        for i in range(200):
            await sender.publish("a", str(i).encode())
        got = [await inbox.next(5) for _ in range(200)]
    assert got == [str(i).encode() for i in range(200)]


async def test_channels_are_separate_and_unsubscribe_stops_delivery(
    make_broker: MakeBroker,
) -> None:
    sender, receiver = await make_broker(), await make_broker()
    first = await receiver.subscribe(["a"])
    second = await receiver.subscribe(["b"])
    await sender.publish("b", b"for b")
    assert await second.next(5) == b"for b"
    await receiver.unsubscribe(second)
    await sender.publish("b", b"lost")
    await sender.publish("a", b"for a")
    assert await first.next(5) == b"for a"
    assert len(second) == 0
    assert await first.next(0.2) is None
    await receiver.unsubscribe(first)
    assert receiver.channels == frozenset()


async def test_every_subscriber_of_a_channel_gets_each_message(make_broker: MakeBroker) -> None:
    sender, receiver = await make_broker(), await make_broker()
    async with receiver.subscription(["a"]) as x, receiver.subscription(["a"]) as y:
        await sender.publish("a", b"m")
        assert (await x.next(5), await y.next(5)) == (b"m", b"m")


async def test_a_full_inbox_drops_the_newest_and_asks_for_a_resync(make_broker: MakeBroker) -> None:
    sender, receiver = await make_broker(), await make_broker()
    async with (
        receiver.subscription(["a"], inbox_size=10) as slow,
        receiver.subscription(["a"]) as other,
    ):
        for i in range(25):
            await sender.publish("a", str(i).encode())
        # Once the subscriber with room has all 25, the full one has seen them too.
        received = [await other.next(5) for _ in range(25)]
        assert received == [str(i).encode() for i in range(25)]
        assert len(slow) == 10
        assert slow.dropped == 15
        assert await slow.next(5) is RESYNC
        assert [await slow.next(5) for _ in range(10)] == [str(i).encode() for i in range(10)]
        assert await slow.next(0.1) is None


async def test_quiet_inbox_times_out_with_none(make_broker: MakeBroker) -> None:
    broker = await make_broker()
    async with broker.subscription(["quiet"]) as inbox:
        assert await inbox.next(0.05) is None


async def test_redis_connection_killed_asks_every_subscriber_to_resync(tmp_path: Path) -> None:
    """redis-py reconnects by itself after CLIENT KILL; the broker still notices, because
    messages published in between are lost for good."""
    redis = RedisServer(tmp_path / "redis.log").start()
    broker = RedisBroker(redis.url, "kill:")
    await broker.start()
    try:
        async with broker.subscription(["a"]) as inbox:
            assert redis.command("CLIENT KILL TYPE pubsub").startswith(":1")
            assert await inbox.next(10) is RESYNC
            await asyncio.to_thread(
                wait_until, lambda: redis.subscribers("kill:a") == 1, 10, "resubscription"
            )
            assert redis.command("PUBLISH kill:a after").startswith(":1")  # through Redis
            message = await inbox.next(5)
            while message is RESYNC:  # one per reconnect
                message = await inbox.next(5)
            assert message == b"after"
        assert broker.reconnects >= 1
    finally:
        await broker.close()
        redis.stop()


async def test_subscribing_while_redis_is_down_recovers_when_it_returns(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path / "redis.log").start()
    redis.stop()
    broker = RedisBroker(redis.url, "down:")
    await broker.start()
    try:
        async with broker.subscription(["a"]) as inbox:
            assert await inbox.next(0.1) is None
            redis.start()
            await asyncio.to_thread(
                wait_until, lambda: redis.subscribers("down:a") == 1, 15, "the subscription"
            )
            assert await inbox.next(5) is RESYNC
            assert redis.command("PUBLISH down:a back").startswith(":1")  # through Redis
            assert await inbox.next(5) == b"back"
    finally:
        await broker.close()
        redis.stop()


async def test_subscribers_that_leave_while_subscribing_leave_nothing_behind(
    make_broker: MakeBroker,
) -> None:
    """Guards the local side of the leak: 200 subscriptions cancelled at random
    moments, many while Redis is still confirming their SUBSCRIBE (a client that
    left at once), all end, and no inbox is left. Without the cleanup in
    ``Broker.subscribe`` inboxes stayed registered; without re-raising the
    cancellation that redis-py turns into a TimeoutError, some subscribers never
    ended at all."""
    broker = await make_broker()
    await leave_while_subscribing(broker, [f"leak-{i}" for i in range(10)])
    assert broker.channels == frozenset()


async def leave_while_subscribing(broker: Broker, channels: list[str]) -> None:
    """200 subscribers of ``channels``, each cancelled at a random moment, many while
    Redis is still confirming their SUBSCRIBE; fails unless every one of them ends."""
    import random

    async def watch(channel: str) -> None:
        async with broker.subscription([channel]):
            await asyncio.Event().wait()

    tasks = [asyncio.create_task(watch(channels[i % len(channels)])) for i in range(200)]
    for task in tasks:
        await asyncio.sleep(random.choice([0, 0, 0.0005, 0.001]))
        task.cancel()
    _, pending = await asyncio.wait(tasks, timeout=20)
    assert not pending, f"{len(pending)} subscribers never ended"


async def test_subscribers_that_leave_while_subscribing_leave_no_redis_subscription() -> None:
    """Guards the Redis side of the leak (``RedisBroker._reconcile``): after 200
    subscriptions cancelled at random moments while subscribing, Redis itself
    counts no subscriber on any of their channels (PUBSUB NUMSUB) once the broker
    has settled. With SUBSCRIBE sent from the cancelled caller, as before, Redis
    kept some subscribed for good."""
    from redis.asyncio import Redis

    require_service("Redis", "127.0.0.1", 6379)
    prefix = f"test:{uuid.uuid4().hex}:"
    broker = RedisBroker(REDIS_URL, prefix)
    await broker.start()
    channels = [f"leak-{i}" for i in range(10)]
    client = Redis.from_url(REDIS_URL)
    try:
        await leave_while_subscribing(broker, channels)

        async def subscribed() -> int:
            counts = await client.pubsub_numsub(*(prefix + c for c in channels))
            return sum(int(n) for _, n in counts)

        async with asyncio.timeout(10):
            while await subscribed():  # noqa: ASYNC110 - a poll, with a deadline, of Redis
                await asyncio.sleep(0.05)
    finally:
        await client.aclose()
        await broker.close()


async def test_a_channel_let_go_as_the_connection_comes_back_can_be_taken_again() -> None:
    """Guards ``RedisBroker._reconcile`` making the connection before it reads
    redis-py's state: the pub/sub connection has dropped (its reader is held off,
    as in its backoff after a failed read) and a channel's last subscriber leaves.
    Made by the UNSUBSCRIBE itself, the reconnect resubscribed the channel and
    cleared the UNSUBSCRIBE's pending mark, so its reply left the channel in
    redis-py's ``channels`` while Redis had let it go: a new subscriber of the
    channel then sent nothing, and heard nothing for good."""
    from redis.asyncio import Redis

    require_service("Redis", "127.0.0.1", 6379)
    prefix = f"test:{uuid.uuid4().hex}:"
    broker = RedisBroker(REDIS_URL, prefix)
    await broker.start()
    client = Redis.from_url(REDIS_URL)
    try:
        async with broker.subscription(["kept"]):
            leaving = await broker.subscribe(["a"])
            assert broker._reader is not None
            assert broker._pubsub.connection is not None
            broker._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await broker._reader
            await broker._pubsub.connection.disconnect()
            await broker.unsubscribe(leaving)
            await broker.start()  # the reader again
            async with broker.subscription(["a"]) as inbox:
                [(_, count)] = await client.pubsub_numsub(prefix + "a")
                assert count == 1
                await client.publish(prefix + "a", b"heard")  # through Redis
                message = await inbox.next(5)
                while message is RESYNC:  # one per reconnect
                    message = await inbox.next(5)
                assert message == b"heard"
    finally:
        await client.aclose()
        await broker.close()


async def test_the_publishing_process_delivers_at_once_and_once(tmp_path: Path) -> None:
    """Guards local-first delivery and its echo filter (``Broker.publish``,
    ``RedisBroker._echoed``). Redis holds every PUBLISH (CLIENT PAUSE WRITE): a
    subscriber in the publishing process has the message all the same, while one
    in another process has nothing yet. Let go, Redis brings it to the other
    process, and sends the copy back to the publisher's, which drops it: the next
    message its subscriber gets is the other process's next one. Without the local
    dispatch the first subscriber waits on Redis too; without the filter it gets
    the message twice."""
    redis = RedisServer(tmp_path / "redis.log").start()
    here, there = RedisBroker(redis.url, "local:"), RedisBroker(redis.url, "local:")
    await here.start()
    await there.start()
    try:
        async with here.subscription(["a"]) as mine, there.subscription(["a"]) as theirs:
            assert redis.command("CLIENT PAUSE 20000 WRITE").startswith("+OK")
            publishing = asyncio.create_task(here.publish("a", b"first"))
            assert await mine.next(5) == b"first"
            assert not theirs._ready.is_set()  # Redis holds it: nothing for the other process
            assert redis.command("CLIENT UNPAUSE").startswith("+OK")
            await publishing
            assert await theirs.next(5) == b"first"
            await there.publish("a", b"second")
            assert await mine.next(5) == b"second"  # not the copy of "first"
            assert await theirs.next(5) == b"second"
            assert here._echoes == {}  # nothing kept once the copies are back
    finally:
        await here.close()
        await there.close()
        redis.stop()


async def test_a_publish_is_on_the_wire_within_its_first_step() -> None:
    """Guards the publishing connection without a socket timeout
    (``RedisBroker._publishing``): with one, redis-py writes the PUBLISH from a
    task of its own (``wait_for``), a loop turn later, so on the writer's server
    the rest of the write's answer was made first. Here the loop gives the publish
    one step, then stands still while a plain socket subscribed to the channel
    waits for the message: it comes only if that step wrote it."""
    require_service("Redis", "127.0.0.1", 6379)
    prefix = f"test:{uuid.uuid4().hex}:"
    broker = RedisBroker(REDIS_URL, prefix)
    await broker.start()
    try:
        await broker.publish("warm", b"up")  # the connection made, as in a server
        with socket.create_connection(("127.0.0.1", 6379), timeout=5) as listener:
            listener.sendall(f"SUBSCRIBE {prefix}a\r\n".encode())
            assert b"subscribe" in listener.recv(4096)
            publishing = asyncio.create_task(broker.publish("a", b"sent"))
            await asyncio.sleep(0)  # one loop turn: the publish's first step, and no more
            assert b"sent" in listener.recv(4096)  # the loop stands still meanwhile
            await publishing
    finally:
        await broker.close()
