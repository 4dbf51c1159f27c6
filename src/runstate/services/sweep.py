"""The expiry sweep: mark sessions past their expiry EXPIRED, delete them after retention.

Both steps are single conditional statements, so several processes may sweep at
once: a session is marked or deleted by exactly one of them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta

from tortoise.expressions import F

from runstate.enums import SessionStatus
from runstate.models import Session
from runstate.services.clock import utcnow
from runstate.services.idempotency import sweep_keys

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did."""

    expired: int
    deleted: int
    keys: int = 0
    """Idempotency keys past their retention, deleted."""


async def sweep(retention_seconds: int) -> SweepResult:
    """Mark expired sessions EXPIRED; delete those expired longer than the retention,
    with everything below them (by cascade); delete idempotency keys past theirs."""
    now = utcnow()
    expired = await (
        Session.filter(expires_at__lte=now)
        .exclude(status=SessionStatus.EXPIRED)
        .update(status=SessionStatus.EXPIRED, version=F("version") + 1)
    )
    deleted = await Session.filter(
        expires_at__lte=now - timedelta(seconds=retention_seconds)
    ).delete()
    return SweepResult(expired=expired, deleted=deleted, keys=await sweep_keys())


async def sweep_forever(retention_seconds: int, every_seconds: float) -> None:
    """Sweep every ``every_seconds`` until cancelled; a failed sweep is logged and retried."""
    while True:
        await asyncio.sleep(every_seconds)
        try:
            result = await sweep(retention_seconds)
        except Exception:  # the next round tries again; the server keeps serving
            log.exception("expiry sweep failed")
            continue
        if result.expired or result.deleted or result.keys:
            log.info(
                "sweep: %d sessions expired, %d deleted, %d idempotency keys deleted",
                result.expired,
                result.deleted,
                result.keys,
            )
