"""Task leases with fencing tokens: one worker drives a task at a time.

Each operation is one conditional UPDATE of the task row, judged against one
clock (this server's ``utcnow``, in the statement itself), never "write, then
read back to see who won". ``lock_token`` only grows: a grant sets it to the
previous value + 1, so a holder whose lease lapsed carries a stale token.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tortoise.expressions import F, Q, Subquery

from runstate.enums import SessionStatus, TaskEventKind, TaskStatus
from runstate.models import USER_LENGTH, Task
from runstate.services import validation
from runstate.services.clock import utcnow
from runstate.services.errors import (
    DomainError,
    InvalidInputError,
    LockNotHeldError,
    NotFoundError,
)
from runstate.services.queries import no_live_lease, stalled
from runstate.services.taskwrite import (
    Change,
    Draft,
    Guard,
    lease_refusal,
    write_selected,
    write_task,
)
from runstate.services.views import LockView, TaskView

MAX_TTL_SECONDS = 24 * 3600


def _checked(holder_id: str, ttl_seconds: int | None = None) -> None:
    if not holder_id.strip() or len(holder_id) > USER_LENGTH:
        raise InvalidInputError("holderId", f"must be 1 to {USER_LENGTH} characters")
    if ttl_seconds is not None and not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise InvalidInputError("ttlSeconds", f"must be between 1 and {MAX_TTL_SECONDS}")


def _live_for(holder_id: str, now: datetime) -> Q:
    return Q(lock_holder=holder_id, lock_expires_at__gt=now)


def _held_elsewhere(task: Task, now: datetime) -> DomainError | None:
    return lease_refusal(task, None, now)


def _not_held(task: Task, now: datetime) -> DomainError:
    return LockNotHeldError()


async def _heartbeat(draft: Draft) -> None:
    return None


async def _granted(draft: Draft) -> Change:
    return Change(TaskEventKind.LOCK_ACQUIRED)


async def _released(draft: Draft) -> Change:
    return Change(TaskEventKind.LOCK_RELEASED)


def _lock(view: TaskView) -> LockView:
    if view.lock is None:  # the write just made it live
        raise LockNotHeldError()
    return view.lock


async def acquire_task_lock(
    user_id: str, task_id: str, holder_id: str, ttl_seconds: int
) -> LockView:
    """A lease for ``holder_id``: its own live lease is extended (same token, no event);
    a free task is granted with the next token (LOCK_ACQUIRED); else LockHeld."""
    _checked(holder_id, ttl_seconds)

    def until(now: datetime) -> dict[str, Any]:
        return {"lock_expires_at": now + timedelta(seconds=ttl_seconds)}

    extend = Guard(where=lambda now: _live_for(holder_id, now), sets=until, refusal=_not_held)
    try:
        return _lock(await write_task(user_id, task_id, _heartbeat, extend))
    except LockNotHeldError:
        pass  # not this holder's live lease: try a grant

    def grant(now: datetime) -> dict[str, Any]:
        return {
            **until(now),
            "lock_holder": holder_id,
            "lock_token": F("lock_token") + 1,
            "event_seq": F("event_seq") + 1,
            "updated_at": now,
        }

    guard = Guard(where=no_live_lease, sets=grant, refusal=_held_elsewhere)
    return _lock(await write_task(user_id, task_id, _granted, guard))


async def renew_task_lock(user_id: str, task_id: str, holder_id: str, ttl_seconds: int) -> LockView:
    """Extend the holder's live lease (a heartbeat: no event); else LockNotHeld."""
    _checked(holder_id, ttl_seconds)
    guard = Guard(
        where=lambda now: _live_for(holder_id, now),
        sets=lambda now: {"lock_expires_at": now + timedelta(seconds=ttl_seconds)},
        refusal=_not_held,
    )
    return _lock(await write_task(user_id, task_id, _heartbeat, guard))


async def release_task_lock(user_id: str, task_id: str, holder_id: str) -> TaskView:
    """End the holder's live lease now (LOCK_RELEASED); else LockNotHeld.

    The token stays as it was: the next grant still gets a larger one. Releasing is
    cleanup, so it works in an expired session too.
    """
    guard = Guard(
        where=lambda now: _live_for(holder_id, now),
        sets=lambda now: {
            "lock_holder": None,
            "lock_expires_at": None,
            "event_seq": F("event_seq") + 1,
            "updated_at": now,
        },
        refusal=_not_held,
        touch_session=False,
    )
    return await write_task(user_id, task_id, _released, guard)


def claimable(now: datetime) -> Q:
    """A task a worker may claim: PLANNED with no live lease, or stalled."""
    return (Q(status=TaskStatus.PLANNED) & no_live_lease(now)) | stalled(now)


_OPEN_SESSIONS = (SessionStatus.ACTIVE, SessionStatus.PAUSED)


async def claim_task(
    user_id: str, holder_id: str, ttl_seconds: int, *, session_id: str | None = None
) -> LockView:
    """Lease the caller's oldest claimable task (of one session, if given) to
    ``holder_id``, with the next fencing token (LOCK_ACQUIRED); NotFound when no
    task needs a worker.

    One conditional UPDATE picks and leases it: its WHERE names the task by a
    subquery (the oldest claimable) and checks again that it is claimable, so two
    workers never get the same task. On SQLite the write lock serializes claims; on
    PostgreSQL a claim that waited for another's row finds it no longer claimable,
    matches nothing, and is tried again while candidates remain (each round, some
    claim wins, so the rounds are bounded by the claims racing).
    """
    _checked(holder_id, ttl_seconds)

    if session_id is not None:
        validation.known_id(session_id, "session")

    def candidates(now: datetime) -> Q:
        query = Task.filter(
            claimable(now),
            user_id=user_id,
            session__status__in=_OPEN_SESSIONS,
            session__expires_at__gt=now,
        )
        if session_id is not None:
            query = query.filter(session__public_id=session_id)
        oldest = query.order_by("id").limit(1)
        return Q(id__in=Subquery(oldest.values("id"))) & claimable(now)

    def grant(now: datetime) -> dict[str, Any]:
        return {
            "lock_expires_at": now + timedelta(seconds=ttl_seconds),
            "lock_holder": holder_id,
            "lock_token": F("lock_token") + 1,
            "event_seq": F("event_seq") + 1,
            "updated_at": now,
        }

    async def explain() -> DomainError | None:
        now = utcnow()
        left = Task.filter(candidates(now))
        return None if await left.exists() else NotFoundError("task", "(none to claim)")

    guard = Guard(where=candidates, sets=grant, refusal=_not_held)
    view = await write_selected(
        Q(user_id=user_id), _granted, guard, explain, attempts=CLAIM_ATTEMPTS
    )
    return _lock(view)


CLAIM_ATTEMPTS = 1000
"""Rounds a claim may lose to others while tasks remain: far more than workers race."""
