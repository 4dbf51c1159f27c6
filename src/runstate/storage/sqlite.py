"""Tortoise's SQLite engine, with a transaction's statements run on the event
loop's own thread: ``"engine": "runstate.storage.sqlite"`` in a Tortoise
configuration.

aiosqlite runs every call on a thread of its own and wakes the event loop with
the answer: for a small statement the hop costs more than SQLite's work (the
loop's self-pipe, a future, the GIL handed back and forth between the two
threads). A write is a transaction of ten or so such statements. Here a
transaction runs them where it is, on the loop's thread:

- ``BEGIN IMMEDIATE`` takes the database's write lock here when it is free (with
  ``busy_timeout`` 0 for that one statement); when another process holds it, the
  BEGIN goes to SQLite's thread and waits there (``busy_timeout``), not on the
  loop. With the lock held, the statements inside never wait on another process
  (WAL: readers do not block the writer).
- The statements between run on the loop's thread, each answered at once.
- ``COMMIT`` goes back to SQLite's thread: under ``synchronous=FULL`` it waits for
  the write-ahead log's fsync, which the loop should not.

Nothing else touches the connection meanwhile: Tortoise's SQLite client lends its
one connection under one lock, to a transaction for its whole length and to any
other statement for its own (``ConnectionWrapper``), so the two threads take turns
with it (the connection is opened with ``check_same_thread=False`` for that). One
case is left, a COMMIT still on SQLite's thread when the task that awaited it was
cancelled (the lock is let go then): a SQLite built serialized
(``sqlite3.threadsafety == 3``, Python's own) makes the next statement wait for
it. Built otherwise, the engine keeps Tortoise's own transactions, every
statement on SQLite's thread.
Statements outside a transaction (reads, of any length) keep SQLite's thread, so a
long read leaves the loop free.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import aiosqlite
from tortoise.backends.sqlite.client import (
    SqliteClient,
    SqliteTransactionContext,
    SqliteTransactionWrapper,
)
from tortoise.exceptions import TransactionManagementError

T = TypeVar("T")

SERIALIZED = 3
"""``sqlite3.threadsafety`` of a SQLite whose connections several threads may use
at once, each call waiting its turn (Python's own build)."""


def _begin(db: sqlite3.Connection) -> None:
    """In SQLite's thread: end what Tortoise's client would end before a BEGIN (a
    transaction left open), then take the write lock, waiting for it as long as
    ``busy_timeout`` says."""
    if db.in_transaction:
        db.commit()
    db.execute("BEGIN IMMEDIATE")


def _begun_here(db: sqlite3.Connection, busy_ms: int) -> bool:
    """On the loop's thread: take the write lock if it is free now (never waiting
    for it: ``busy_timeout`` 0 for that statement); False when another process
    holds it, or a transaction was left open, for ``_begin`` to do on SQLite's
    thread."""
    if db.in_transaction:
        return False
    db.execute("PRAGMA busy_timeout=0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode != sqlite3.SQLITE_BUSY:
            raise
        return False
    finally:
        db.execute(f"PRAGMA busy_timeout={busy_ms}")
    return True


class Here:
    """The part of ``aiosqlite.Connection`` that Tortoise's SQLite client and
    ``storage.sql`` use inside a transaction, run on the calling thread."""

    def __init__(self, threaded: aiosqlite.Connection) -> None:
        self.threaded = threaded
        """The connection's own, for what must leave the loop's thread."""
        self._conn: sqlite3.Connection = threaded._conn

    @property
    def total_changes(self) -> int:
        return self._conn.total_changes

    async def _execute(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> sqlite3.Cursor:
        return self._conn.execute(sql, [] if parameters is None else parameters)

    async def execute_fetchall(
        self, sql: str, parameters: Sequence[Any] | None = None
    ) -> list[Any]:
        return self._conn.execute(sql, [] if parameters is None else parameters).fetchall()

    async def execute_insert(self, sql: str, parameters: Sequence[Any] | None = None) -> Any:
        cursor = self._conn.execute(sql, [] if parameters is None else parameters)
        cursor.execute("SELECT last_insert_rowid()")
        return cursor.fetchone()

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, parameters)

    async def executescript(self, sql_script: str) -> sqlite3.Cursor:
        return self._conn.executescript(sql_script)

    async def commit(self) -> None:
        await self.threaded.commit()  # the fsync, off the loop

    async def rollback(self) -> None:
        self._conn.rollback()


class HereTransaction(SqliteTransactionWrapper):
    """A transaction whose statements run on the loop's thread (``Here``); its
    BEGIN and COMMIT on SQLite's."""

    def __init__(self, connection: SqliteClient) -> None:
        super().__init__(connection)
        self._threaded = self._connection
        self._connection = Here(self._threaded)  # type: ignore[assignment]

    async def begin(self) -> None:
        """The write lock taken here when it is free (the usual case: one process
        writes), else on SQLite's thread, which waits for it."""
        busy_ms = int(cast(SqliteClient, self._parent).pragmas.get("busy_timeout", 0))
        try:
            if not _begun_here(self._threaded._conn, busy_ms):
                await cast(Any, self._threaded)._execute(_begin, self._threaded._conn)
        except sqlite3.OperationalError as exc:
            raise TransactionManagementError(exc) from exc


class Client(SqliteClient):
    """Tortoise's SQLite client whose transactions are ``HereTransaction``s."""

    async def create_connection(self, with_db: bool) -> None:
        """Tortoise's, the connection open to the loop's thread too."""
        if self._connection:
            return
        self._connection = await aiosqlite.connect(
            self.filename, isolation_level=None, check_same_thread=False
        )
        self._connection._conn.row_factory = sqlite3.Row
        for pragma, value in self.pragmas.items():
            cursor = await self._connection.execute(f"PRAGMA {pragma}={value}")
            await cursor.close()
        await self._post_connect()

    def _in_transaction(self) -> SqliteTransactionContext:
        if sqlite3.threadsafety != SERIALIZED:
            return cast(SqliteTransactionContext, super()._in_transaction())
        return SqliteTransactionContext(HereTransaction(self), self._lock)


client_class = Client
