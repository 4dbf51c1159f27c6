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
when sessions and tasks are deleted; it keeps the user's spend too, raised by the
same statement and capped at ``MAX_LONG`` (``services.domain.spend``). Either
over its limit refuses the write,
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
from runstate.services.domain.validation import MAX_LONG, ContentLimits
from runstate.services.domain.views import SpendView
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
    'UPDATE "user_usage" SET "stored_bytes" = "stored_bytes" + ?{spend_sets}'
    ' WHERE "user_id" = ? AND "stored_bytes" + ? <= ?{spend_caps} RETURNING "stored_bytes"'
)
_SPENT = ("spent_input_tokens", "spent_output_tokens", "spent_cost_micros", "spent_calls")
_CAPPED = _SPENT[:3]
"""The user's spend columns, and those capped at ``MAX_LONG`` (calls count writes)."""
NO_SPEND = SpendView()
_OPEN = 'INSERT INTO "user_usage" ("user_id", "stored_bytes") VALUES (?, 0) ON CONFLICT DO NOTHING'
_HELD = (
    'SELECT "stored_bytes", "spent_input_tokens", "spent_output_tokens", "spent_cost_micros"'
    ' FROM "user_usage" WHERE "user_id" = ?'
)


def _charging(user_id: str, adding: int, limit: int, spent: SpendView) -> sql.Statement:
    """The UPDATE adding ``adding`` bytes and ``spent`` to the user's row, matching
    nothing when the bytes would pass ``limit`` or a spend total ``MAX_LONG``."""
    values = _spend_values(spent)
    if not spent.calls:
        return _CHARGE.format(spend_sets="", spend_caps=""), [adding, user_id, adding, limit]
    sets = "".join(f', "{c}" = "{c}" + ?' for c in _SPENT)
    caps = "".join(f' AND "{c}" + ? <= {MAX_LONG}' for c in _CAPPED)
    return (
        _CHARGE.format(spend_sets=sets, spend_caps=caps),
        [adding, *values, user_id, adding, limit, *values[:3]],
    )


def _spend_values(spent: SpendView) -> list[int]:
    return [spent.input_tokens, spent.output_tokens, spent.cost_micros, spent.calls]


async def charge(
    conn: BaseDBAsyncClient,
    limits: ContentLimits,
    user_id: str,
    adding: int,
    field: str,
    *,
    after: Sequence[sql.Statement] = (),
    spent: SpendView = NO_SPEND,
    spent_field: str = "spend",
) -> None:
    """Add ``adding`` bytes, and the spend a write reported (``spent``), to the
    user's row inside the write's transaction, or refuse the write: InvalidInput
    ``field`` when the bytes would pass ``limits.user_bytes``, ``spent_field`` when
    a total of the user's spend would pass ``MAX_LONG`` (so no sum of the user's
    sessions, nor of one session's tasks, ever passes it). A user's first write
    opens the row at 0; a negative ``adding`` (smaller metadata) only lowers it.
    The write's statements ``after`` run first, with the charge, in one trip
    (``sql.run_all``)."""
    if adding <= 0 and not spent.calls:  # shrinking is never refused, even past a lowered limit
        lowered = -adding
        await sql.run_all(conn, [*after, *([_lowering(user_id, lowered)] if lowered else [])])
        return
    limit = limits.user_bytes
    statement = _charging(user_id, adding, limit, spent)
    if await sql.run_all(conn, [*after, statement]):
        return
    await sql.fetch(conn, _OPEN, [user_id])
    if await sql.fetch(conn, *statement):
        return
    row = (await sql.fetch(conn, _HELD, [user_id]))[0]
    totals = [int(row[c]) for c in _CAPPED]
    if any(t + v > MAX_LONG for t, v in zip(totals, _spend_values(spent)[:3], strict=True)):
        raise InvalidInputError(spent_field, f"your sessions' spend would pass {MAX_LONG}")
    raise InvalidInputError(
        field,
        f"your sessions and tasks hold {row['stored_bytes']} bytes and this would add"
        f" {adding}, more than the {limit} one user may hold (RUNSTATE_MAX_USER_BYTES):"
        " delete a session to make room",
    )


async def held(user_id: str) -> int:
    """How many bytes the user's sessions and tasks hold."""
    row = await Usage.get_or_none(user_id=user_id)
    return 0 if row is None else row.stored_bytes


async def user_spent(user_id: str) -> SpendView:
    """What the user's sessions spent, its row's totals (one row, whatever the
    number of its tasks)."""
    row = await Usage.get_or_none(user_id=user_id)
    if row is None:
        return SpendView()
    return SpendView(
        row.spent_input_tokens, row.spent_output_tokens, row.spent_cost_micros, row.spent_calls
    )


async def release(
    conn: BaseDBAsyncClient,
    freed: Mapping[str, int],
    spent: Mapping[str, SpendView] | None = None,
) -> None:
    """Take deleted bytes, and the spend of deleted sessions (``spent``), off their
    users' counts, in user order (the lock order)."""
    spent = spent or {}
    for user_id in sorted(set(freed) | set(spent)):
        if freed.get(user_id) or user_id in spent:
            await sql.execute(conn, *_lowering(user_id, freed.get(user_id, 0), spent.get(user_id)))


def _lowering(user_id: str, freed: int, spent: SpendView | None = None) -> sql.Statement:
    if spent is None:
        return (
            'UPDATE "user_usage" SET "stored_bytes" = "stored_bytes" - ? WHERE "user_id" = ?',
            [freed, user_id],
        )
    sets = "".join(f', "{c}" = "{c}" - ?' for c in _SPENT)
    return (
        f'UPDATE "user_usage" SET "stored_bytes" = "stored_bytes" - ?{sets} WHERE "user_id" = ?',
        [freed, *_spend_values(spent), user_id],
    )


async def delete_counted(
    conn: BaseDBAsyncClient, rows: QuerySet[Any], *, spend: bool = False
) -> list[dict[str, Any]]:
    """Delete rows that count toward their users' quotas (tasks, sessions, kept
    idempotency answers), answering each one's ``user_id`` and ``stored_bytes``
    for ``add_up`` and ``release``, and with ``spend`` (sessions) its ``spent_*``
    totals for ``spend_up``."""
    columns = '"user_id", "stored_bytes"' + "".join(f', "{c}"' for c in _SPENT if spend)
    return await sql.update_returning(conn, rows.using_db(conn).delete(), columns)


def add_up(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Bytes per user of deleted rows carrying ``user_id`` and ``stored_bytes``."""
    freed: dict[str, int] = {}
    for row in rows:
        freed[row["user_id"]] = freed.get(row["user_id"], 0) + int(row["stored_bytes"])
    return freed


def spend_up(rows: Iterable[Mapping[str, Any]]) -> dict[str, SpendView]:
    """Spend per user of deleted sessions (``delete_counted`` with ``spend``)."""
    spent: dict[str, SpendView] = {}
    for row in rows:
        values = SpendView(*(int(row[c]) for c in _SPENT))
        spent[row["user_id"]] = spent.get(row["user_id"], SpendView()) + values
    return spent
