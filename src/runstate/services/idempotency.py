"""Idempotency keys: a retried write answers as its first call did and writes nothing.

An agent whose request timed out cannot tell whether the server committed it. It
sends the same ``idempotencyKey`` again; the key is stored per caller with the
operation and a fingerprint of the input, in the same transaction as the write,
together with the answer (the service's view, as JSON). A repeat finds the row
and answers from it; the same key with other input is IdempotencyKeyReused. Two
calls with one key at the same moment are decided by the UNIQUE (user_id, key)
index: the transaction opens by inserting the row, so the second call waits for
the first (PostgreSQL), or for the write lock or in the same shared transaction
(SQLite, ``services.group``), fails on the index, and answers from the row the
first one committed. Never a check-then-insert.

Events of a write under a key are announced after the outer commit, so no
subscriber hears of a write that a failed key row rolled back.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError

from runstate.models import KEY_LENGTH, IdempotencyKey
from runstate.services import progress
from runstate.services.clock import utcnow
from runstate.services.errors import IdempotencyKeyReusedError, InvalidInputError
from runstate.services.group import GROUP
from runstate.services.retry import retried
from runstate.services.views import EventView, decode_as, to_json

V = TypeVar("V")


@dataclass(frozen=True)
class KeyedCall:
    """One mutation sent under an idempotency key."""

    user_id: str
    key: str
    operation: str
    fingerprint: str


def keyed(
    user_id: str, key: str | None, operation: str, payload: Mapping[str, Any]
) -> KeyedCall | None:
    """The keyed call for a mutation's input (without its key), or None without a key."""
    if key is None:
        return None
    if not 1 <= len(key) <= KEY_LENGTH:
        raise InvalidInputError("idempotencyKey", f"must be 1 to {KEY_LENGTH} characters")
    text = json.dumps([operation, payload], sort_keys=True, separators=(",", ":"), default=str)
    return KeyedCall(user_id, key, operation, hashlib.sha256(text.encode()).hexdigest())


async def once(
    call: KeyedCall | None, ttl_seconds: int, kind: Any, write: Callable[[], Awaitable[V]]
) -> V:
    """``write()`` at most once per key within ``ttl_seconds``; ``kind`` is the type of
    its answer, for answering a repeat from the stored JSON. A transaction the
    database aborted (a deadlock's victim) is tried again (``services.retry``).

    A write, once begun, is finished even when its caller is cancelled (its client
    left): cancelled halfway, a transaction on SQLite's single connection could be
    left open, and every later write then waited for it until stopped."""
    work = asyncio.ensure_future(retried(lambda: _once(call, ttl_seconds, kind, write)))
    work.add_done_callback(_retrieve)
    return await asyncio.shield(work)


def _retrieve(work: asyncio.Future[Any]) -> None:
    """Take a finished write's exception, so that one whose caller left is not
    reported as never retrieved (its caller has its own cancellation to handle)."""
    if not work.cancelled():
        work.exception()


async def _once(
    call: KeyedCall | None, ttl_seconds: int, kind: Any, write: Callable[[], Awaitable[V]]
) -> V:
    if call is None:
        return await write()
    stored = await _stored(call)
    if stored is not None:
        replayed: V = _replay(stored, call, kind)
        return replayed
    events: list[EventView] = []

    async def keyed_write(conn: BaseDBAsyncClient) -> V:
        # Writes first: SQLite takes its write lock at once; an expired row of this
        # key (not swept yet) makes way.
        now = utcnow()
        await (
            IdempotencyKey.filter(user_id=call.user_id, key=call.key, expires_at__lte=now)
            .using_db(conn)
            .delete()
        )
        row = await IdempotencyKey.create(
            user_id=call.user_id,
            key=call.key,
            operation=call.operation,
            fingerprint=call.fingerprint,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
            using_db=conn,
        )
        with progress.held() as held:
            result = await write()
        await IdempotencyKey.filter(id=row.id).using_db(conn).update(answer={"v": to_json(result)})
        events.extend(held)
        return result

    try:
        result = await GROUP.run(keyed_write)
    except IntegrityError:
        stored = await _stored(call)
        if stored is None:
            raise
        repeated: V = _replay(stored, call, kind)
        return repeated
    for event in events:
        progress.announce(event)
    return result


async def _stored(call: KeyedCall) -> IdempotencyKey | None:
    return await IdempotencyKey.get_or_none(
        user_id=call.user_id, key=call.key, expires_at__gt=utcnow()
    )


def _replay(row: IdempotencyKey, call: KeyedCall, kind: Any) -> Any:
    if (row.operation, row.fingerprint) != (call.operation, call.fingerprint):
        raise IdempotencyKeyReusedError(call.key)
    assert row.answer is not None, "a committed key row always holds its answer"
    return decode_as(kind, row.answer["v"])


async def sweep_keys() -> int:
    """Delete the keys past their retention; how many went."""
    return await IdempotencyKey.filter(expires_at__lte=utcnow()).delete()
