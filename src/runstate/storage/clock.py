"""The one clock the services judge expiry, leases and retention by: the database's.

Each server process judged by its own clock, so one whose clock was wrong judged
for every process: a server 2 h fast marked a session that was active 3 s
earlier EXPIRED, and its sweep deleted it with its tasks; one 15 min fast handed
a live 10-minute lease to a second worker. Now no process's wall clock decides
anything: ``sync`` reads the database's clock (one statement) and anchors it to
this process's monotonic clock, and ``utcnow`` is that reading carried forward by
the monotonic clock, which a wrong or stepped wall clock does not move. Each
process reads each database's clock when it opens it, again every
``SYNC_SECONDS`` (``keep_time``), and before each sweep decides what to expire and
delete, so a monotonic clock that runs a little fast or slow drifts by a few
milliseconds at most between readings.

On PostgreSQL the clock is the database server's (``clock_timestamp()``). On
SQLite it is the machine's: SQLite reads it in the process that asks, and every
process sharing a SQLite file runs on that one machine, under one kernel clock.
Before the database is opened (a command that needs no judgement), the wall
clock stands in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from weakref import WeakKeyDictionary

from tortoise import connections
from tortoise.context import TortoiseContext, get_current_context

log = logging.getLogger(__name__)

SYNC_SECONDS = 10.0
"""How often a serving process reads the database's clock again."""

_POSTGRES = "SELECT clock_timestamp() AS now"
_SQLITE = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now') AS now"

_anchors: WeakKeyDictionary[TortoiseContext, tuple[datetime, float]] = WeakKeyDictionary()
"""Per database (the Tortoise context of its connections): its time at the last
reading, and the monotonic clock's then. Two apps on two databases in one process
each judge by their own."""


def utcnow() -> datetime:
    """Now, in UTC, to the microsecond, by the clock of the database in use."""
    context = get_current_context()
    anchor = None if context is None else _anchors.get(context)
    if anchor is None:
        return datetime.now(UTC)
    at, then = anchor
    return at + timedelta(seconds=time.monotonic() - then)


async def sync() -> datetime:
    """Read the database's clock and anchor ``utcnow`` to it (for the database in
    use); the time read."""
    context = get_current_context()
    if context is None:
        raise RuntimeError("no database is open here")
    conn = connections.get("default")
    postgres = conn.capabilities.dialect == "postgres"
    before = time.monotonic()
    rows = await conn.execute_query_dict(_POSTGRES if postgres else _SQLITE)
    after = time.monotonic()
    value = rows[0]["now"]
    at = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    _anchors[context] = at, (before + after) / 2  # the reading was taken between the two
    return at


def forget() -> None:
    """Go back to the wall clock (the database in use is closing)."""
    context = get_current_context()
    if context is not None:
        _anchors.pop(context, None)


async def keep_time(every_seconds: float = SYNC_SECONDS) -> None:
    """``sync`` every ``every_seconds`` until cancelled; a failed reading keeps the
    last anchor (the monotonic clock carries it on) and is tried again."""
    while True:
        await asyncio.sleep(every_seconds)
        try:
            await sync()
        except Exception:  # the database may be away for a moment; serving goes on
            log.warning("reading the database's clock failed; the last reading carries on")
