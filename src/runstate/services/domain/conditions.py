"""The conditions several layers test, each written once here in the forms it is
needed in, side by side: Python on a row's values, a Tortoise ``Q`` for querysets,
and SQL for the write path's own statements. ``tests/integration/test_conditions.py``
holds the forms of each equal on every combination of the values they read.

- a **live lease**: a lease whose expiry is still ahead (an expired lease is as
  good as released);
- **stalled**: RUNNING or WAITING_TOOL, leased once, no live lease: its agent is
  gone and ``claimTask`` may hand it on;
- an **open session**: ACTIVE or PAUSED and not past its expiry, which tasks may
  be created in and claimed from;
- an **expired session**: marked EXPIRED, or past its expiry and not yet marked
  (the sweep marks it later; every read and write treats it as expired at once);
- a **LangGraph thread**: a task with a graph checkpoint (SQL alone: no row holds it);
- a **kind** of task: the runs of one framework (``Task.run_of``), or ordinary
  tasks (no run), which is what a claim hands out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tortoise.expressions import Q

from runstate.basics.enums import SessionStatus, TaskStatus
from runstate.models import Session, Task
from runstate.storage import sql

WORKING = (TaskStatus.RUNNING, TaskStatus.WAITING_TOOL)
"""The statuses in which a task is being driven by an agent."""
OPEN_SESSIONS = (SessionStatus.ACTIVE, SessionStatus.PAUSED)
"""The statuses of a session that takes new tasks and claims."""


def at(now: datetime) -> Any:
    """A time as a parameter of the task row's time columns."""
    return sql.db_value(Task, "updated_at", now)


# A live lease.


def lease_live(expires_at: datetime | None, now: datetime) -> bool:
    """Whether a lease expiring at ``expires_at`` is live at ``now``."""
    return expires_at is not None and expires_at > now


def no_live_lease(now: datetime) -> Q:
    """Tasks with no lease, or only one that has lapsed."""
    return Q(lock_expires_at__isnull=True) | Q(lock_expires_at__lte=now)


def no_live_lease_sql(now: datetime) -> sql.Fragment:
    """``no_live_lease`` on the "tasks" row."""
    return '"lock_expires_at" IS NULL OR "lock_expires_at" <= ?', [at(now)]


# A LangGraph thread.

GRAPH_THREAD_SQL = 'EXISTS (SELECT 1 FROM "graph_checkpoints" g WHERE g."task_id" = "tasks"."id")'
"""A LangGraph thread, on the "tasks" row: one probe of the checkpoints' unique
index per task."""


# A task of a session's ledger.

NOT_ITS_TURN_SQL = (
    '("tasks"."interrupt_requested" OR ("tasks"."submission_id" IS NOT NULL AND NOT EXISTS'
    ' (SELECT 1 FROM "submissions" b WHERE b."id" = "tasks"."submission_id"'
    " AND b.\"status\" = 'ACTIVE')))"
)
"""A task of a session's ledger that no worker may take, on the "tasks" row: one
asked to stop, or one whose submission is not ACTIVE (a probe of the
submissions' primary key). A task made with createTask is never one."""


# A kind of task.


def of_kind(run_of: str | None) -> Q:
    """Tasks of one kind: the runs of the framework ``run_of``, or with None the
    ordinary tasks (no framework's run)."""
    return Q(run_of__isnull=True) if run_of is None else Q(run_of=run_of)


def of_kind_sql(run_of: str | None) -> sql.Fragment:
    """``of_kind`` on the "tasks" row."""
    return ('"run_of" IS NULL', []) if run_of is None else ('"run_of" = ?', [run_of])


# Stalled.


def is_stalled(status: TaskStatus, lock_token: int, lease_is_live: bool) -> bool:
    """Whether a task is stalled: working, leased once (a fencing token was ever
    granted), and its lease not live."""
    return status in WORKING and lock_token > 0 and not lease_is_live


def stalled(now: datetime) -> Q:
    """Stalled tasks at ``now``."""
    return Q(status__in=WORKING, lock_token__gt=0) & no_live_lease(now)


def stalled_sql(now: datetime) -> sql.Fragment:
    """``stalled`` on the "tasks" row."""
    live, params = no_live_lease_sql(now)
    return (
        f'"status" IN ({sql.marks(WORKING)}) AND "lock_token" > 0 AND ({live})',
        [*(s.value for s in WORKING), *params],
    )


# An expired session.


def session_expired(status: object, expires_at: datetime, now: datetime) -> bool:
    """Whether a session read as its status and expiry is expired at ``now``."""
    return status == SessionStatus.EXPIRED or expires_at <= now


def expired_session(now: datetime) -> Q:
    """Expired sessions at ``now``; ``~expired_session(now)``, the live ones."""
    return Q(status=SessionStatus.EXPIRED) | Q(expires_at__lte=now)


def live_session_sql(now: datetime) -> sql.Fragment:
    """``~expired_session`` on the "sessions" row of an UPDATE: the sessions a write
    of the session's own (its conversation) may change."""
    return (
        '"status" != ? AND "expires_at" > ?',
        [SessionStatus.EXPIRED.value, sql.db_value(Session, "expires_at", now)],
    )


# An open session.


def session_open(status: SessionStatus, expires_at: datetime, now: datetime) -> bool:
    """Whether a session is open at ``now``."""
    return status in OPEN_SESSIONS and expires_at > now


def open_session(now: datetime, via: str = "") -> Q:
    """Open sessions at ``now``; with ``via="session__"``, tasks in one."""
    filters: dict[str, Any] = {f"{via}status__in": OPEN_SESSIONS, f"{via}expires_at__gt": now}
    return Q(**filters)


def open_session_sql(now: datetime, alias: str) -> sql.Fragment:
    """``open_session`` on the "sessions" row named ``alias``."""
    return (
        f'{alias}."status" IN ({sql.marks(OPEN_SESSIONS)}) AND {alias}."expires_at" > ?',
        [*(s.value for s in OPEN_SESSIONS), at(now)],
    )
