"""Byte quotas: how much one task, and one user's sessions and tasks together, may hold.

Sizes estimate what the database keeps: the UTF-8 bytes of what clients send
(goals, actions, inputs, outputs, errors, tool results, metadata; JSON as compact
JSON, text with the escapes an answer gives it), plus ``ROW_BYTES`` for every row
a write adds (a session, a task, a step, an event, a step's history row).
Without the row charge a user could fill the disk with empty tasks or with events
that change only a status.

A task's count (``tasks.stored_bytes``) grows with its history and is checked by
the write that adds to it, against the row its opening UPDATE has locked. A
user's count is one ``user_usage`` row, raised by the same transaction as its
last statement (so the row lock is held only through the commit), and lowered
when sessions and tasks are deleted. Either over its limit refuses the write,
InvalidInput naming the input field that carried the content (``taskId`` when the
write carried none), and the transaction rolls back: nothing is written.

Lock order on PostgreSQL: a task write locks its task row, then its session row,
then the user's usage row; deletes lock task rows, then the session, then usage
rows in user order. No cycle, so no deadlock between them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.queryset import QuerySet

from runstate.basics.enums import TaskEventKind
from runstate.models import Step, Usage, unbox
from runstate.services.domain import validation
from runstate.services.domain.columns import SIZED
from runstate.services.domain.errors import InvalidInputError
from runstate.services.domain.validation import ContentLimits
from runstate.storage import sql

ROW_BYTES = 100
"""What a row costs beyond its content (ids, status, times and index entries)."""

CONTENT_FIELDS = {
    TaskEventKind.STEPS_ADDED: "steps",
    TaskEventKind.STEP_SUCCEEDED: "output",
    TaskEventKind.STEP_FAILED: "error",
    TaskEventKind.CHECKPOINT: "steps",
    TaskEventKind.TOOL_STATE_CHANGED: "result",
    TaskEventKind.GRAPH_CHECKPOINT: "checkpoint",
    TaskEventKind.GRAPH_WRITES: "writes",
}
"""The input field a refused write is named by, per the event it would have logged."""


def text_bytes(value: str | None) -> int:
    """The size of a text as an answer carries it (None: 0): its UTF-8 bytes, with
    the escapes JSON needs (a quote, a newline, a control character) but not the
    quotes around it."""
    return 0 if value is None else len(validation.encoded(value).encode()) - 2


def new_step_bytes(step: Step) -> int:
    """A step added to a plan: its row, action and input."""
    return ROW_BYTES + text_bytes(step.action) + validation.json_size(unbox(step.input))


def version_bytes(step: Step) -> int:
    """A step's history row for one change: what it holds of a client's (its output,
    error and any other JSON or text column, ``columns.SIZED``) as it now stands."""
    return ROW_BYTES + sum(_held(getattr(step, name)) for name in SIZED)


def _held(value: Any) -> int:
    """The bytes a stored column value counts: text as UTF-8, JSON as compact JSON
    (unboxed, as the client sent it)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return text_bytes(value)
    return validation.json_size(unbox(value))


def versions_bytes(steps: Iterable[Step]) -> int:
    """The history rows of ``steps``."""
    return sum(version_bytes(s) for s in steps)


def check_task(limits: ContentLimits, task_id: str, held: int, adding: int, field: str) -> None:
    """Refuse a write that would take a task past ``limits.task_bytes``."""
    limit = limits.task_bytes
    if held + adding > limit:
        raise InvalidInputError(
            field,
            f"task {task_id} holds {held} bytes and this would add {adding}, more than"
            f" the {limit} one task may hold (RUNSTATE_MAX_TASK_BYTES)",
        )


_CHARGE = (
    'UPDATE "user_usage" SET "stored_bytes" = "stored_bytes" + ?'
    ' WHERE "user_id" = ? AND "stored_bytes" + ? <= ? RETURNING "stored_bytes"'
)
_OPEN = 'INSERT INTO "user_usage" ("user_id", "stored_bytes") VALUES (?, 0) ON CONFLICT DO NOTHING'
_HELD = 'SELECT "stored_bytes" FROM "user_usage" WHERE "user_id" = ?'


async def charge(
    conn: BaseDBAsyncClient,
    limits: ContentLimits,
    user_id: str,
    adding: int,
    field: str,
    *,
    after: Sequence[sql.Statement] = (),
) -> None:
    """Add ``adding`` bytes to the user's count inside the write's transaction, or
    refuse the write (InvalidInput ``field``) when that would pass
    ``limits.user_bytes``. A user's first write opens the count at 0; a negative
    ``adding`` (smaller metadata) only lowers it. The write's statements ``after``
    run first, with the charge, in one trip (``sql.run_all``)."""
    if adding <= 0:  # shrinking is never refused, even past a lowered limit
        lowered = -adding
        await sql.run_all(conn, [*after, *([_lowering(user_id, lowered)] if lowered else [])])
        return
    limit = limits.user_bytes
    params = [adding, user_id, adding, limit]
    if await sql.run_all(conn, [*after, (_CHARGE, params)]):
        return
    await sql.fetch(conn, _OPEN, [user_id])
    if await sql.fetch(conn, _CHARGE, params):
        return
    held = (await sql.fetch(conn, _HELD, [user_id]))[0]["stored_bytes"]
    raise InvalidInputError(
        field,
        f"your sessions and tasks hold {held} bytes and this would add {adding}, more"
        f" than the {limit} one user may hold (RUNSTATE_MAX_USER_BYTES): delete a"
        " session to make room",
    )


async def held(user_id: str) -> int:
    """How many bytes the user's sessions and tasks hold."""
    row = await Usage.get_or_none(user_id=user_id)
    return 0 if row is None else row.stored_bytes


async def release(conn: BaseDBAsyncClient, freed: Mapping[str, int]) -> None:
    """Take deleted bytes off their users' counts, in user order (the lock order)."""
    for user_id in sorted(freed):
        if freed[user_id]:
            await sql.execute(conn, *_lowering(user_id, freed[user_id]))


def _lowering(user_id: str, freed: int) -> sql.Statement:
    return (
        'UPDATE "user_usage" SET "stored_bytes" = "stored_bytes" - ? WHERE "user_id" = ?',
        [freed, user_id],
    )


async def delete_counted(conn: BaseDBAsyncClient, rows: QuerySet[Any]) -> list[dict[str, Any]]:
    """Delete rows that count toward their users' quotas (tasks, sessions, kept
    idempotency answers), answering each one's ``user_id`` and ``stored_bytes``
    for ``add_up`` and ``release``."""
    return await sql.update_returning(
        conn, rows.using_db(conn).delete(), '"user_id", "stored_bytes"'
    )


def add_up(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Bytes per user of deleted rows carrying ``user_id`` and ``stored_bytes``."""
    freed: dict[str, int] = {}
    for row in rows:
        freed[row["user_id"]] = freed.get(row["user_id"], 0) + int(row["stored_bytes"])
    return freed
