"""Idempotency keys: a retried write answers as its first call did and writes nothing.

An agent whose request timed out cannot tell whether the server committed it. It
sends the same ``idempotencyKey`` again; the key is stored per caller with the
operation and a fingerprint of the input, in the same transaction as the write,
together with the answer (the service's view, as JSON). Every keyed call opens
its transaction by inserting the key's row (``INSERT ... ON CONFLICT DO
NOTHING``): a repeat finds the row there, rolls back and answers from it; the
same key with other input is IdempotencyKeyReused. Two calls with one key at the
same moment are decided by the UNIQUE (user_id, key) index: the second waits for
the first (PostgreSQL), or for the write lock or in the same shared transaction
(SQLite, ``services.write.group_commit``), finds the row, and answers from the
row the first one committed. Never a check-then-insert.

The write runs inside the key's transaction, and its events come back with its
answer after that commit (``Written``), so no subscriber hears of a write that a
failed key row rolled back. A repeat answers with no events: it wrote nothing.

A task's answer is stored as a reference, the task and the seq the write left it
at (and its stored bytes then): a repeat answers ``taskAt`` of that seq, which is
the task as it stood right after the write. So a key holds a few dozen bytes
whatever the task holds; storing the task itself (a 10,000-character goal in every
key) kept bytes outside the quota. Other answers are stored as they are; those
that carry what clients stored (a session with its metadata, a tool state with
its result) count toward the user's quota (``quota``) from the write that keeps
them until the sweep deletes them: a user's keyed ``updateSession`` calls with
64 KiB of metadata once kept 64 KiB each outside it. A lease's answer holds ids
and times only, and is not counted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError
from tortoise.queryset import QuerySet
from tortoise.transactions import in_transaction

from runstate.models import KEY_LENGTH, IdempotencyKey, Task
from runstate.services.domain import quota, validation
from runstate.services.domain.errors import (
    IdempotencyKeyReusedError,
    InvalidInputError,
    NotFoundError,
)
from runstate.services.domain.views import (
    LockView,
    ResumePlanView,
    TaskView,
    Written,
    decode_as,
    to_json,
)
from runstate.services.read.convert import task_view
from runstate.services.read.history import task_at
from runstate.services.write.house import House
from runstate.services.write.retry import retried
from runstate.storage import sql
from runstate.storage.clock import utcnow

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
    house: House,
    call: KeyedCall | None,
    ttl_seconds: int,
    kind: Any,
    write: Callable[[], Awaitable[Written[V]]],
) -> V:
    """``write()`` at most once per key within ``ttl_seconds``; ``kind`` is the type of
    its answer, for answering a repeat from the stored JSON. A transaction the
    database aborted (a deadlock's victim) is tried again (``services.write.retry``).
    This is a mutation's outermost transaction: once it has committed, the write's
    events are published through the house's publisher (a repeat has none).

    A write, once begun, is finished even when its caller is cancelled (its client
    left): cancelled halfway, a transaction on SQLite's single connection could be
    left open, and every later write then waited for it until stopped. Its events
    are published then too: its watchers would otherwise wait for a head check."""
    work = asyncio.ensure_future(retried(lambda: _once(house, call, ttl_seconds, kind, write)))
    work.add_done_callback(partial(_published, house))
    return (await asyncio.shield(work)).value


def _published(house: House, work: asyncio.Future[Written[Any]]) -> None:
    """Publish a finished write's events; take a failed one's exception, so that one
    whose caller left is not reported as never retrieved (its caller has its own
    cancellation to handle)."""
    if not work.cancelled() and work.exception() is None:
        written = work.result()
        house.publish(written.events, written.wakes)


async def _once(
    house: House,
    call: KeyedCall | None,
    ttl_seconds: int,
    kind: Any,
    write: Callable[[], Awaitable[Written[V]]],
) -> Written[V]:
    if call is None:
        return await write()

    async def keyed_write(conn: BaseDBAsyncClient) -> Written[V]:
        key_id = await _claim(conn, call, ttl_seconds)
        written = await write()
        answer = _stored_answer(written.value)
        counted = _counted(call, answer)
        kept = sql.update_row(IdempotencyKey, key_id, {"answer": answer, "stored_bytes": counted})
        await quota.charge(
            conn, house.limits, call.user_id, counted, "idempotencyKey", after=[kept]
        )
        return written

    try:
        return await house.group.run(keyed_write)
    except (IntegrityError, _RepeatedCallError) as error:
        stored = await _stored(call)
        if stored is not None:
            return Written(await _replay(stored, call, kind))
        if isinstance(error, IntegrityError):
            raise
    # The key's row lapsed between the claim and the read: the call is new after all.
    return await house.group.run(keyed_write)


class _RepeatedCallError(Exception):
    """The key's row is there and live: the call is a repeat (its transaction is
    rolled back, and it answers from the row)."""


async def _claim(conn: BaseDBAsyncClient, call: KeyedCall, ttl_seconds: int) -> int:
    """Insert the key's row, first in the write's transaction (SQLite takes its
    write lock at once; on PostgreSQL a concurrent call of the key waits here for
    the first to end): its id. One statement, ``ON CONFLICT DO NOTHING``; when the
    key's row is there, an expired one (not swept yet) makes way, its bytes given
    back, and a live one is a repeat (``_RepeatedCallError``). Checked only then: repeats are
    rare, and a read of the key before every keyed write cost one statement each."""
    now = utcnow()
    row = {
        "user_id": call.user_id,
        "key": call.key,
        "operation": call.operation,
        "fingerprint": call.fingerprint,
        "created_at": now,
        "expires_at": now + timedelta(seconds=ttl_seconds),
    }
    text, params = sql.insert_rows(IdempotencyKey, [row])
    claimed = await sql.fetch(conn, f'{text} ON CONFLICT DO NOTHING RETURNING "id"', params)
    if not claimed:
        expired = IdempotencyKey.filter(user_id=call.user_id, key=call.key, expires_at__lte=now)
        if not await _delete(conn, expired):
            raise _RepeatedCallError
        claimed = await sql.fetch(conn, f'{text} RETURNING "id"', params)
    return int(claimed[0]["id"])


async def _stored(call: KeyedCall) -> IdempotencyKey | None:
    return await IdempotencyKey.get_or_none(
        user_id=call.user_id, key=call.key, expires_at__gt=utcnow()
    )


def _stored_answer(result: object) -> dict[str, Any]:
    """What a key row keeps of a write's answer: a task (alone or in a resume plan)
    by reference, anything else as it is."""
    if isinstance(result, TaskView):
        return {"task": _reference(result)}
    if isinstance(result, ResumePlanView):
        plan = {"resume_from": result.resume_from, "steps_in_doubt": result.steps_in_doubt}
        return {"task": _reference(result.task), "plan": to_json(plan)}
    return {"v": to_json(result)}


def _counted(call: KeyedCall, answer: dict[str, Any]) -> int:
    """What a key row counts toward its user's quota: the row, its key, operation
    and fingerprint, and the answer it keeps. (Rows of task writes, whose answer is
    a reference, counted nothing: 352 to 877 bytes each that no quota saw, for a
    day each, at up to a hundred writes a second.)"""
    texts = quota.text_bytes(call.key) + quota.text_bytes(call.operation)
    texts += quota.text_bytes(call.fingerprint)
    return quota.ROW_BYTES + texts + validation.json_size(answer)


async def _delete(conn: BaseDBAsyncClient, rows: QuerySet[IdempotencyKey]) -> int:
    """Delete key rows, giving back what they counted; how many went."""
    gone = await quota.delete_counted(conn, rows)
    await quota.release(conn, quota.add_up(gone))
    return len(gone)


def _reference(view: TaskView) -> dict[str, Any]:
    """A task answer as a key row keeps it: the task and its seq, and what ``taskAt``
    of that seq cannot tell: the stored bytes then, and the lease as the answer
    showed it (a renewal writes no event, so the history knows a lease only as
    granted; a retry answered a lapsed lease where the first call showed it live)."""
    return {
        "pk": view.pk,
        "seq": view.event_seq,
        "stored_bytes": view.stored_bytes,
        "lock": to_json(view.lock),
        "stalled": view.stalled,
    }


async def _replay(row: IdempotencyKey, call: KeyedCall, kind: Any) -> Any:
    if (row.operation, row.fingerprint) != (call.operation, call.fingerprint):
        raise IdempotencyKeyReusedError(call.key)
    answer: dict[str, Any] | None = row.answer
    assert answer is not None, "a committed key row always holds its answer"
    if "task" not in answer:
        return decode_as(kind, answer["v"])
    task = await _task_as_written(call.user_id, answer["task"])
    if "plan" not in answer:
        return task
    plan = answer["plan"]
    return ResumePlanView(task, plan["resume_from"], tuple(plan["steps_in_doubt"]))


async def _task_as_written(user_id: str, reference: dict[str, Any]) -> TaskView:
    """The task a keyed write answered: as it stood at the seq the write left it at,
    with the stored bytes and the lease it answered (a key kept before the lease
    was kept answers the lease as the history knows it)."""
    row = await Task.get_or_none(id=reference["pk"], user_id=user_id).select_related("session")
    if row is None:
        raise NotFoundError("task", "(deleted since)")
    head = task_view(row, row.session.public_id, utcnow())
    past = replace(await task_at(head, reference["seq"]), stored_bytes=reference["stored_bytes"])
    if "lock" not in reference:
        return past
    lock = decode_as(LockView | None, reference["lock"])
    return replace(past, lock=lock, stalled=reference["stalled"])


async def sweep_keys(batch: int = 500) -> int:
    """Delete the keys past their retention, ``batch`` at a time, giving their bytes
    back; how many went."""
    now = utcnow()
    gone = 0
    while True:
        due = IdempotencyKey.filter(expires_at__lte=now).order_by("id").limit(batch)
        ids = [int(row[0]) for row in await due.values_list("id")]
        if not ids:
            return gone
        gone += await retried(partial(_delete_due, ids, now))


async def _delete_due(ids: list[int], now: datetime) -> int:
    async with in_transaction() as conn:
        return await _delete(conn, IdempotencyKey.filter(id__in=ids, expires_at__lte=now))
