"""Transactions the database gave up on, tried again.

PostgreSQL breaks a deadlock by aborting one of its transactions (SQLSTATE
40P01), and may refuse to serialize one (40001); both are meant to be retried.
Writes take their row locks in one order (a task, then its session; see
``sessions.remove_sessions``), so none is expected; this is the safety net for
any that remains: tried again, the victim answers as of after the other (a
write then finds NotFound) instead of the client getting "Unexpected error.".
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)

RETRIED = frozenset({"40P01", "40001"})
"""deadlock_detected, serialization_failure."""

ATTEMPTS = 5

T = TypeVar("T")


def retryable(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) is one to try again."""
    seen: BaseException | None = error
    while seen is not None:
        if getattr(seen, "sqlstate", None) in RETRIED:
            return True
        seen = seen.__cause__
    return False


async def retried(work: Callable[[], Awaitable[T]]) -> T:
    """``work()``, tried again (up to ``ATTEMPTS`` times in all, after a short random
    pause) when the database aborted it as a deadlock victim or unserializable."""
    for attempt in itertools.count(1):
        try:
            return await work()
        except Exception as error:
            if attempt >= ATTEMPTS or not retryable(error):
                raise
            log.info("transaction aborted by the database (%s); trying again", error)
            await asyncio.sleep(random.uniform(0, 0.01 * 2**attempt))
    raise AssertionError("unreachable")
