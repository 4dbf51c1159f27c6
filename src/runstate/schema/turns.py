"""Turns: one user's heavy work, one piece at a time per process."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator


class Turns:
    """Each user's turns at one kind of heavy work, one at a time on this process:
    reads that pay for their estimate (``bounds.BoundedAnswers``), a replay's pages
    (``Context.replaying``).

    Eight of the heaviest reads the limits let through (30 MB each), sent at once
    by one user, ran side by side, each decoding and building its answer in the
    event loop's thread: another user's small read waited behind all of them
    (p99 = max 5.54 s). Taking turns, a user's heavy work costs the others at most
    one such piece's time at once, while other users' still runs beside it.
    """

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._waiting: Counter[str] = Counter()

    def queued(self, user_id: str) -> int:
        """The user's pieces of work holding or waiting for their turn."""
        return self._waiting[user_id]

    @contextlib.asynccontextmanager
    async def turn(self, user_id: str) -> AsyncIterator[None]:
        """Wait for the user's turn, and hold it until the block ends."""
        lock = self._locks.setdefault(user_id, asyncio.Lock())
        self._waiting[user_id] += 1
        try:
            async with lock:
                yield
        finally:
            self._waiting[user_id] -= 1
            if not self._waiting[user_id]:  # nobody holds or awaits it: let it go
                del self._waiting[user_id], self._locks[user_id]
