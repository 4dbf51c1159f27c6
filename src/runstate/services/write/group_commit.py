"""Group commit: on SQLite, task writes that arrive together share one transaction.

SQLite gives a process one connection, and a write holds it from BEGIN to COMMIT
across its round trips to SQLite's thread; each also pays its own COMMIT, an
fsync of the write-ahead log under ``synchronous=FULL`` (about 370 us of the
650 us of database time a write takes). So sixteen clients queue one transaction
at a time. Here the writes that are waiting when the connection comes free go in
together: one transaction, each write inside a SAVEPOINT of its own (a refused or
failed write rolls back only itself), one COMMIT, and only then is any of them
answered. A write alone runs in a plain transaction, exactly as before.

PostgreSQL writes keep transactions of their own: its pool runs them side by
side. A write inside another's transaction (a task write inside the transaction
of its idempotency key, which goes through the group itself) runs in it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tortoise import connections
from tortoise.backends.base.client import BaseDBAsyncClient, TransactionalDBClient
from tortoise.transactions import in_transaction

from runstate.storage.database import fresh_context

T = TypeVar("T")
Work = Callable[[BaseDBAsyncClient], Awaitable[T]]
"""A write's statements, run on the connection (or savepoint) it is given."""


class Group:
    """One house's queue of SQLite writes waiting for the connection."""

    def __init__(self) -> None:
        self._waiting: deque[tuple[Work[Any], asyncio.Future[Any]]] = deque()
        self._leader: asyncio.Task[None] | None = None
        self.transactions = 0
        """Transactions run for queued writes (a test counts them)."""

    async def run(self, work: Work[T]) -> T:
        """``work`` in a transaction; its result once that transaction committed.
        Inside another's transaction (a task write inside its idempotency key's),
        ``work`` runs on it, with no savepoint of its own: its failure fails the
        outer transaction as well, which is what that one wants (a refused write
        keeps no key), and a savepoint cost two statements a keyed write."""
        client = connections.get("default")
        if isinstance(client, TransactionalDBClient):
            return await work(client)
        if client.capabilities.dialect != "sqlite":
            async with in_transaction() as conn:
                return await work(conn)
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.append((work, done))
        if self._leader is None:
            # A context of its own: the writes it runs belong to other requests.
            self._leader = asyncio.create_task(
                self._lead(), name="runstate-group-commit", context=fresh_context()
            )
        return await done

    async def _lead(self) -> None:
        """Run the waiting writes, a batch per transaction, until none is left."""
        batch: list[tuple[Work[Any], asyncio.Future[Any]]] = []
        try:
            while self._waiting:
                batch = list(self._waiting)
                self._waiting.clear()
                outcomes: list[tuple[asyncio.Future[Any], bool, Any]] = []
                try:
                    async with in_transaction() as conn:
                        for work, done in batch:
                            outcomes.append((done, *await _one(conn, work, len(batch) > 1)))
                        if len(batch) == 1 and not outcomes[0][1]:
                            raise _Failed  # a lone write's failure rolls its transaction back
                except _Failed:
                    pass
                except Exception as error:  # BEGIN or COMMIT failed: so did every write
                    outcomes = [(done, False, error) for _, done in batch]
                self.transactions += 1
                for done, ok, value in outcomes:
                    if done.done():  # its caller is gone; the write stands
                        continue
                    if ok:
                        done.set_result(value)
                    else:
                        done.set_exception(value)
        finally:  # cancelled (the server stops): nobody is left waiting forever
            for _, done in [*batch, *self._waiting]:
                done.cancel()
            self._waiting.clear()
            self._leader = None


class _Failed(Exception):  # noqa: N818 - a signal, not an error
    """Rolls back the transaction of a lone write that failed (its error is kept)."""


async def _one(conn: BaseDBAsyncClient, work: Work[Any], savepoint: bool) -> tuple[bool, Any]:
    """Run one write, inside a savepoint when it shares the transaction: (ok, result
    or exception)."""
    try:
        if not savepoint:
            return True, await work(conn)
        async with in_transaction() as nested:  # inside the batch's: a SAVEPOINT
            return True, await work(nested)
    except Exception as error:
        return False, error
