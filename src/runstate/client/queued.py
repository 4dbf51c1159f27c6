"""``Queued``: a runner's writes sent in the background, one batch after another.

A ``TaskRunner`` with ``durability="async"`` puts the writes of idempotent steps
here and goes on with its next step while they travel. The writes that wait
while one is in flight go together next, as one batch (the runner sends a batch
as one ``checkpointTask``), so a queue never falls further behind than one write:
however fast the steps, at most what waited for one answer is lost with the
process. The queue is the task's one writer while it holds anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Write:
    """One write of a runner: its step changes (``checkpointTask`` patches) and the
    call that makes it alone, called when it is sent."""

    patches: list[dict[str, Any]]
    call: Callable[[], Awaitable[Any]]


Send = Callable[[list[Write]], Awaitable[None]]


class Queued:
    """Sends the writes put here in order on one background task, each batch of
    those waiting with one call of ``send``.

    A batch that fails stops the queue: the writes after it are dropped (sending
    them would record steps after a change the server never took), and the
    failure is raised again by every later ``put`` and ``drain``.
    """

    def __init__(self, send: Send, name: str) -> None:
        self._send = send
        self._waiting: list[Write] = []
        self._ready = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._failure: Exception | None = None
        self._sender = asyncio.create_task(self._run(), name=name)

    def put(self, write: Write) -> None:
        """Send ``write`` after every write put before it."""
        self._raise()
        self._waiting.append(write)
        self._settled.clear()
        self._ready.set()

    async def drain(self) -> None:
        """Wait until every write put so far is committed (or the queue stopped)."""
        await self._settled.wait()
        self._raise()

    async def close(self) -> None:
        """Stop the sender; writes still waiting are not sent."""
        self._sender.cancel()
        await asyncio.gather(self._sender, return_exceptions=True)

    def _raise(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._waiting = self._waiting, []
            try:
                if self._failure is None:
                    await self._send(batch)
            except Exception as failure:
                self._failure = failure
            finally:
                if not self._waiting:
                    self._settled.set()
