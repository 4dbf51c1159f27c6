"""A session's admission ledger, as the write path keeps it: who is next, and what
a task's end does to its submission.

Every change of a ledger first moves its session's ``ledger_seq`` (an UPDATE of
the session row: on PostgreSQL its lock, on SQLite the database's write lock), so
that the changes of one ledger are ordered by that row, whichever process makes
them, and the submission changed records the number (``changed_seq``,
``sessionSubmissions``). At most one submission of a session is ACTIVE, held by
the database too (the partial unique index ``submissions_one_active``); the next
to be is the QUEUED one lowest in (``rank``, ``seq``), promoted in the very
transaction that ends the active one's task (``task_ended``).

Locks are taken in the order every task write takes them: the task, then its
session, then the submissions.
"""

from __future__ import annotations

from datetime import datetime

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.transactions import in_transaction

from runstate.basics.enums import SubmissionStatus, TaskStatus
from runstate.models import Submission, Task
from runstate.services.domain import quota
from runstate.services.domain.conditions import at
from runstate.services.domain.views import spent_columns
from runstate.services.live.messages import ledger_channel
from runstate.storage import sql

ENDINGS = {
    TaskStatus.COMPLETED: SubmissionStatus.COMPLETED,
    TaskStatus.FAILED: SubmissionStatus.FAILED,
    TaskStatus.CANCELLED: SubmissionStatus.CANCELLED,
}
"""A task's status that ends its submission, and the submission's status then
(CANCELLED becomes the submission's ``stop`` when one was asked for)."""

UNFINISHED = (SubmissionStatus.QUEUED, SubmissionStatus.ACTIVE)
_UNFINISHED_SQL = ", ".join(f"'{s.value}'" for s in UNFINISHED)

_BUMP = (
    'UPDATE "sessions" SET "ledger_seq" = "ledger_seq" + 1 WHERE "id" = ? RETURNING "ledger_seq"'
)

_END = (
    'UPDATE "submissions" SET "status" = CASE WHEN ? AND "stop" IS NOT NULL THEN "stop"'
    ' ELSE ? END, "reason" = CASE WHEN ? AND "stop" IS NOT NULL THEN "reason" ELSE ? END,'
    ' "changed_seq" = ?, "updated_at" = ?'
    f' WHERE "id" = ? AND "status" IN ({_UNFINISHED_SQL}) RETURNING "status"'
)

_PROMOTE = (
    'UPDATE "submissions" SET "status" = \'ACTIVE\', "changed_seq" = ?, "updated_at" = ?'
    ' WHERE "id" = (SELECT q."id" FROM "submissions" q WHERE q."session_id" = ?'
    ' AND q."status" = \'QUEUED\' ORDER BY q."rank", q."seq" LIMIT 1)'
    ' AND NOT EXISTS (SELECT 1 FROM "submissions" a WHERE a."session_id" = ?'
    " AND a.\"status\" = 'ACTIVE')"
)


def wakes(session_pk: int) -> tuple[str, ...]:
    """The channel woken once a change of the session's ledger has committed."""
    return (ledger_channel(session_pk),)


async def bump(conn: BaseDBAsyncClient, session_pk: int) -> int:
    """Take the next ``ledger_seq`` of the session (its row locked since)."""
    rows = await sql.fetch(conn, _BUMP, [session_pk])
    return int(rows[0]["ledger_seq"])


async def admitting(conn: BaseDBAsyncClient, session_pk: int, stored: int) -> tuple[int, int]:
    """Take the session's next ``ledger_seq`` and next ``submission_seq`` for a new
    submission holding ``stored`` bytes (the session's row locked since): both."""
    rows = await sql.fetch(
        conn,
        'UPDATE "sessions" SET "ledger_seq" = "ledger_seq" + 1,'
        ' "submission_seq" = "submission_seq" + 1, "stored_bytes" = "stored_bytes" + ?'
        ' WHERE "id" = ? RETURNING "ledger_seq", "submission_seq"',
        [stored, session_pk],
    )
    return int(rows[0]["ledger_seq"]), int(rows[0]["submission_seq"])


async def promote(conn: BaseDBAsyncClient, session_pk: int, changed: int, now: datetime) -> None:
    """Make the next QUEUED submission ACTIVE, if none is."""
    await sql.execute(conn, _PROMOTE, [changed, at(now), session_pk, session_pk])


async def task_ended(
    conn: BaseDBAsyncClient,
    session_pk: int,
    submission_pk: int,
    status: TaskStatus,
    now: datetime,
) -> SubmissionStatus | None:
    """End the submission whose task just reached ``status`` (one of ``ENDINGS``)
    and start the next: the submission's status now (None: it had ended already).
    Run in the task's write, after its own statements."""
    changed = await bump(conn, session_pk)
    cancelled = status is TaskStatus.CANCELLED
    reason = "its task was cancelled" if cancelled else None
    rows = await sql.fetch(
        conn,
        _END,
        [cancelled, ENDINGS[status].value, cancelled, reason, changed, at(now), submission_pk],
    )
    if not rows:
        return None
    await promote(conn, session_pk, changed, now)
    return SubmissionStatus(rows[0]["status"])


async def active(conn: BaseDBAsyncClient | None, session_pk: int) -> Submission | None:
    """The session's ACTIVE submission, if any."""
    return (
        await Submission.filter(session_id=session_pk, status=SubmissionStatus.ACTIVE)
        .using_db(conn)
        .first()
    )


async def remove_task(task_pk: int, session_pk: int, submission_pk: int) -> None:
    """Delete a ROLLED_BACK submission's task with its steps, tool states and
    events, and take its bytes off its user's count; the spend it reported stays
    counted (its session's and its user's running totals are left as they are).
    The submission keeps what the task spent. Its own transaction, after the one
    that ended the task, in the lock order (the task, the session, the
    submission)."""
    async with in_transaction() as conn:
        gone = await quota.delete_counted(conn, Task.filter(id=task_pk), spend=True)
        changed = await bump(conn, session_pk)
        spent = quota.spend_up(gone).get(gone[0]["user_id"]) if gone else None
        kept = {} if spent is None else spent_columns(spent)
        await (
            Submission.filter(id=submission_pk)
            .using_db(conn)
            .update(task_id=None, changed_seq=changed, **kept)
        )
        await quota.release(conn, quota.add_up(gone))
