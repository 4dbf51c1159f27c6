"""The expiry sweep: mark sessions past their expiry EXPIRED, delete them after retention.

Both steps go in batches of ``BATCH`` sessions, found through the
``sessions_expiry`` index (status, expires_at), each batch one short statement of
its own: the sweep never holds SQLite's write lock for long, so writers running
meanwhile only wait a moment. Each statement checks its condition again, so
several processes may sweep at once: a session is marked or deleted by exactly
one of them. A session with a task whose lease is still live is not deleted: an
agent is still working there, and is told so by its next write (SessionExpired).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from tortoise.expressions import F, Q, Subquery
from tortoise.queryset import ValuesListQuery

from runstate.basics.enums import SessionStatus
from runstate.models import Session, Task
from runstate.observe.metrics import Metrics
from runstate.services.actions.sessions import remove_sessions
from runstate.services.write.idempotency import sweep_keys
from runstate.services.write.retry import retried
from runstate.storage.clock import sync, utcnow

log = logging.getLogger(__name__)

BATCH = 500
"""Sessions per statement: small enough that one statement takes milliseconds."""

_LIVE = (SessionStatus.ACTIVE, SessionStatus.PAUSED, SessionStatus.COMPLETED)


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did."""

    expired: int
    deleted: int
    keys: int = 0
    """Idempotency keys past their retention, deleted."""


async def sweep(retention_seconds: int, batch: int = BATCH) -> SweepResult:
    """Mark expired sessions EXPIRED; delete those expired longer than the retention,
    with everything below them (by cascade), unless a task of theirs holds a live
    lease; delete idempotency keys past their retention. Judged by the database's
    clock, read for the purpose (``clock``)."""
    await sync()
    now = utcnow()
    expired = 0
    while True:
        marked = await expire_batch(now, batch)
        expired += marked
        if marked < batch:
            break
        await asyncio.sleep(0)  # let waiting writers in between batches
    deleted = 0
    after = 0
    cutoff = now - timedelta(seconds=retention_seconds)
    while True:
        ids = [int(row[0]) for row in await due_for_deletion(cutoff, after, batch)]
        if not ids:
            break
        after = max(ids)
        deleted += await delete_batch(ids, cutoff, now)
        await asyncio.sleep(0)
    return SweepResult(expired=expired, deleted=deleted, keys=await sweep_keys())


async def expire_batch(now: datetime, batch: int) -> int:
    """Mark up to ``batch`` sessions past their expiry EXPIRED; how many were."""
    due = Session.filter(status__in=_LIVE, expires_at__lte=now).limit(batch).values("id")
    return await Session.filter(id__in=Subquery(due), status__in=_LIVE, expires_at__lte=now).update(
        status=SessionStatus.EXPIRED, version=F("version") + 1
    )


def due_for_deletion(cutoff: datetime, after: int, batch: int) -> ValuesListQuery[Literal[False]]:
    """The ids of the next ``batch`` sessions (by id, after ``after``) expired before
    ``cutoff``."""
    return (
        Session.filter(status=SessionStatus.EXPIRED, expires_at__lte=cutoff, id__gt=after)
        .order_by("id")
        .limit(batch)
        .values_list("id")
    )


async def delete_batch(ids: list[int], cutoff: datetime, now: datetime) -> int:
    """Delete these expired sessions, except those with a task holding a live lease."""
    live = Task.filter(session_id__in=ids, lock_expires_at__gt=now)
    leased = {int(row[0]) for row in await live.values_list("session_id")}
    free = [i for i in ids if i not in leased]
    if not free:
        return 0
    still = Q(status=SessionStatus.EXPIRED, expires_at__lte=cutoff)
    return await retried(lambda: remove_sessions(free, still=still))


async def sweep_forever(retention_seconds: int, every_seconds: float, metrics: Metrics) -> None:
    """Sweep every ``every_seconds`` until cancelled, counted in ``metrics``; a failed
    sweep is logged and retried."""
    while True:
        await asyncio.sleep(every_seconds)
        try:
            result = await sweep(retention_seconds)
        except Exception:  # the next round tries again; the server keeps serving
            log.exception("expiry sweep failed")
            continue
        metrics.swept.labels("sessions_expired").inc(result.expired)
        metrics.swept.labels("sessions_deleted").inc(result.deleted)
        metrics.swept.labels("idempotency_keys_deleted").inc(result.keys)
        if result.expired or result.deleted or result.keys:
            log.info(
                "sweep: %d sessions expired, %d deleted, %d idempotency keys deleted",
                result.expired,
                result.deleted,
                result.keys,
            )
