"""Opening the database and applying migrations, shared by the server and the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tortoise.backends.asyncpg.client import AsyncpgDBClient
from tortoise.backends.base.config_generator import expand_db_url
from tortoise.context import TortoiseContext, _current_context, get_current_context
from tortoise.migrations.api.migrate import migrate

from runstate.models import Installation
from runstate.storage import clock

APP = "runstate"
_MIGRATION_LOCK_KEY = 0x72756E7374617465  # "runstate"
_POSTGRES = ("postgres", "postgresql", "asyncpg")
MIN_SQLITE = (3, 35, 0)
"""The oldest SQLite runstate runs on: the write path needs ``UPDATE ... RETURNING``."""


def tortoise_config(database_url: str) -> dict[str, Any]:
    """The Tortoise configuration for one database URL (``sqlite://``, ``postgres://``)."""
    if urlsplit(database_url).scheme in _POSTGRES:
        connection: str | dict[str, Any] = _postgres_connection(database_url)
    else:
        connection = expand_db_url(_with_sqlite_pragmas(database_url))
        connection["engine"] = "runstate.storage.sqlite"
    return {
        "connections": {"default": connection},
        "apps": {
            APP: {
                "models": ["runstate.models"],
                "migrations": "runstate.models.migrations",
                "default_connection": "default",
            }
        },
        "use_tz": True,
        "timezone": "UTC",
    }


SQLITE_PRAGMAS = {"busy_timeout": 30000, "cache_size": -65536}
"""Set on every SQLite connection unless the URL sets them. ``busy_timeout``: wait
for another process's write instead of failing at once. ``cache_size``: 64 MiB of
pages (SQLite's default is 2 MiB): a database of a million tasks otherwise reads a
random old task's pages from the file (``bench/scale.py``: 1.26x the time of one of
10,000 for a page of events, 1.07x with it)."""


def _with_sqlite_pragmas(url: str) -> str:
    """``url`` with ``SQLITE_PRAGMAS`` added where it leaves them out (SQLite only)."""
    if not url.startswith("sqlite://"):
        return url
    query = urlsplit(url).query
    for name, value in SQLITE_PRAGMAS.items():
        if name not in query:
            url += f"{'&' if '?' in url else '?'}{name}={value}"
    return url


def _postgres_connection(url: str) -> dict[str, Any]:
    """Tortoise's connection settings for a PostgreSQL URL, on runstate's engine
    (``runstate.storage.postgres``: asyncpg's pool without its reset query). A URL that
    names libpq's ``sslmode``, which Tortoise would hand to asyncpg by that name
    (and asyncpg refuses), has it given as asyncpg's ``ssl`` (which takes the same
    names: disable, prefer, require, verify-ca, verify-full)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    modes = [value for name, value in query if name == "sslmode"]
    rest = urlencode([(name, value) for name, value in query if name != "sslmode"])
    expanded = expand_db_url(urlunsplit(parts._replace(query=rest)))
    if modes:
        expanded["credentials"]["ssl"] = modes[-1]
    expanded["engine"] = "runstate.storage.postgres"
    return expanded


def check_sqlite(version: tuple[int, ...] = sqlite3.sqlite_version_info) -> None:
    """Refuse to start on a SQLite older than ``MIN_SQLITE``, with what to do about it,
    instead of failing at the first write."""
    if version < MIN_SQLITE:
        found = ".".join(map(str, version))
        needed = ".".join(map(str, MIN_SQLITE))
        raise RuntimeError(
            f"runstate needs SQLite {needed} or newer (UPDATE ... RETURNING); this Python"
            f" has SQLite {found}: use a Python built with a newer SQLite, or PostgreSQL"
        )


@asynccontextmanager
async def _migration_lock(database_url: str) -> AsyncIterator[None]:
    """Hold a lock across processes while migrating, so servers may start together.

    SQLite: an exclusive ``flock`` on a file beside the database. PostgreSQL: a
    session-level advisory lock on a connection of its own, opened by Tortoise's own
    client from the same settings as the server's connections, so every parameter
    of the URL (``sslmode``, ``ssl``, timeouts, ...) applies to it as well.
    """
    url = urlsplit(database_url)
    if url.scheme == "sqlite":
        path = _sqlite_path(database_url)
        if path is None:
            yield
            return
        lock_file = await asyncio.to_thread(Path(f"{path}.migrate-lock").open, "a")
        try:
            await asyncio.to_thread(fcntl.flock, lock_file, fcntl.LOCK_EX)
            yield
        finally:
            lock_file.close()  # closing the file releases the lock
    elif url.scheme in _POSTGRES:
        async with lock_connection(database_url) as conn:
            await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
            yield
    else:
        yield


@asynccontextmanager
async def lock_connection(database_url: str) -> AsyncIterator[Any]:
    """One asyncpg connection of its own to the PostgreSQL of ``database_url``, made
    as the server's connections are (``tortoise_config``); closed on leaving."""
    connection = tortoise_config(database_url)["connections"]["default"]
    settings = dict(connection["credentials"], minsize=1, maxsize=1)
    client = AsyncpgDBClient(connection_name="runstate-migration-lock", **settings)
    await client.create_connection(with_db=True)
    try:
        async with client.acquire_connection() as conn:
            yield conn
    finally:
        await client.close()


def shown(database_url: str) -> str:
    """``database_url`` as a person should read it in a message: a SQLite file's
    path made absolute (a relative one is relative to the folder a command runs
    in, so the same URL names another file elsewhere), any password masked."""
    parts = urlsplit(database_url)
    if parts.scheme == "sqlite":
        path = _sqlite_path(database_url)
        return database_url if path is None else f"sqlite://{Path(path).absolute()}"
    if parts.password is None:
        return database_url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _sqlite_path(database_url: str) -> str | None:
    """The file of a ``sqlite://`` URL; None for an in-memory database."""
    path = database_url.removeprefix("sqlite://").split("?", 1)[0]
    return None if path in ("", ":memory:") else path


async def made(database_url: str) -> bool:
    """Whether the database exists and runstate has set it up (its ``installation``
    table), found without creating anything: a SQLite file is opened read-only, a
    PostgreSQL database through a connection of its own. For the commands that
    work on a server's database and must not make another where none is (``runstate
    token create`` in the wrong folder would, and its token open nothing). A
    PostgreSQL server that cannot be reached raises as connecting does."""
    table = Installation._meta.db_table
    scheme = urlsplit(database_url).scheme
    if scheme in _POSTGRES:
        async with lock_connection(database_url) as conn:
            return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table))
    path = _sqlite_path(database_url) if scheme == "sqlite" else None
    return path is not None and await asyncio.to_thread(_sqlite_holds, path, table)


def _sqlite_holds(path: str, table: str) -> bool:
    """Whether the SQLite file ``path`` exists and has ``table``; read-only, so a
    missing file stays missing."""
    if not Path(path).is_file():
        return False
    uri = f"{Path(path).absolute().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        )
        return found.fetchone() is not None


class Database:
    """One database's connections and clock, owned by whoever opened it: a Tortoise
    context of its own (``TortoiseContext``), so that two apps in one process share
    no connection, and stopping one leaves the other's open. An app runs its
    requests and tasks in its context (``transport.in_database``); the CLI and the
    tests open theirs as the process's default (``open_database``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.context = TortoiseContext()
        self.installation = ""
        """The database's installation id, once open."""

    @contextmanager
    def current(self) -> Iterator[None]:
        """This database for the code inside and the tasks it starts. Re-entrant, as
        ``TortoiseContext``'s own ``with`` is not: that keeps one token on the
        context object, so two requests in it at once would reset each other's."""
        token = _current_context.set(self.context)
        try:
            yield
        finally:
            _current_context.reset(token)

    async def open(self, *, default: bool = False) -> str:
        """Apply pending migrations, open the connections, anchor the clock to the
        database's, and return the installation id, made if missing: all of it one
        process at a time, so servers started together agree on one installation.
        ``default``: also the process's default context, which code running in no
        context of its own uses (Tortoise allows one)."""
        if urlsplit(self.url).scheme == "sqlite":
            check_sqlite()
        config = tortoise_config(self.url)
        with self.current():
            async with _migration_lock(self.url):
                try:
                    await migrate(config=config)
                finally:
                    await self.context.close_connections()
                await self.context.init(config=config, _enable_global_fallback=default)
                await clock.sync()  # from now on, every judgement is by the database's clock
                # Still under the lock: servers started together make one row, not one each.
                row = await Installation.first()
                if row is None:
                    row = await Installation.create(id=str(uuid.uuid4()), created_at=clock.utcnow())
                if row.epoch is None:  # a database from before epochs: its timeline starts now
                    row.epoch = str(uuid.uuid4())
                    await row.save(update_fields=["epoch"])
        self.installation = row.id
        return row.id

    async def close(self) -> None:
        """Close the connections ``open`` opened, and forget the clock's anchor."""
        with self.current():
            clock.forget()
            await self.context.close_connections()


def fresh_context() -> contextvars.Context:
    """A context for a task that serves several callers (the group commit's): none
    of the caller's context variables, but the database in use."""
    context = contextvars.Context()
    context.run(_current_context.set, get_current_context())
    return context


async def open_database(database_url: str) -> Database:
    """The database opened as the process's default (``Database.open``): what the
    CLI's commands and the tests that call the services directly use."""
    database = Database(database_url)
    await database.open(default=True)
    return database


async def current_epoch() -> str:
    """The database's timeline (``Installation.epoch``); ``open_database`` first."""
    row = await Installation.first()
    if row is None or row.epoch is None:
        raise RuntimeError("open_database sets the epoch")
    return row.epoch


async def new_epoch() -> str:
    """Start a new timeline: what ``runstate restore-mark`` does after a restore, so
    that a client's cursor from before it gets a SNAPSHOT, not events of another
    history that happen to carry the seqs it expects."""
    epoch = str(uuid.uuid4())
    await Installation.all().update(epoch=epoch)
    return epoch


TORTOISE_ORM = tortoise_config(os.environ.get("RUNSTATE_DATABASE_URL", "sqlite://runstate.db"))
"""For Tortoise's own CLI: ``tortoise -c runstate.storage.database.TORTOISE_ORM makemigrations``."""
