"""Group commit: on SQLite, task writes that arrive together share one transaction.

SQLite gives a process one connection, and a write holds it from BEGIN to COMMIT
(its statements on the loop's thread, ``storage.sqlite``); each also pays its own COMMIT, an
fsync of the write-ahead log under ``synchronous=FULL`` (about 370 us of the
650 us of database time a write takes). So sixteen clients queue one transaction
at a time. Here the writes that are waiting when the connection comes free go in
together: one transaction, each write inside a SAVEPOINT of its own (a refused or
failed write rolls back only itself), one COMMIT, and only then is any of them
answered. A write alone runs in a plain transaction, exactly as before.

PostgreSQL writes keep transactions of their own: its pool runs them side by
side. A write inside another's transaction (a task write inside the transaction
of its idempotency key, which goes through the group itself) runs in it, with no
savepoint of its own: a savepoint costs two statements, and a refused write fails
the outer transaction anyway (a refused write keeps no key). The one write that
must undo its own statements and let the outer transaction go on is one that
found nothing to change (``Unchanged``): its opening statement already moved the
task's version and seq. Then the outermost transaction is rolled back and run
again, each inner write in a savepoint (``_SavepointNeeded``); a keyed no-op, rare,
pays for it, and every other keyed write pays nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from functools import partial
from typing import Any, TypeVar

from tortoise import connections
from tortoise.backends.base.client import BaseDBAsyncClient, TransactionalDBClient
from tortoise.transactions import in_transaction

from runstate.storage.database import fresh_context

T = TypeVar("T")
Work = Callable[[BaseDBAsyncClient], Awaitable[T]]
"""A write's statements, run on the connection (or savepoint) it is given."""


class Unchanged(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a write that found nothing to change: every statement it ran is
    rolled back (its transaction, or its savepoint in a shared one), and its
    caller answers as things stand."""


class _SavepointNeeded(Exception):  # noqa: N818 - a signal, not an error
    """A write inside another's transaction, run with no savepoint of its own,
    raised ``Unchanged``: the statements it ran are in the outer transaction, which
    must roll back and run again with a savepoint around each inner write."""


_SAVEPOINTS: ContextVar[bool] = ContextVar("runstate_inner_savepoints", default=False)
"""Whether a write inside another's transaction gets a savepoint of its own (set
while an outer write runs again after ``_SavepointNeeded``)."""


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
        keeps no key), and a savepoint cost two statements a keyed write. When an
        inner write finds nothing to change, the outer ``work`` runs again with a
        savepoint around each inner write, so that the no-op writes nothing while
        the outer transaction (the key's row) commits."""
        client = connections.get("default")
        if isinstance(client, TransactionalDBClient):
            return await _inside(client, work)
        try:
            return await self._outermost(work)
        except _SavepointNeeded:
            return await self._outermost(partial(_with_savepoints, work))

    async def _outermost(self, work: Work[T]) -> T:
        """``work`` in a transaction of its own, or in the SQLite batch's."""
        client = connections.get("default")
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


async def _inside(client: TransactionalDBClient, work: Work[T]) -> T:
    """``work`` inside the transaction ``client`` holds: in a savepoint of its own
    while ``_SAVEPOINTS`` says so, else straight on it (``_SavepointNeeded`` when it
    then finds nothing to change)."""
    if _SAVEPOINTS.get():
        async with in_transaction() as nested:  # inside the outer one: a SAVEPOINT
            return await work(nested)
    try:
        return await work(client)
    except Unchanged:
        raise _SavepointNeeded from None


async def _with_savepoints(work: Work[T], conn: BaseDBAsyncClient) -> T:
    """``work`` on ``conn``, each write it runs inside its transaction in a
    savepoint of its own. Set here, in the context the work runs in (SQLite's
    batches run in the group's task, not the caller's)."""
    token = _SAVEPOINTS.set(True)
    try:
        return await work(conn)
    finally:
        _SAVEPOINTS.reset(token)


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
