"""Task leases with fencing tokens: one worker drives a task at a time.

Each operation is one conditional UPDATE of the task row, judged against one
clock (this server's ``utcnow``, in the statement itself), never "write, then
read back to see who won". ``lock_token`` only grows: a grant sets it to the
previous value + 1, so a holder whose lease lapsed carries a stale token.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tortoise.expressions import F, Q

from runstate.enums import TaskEventKind
from runstate.models import USER_LENGTH, Task
from runstate.services.errors import DomainError, InvalidInputError, LockNotHeldError
from runstate.services.taskwrite import Change, Draft, Guard, lease_refusal, write_task
from runstate.services.views import LockView, TaskView

MAX_TTL_SECONDS = 24 * 3600


def _checked(holder_id: str, ttl_seconds: int | None = None) -> None:
    if not holder_id.strip() or len(holder_id) > USER_LENGTH:
        raise InvalidInputError("holderId", f"must be 1 to {USER_LENGTH} characters")
    if ttl_seconds is not None and not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise InvalidInputError("ttlSeconds", f"must be between 1 and {MAX_TTL_SECONDS}")


def _live_for(holder_id: str, now: datetime) -> Q:
    return Q(lock_holder=holder_id, lock_expires_at__gt=now)


def _free(now: datetime) -> Q:
    return Q(lock_expires_at__isnull=True) | Q(lock_expires_at__lte=now)


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

    guard = Guard(where=_free, sets=grant, refusal=_held_elsewhere)
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
