"""Opening the database and applying migrations, shared by the server and the CLI."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tortoise import Tortoise
from tortoise.backends.asyncpg.client import AsyncpgDBClient
from tortoise.backends.base.config_generator import expand_db_url
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
        connection = _with_sqlite_pragmas(database_url)
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
        path = database_url.removeprefix("sqlite://").split("?", 1)[0]
        if path in ("", ":memory:"):
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


async def open_database(database_url: str) -> str:
    """Apply pending migrations (one process at a time), open the connections, and
    return the database's installation id."""
    if urlsplit(database_url).scheme == "sqlite":
        check_sqlite()
    config = tortoise_config(database_url)
    async with _migration_lock(database_url):
        try:
            await migrate(config=config)
        finally:
            await Tortoise.close_connections()
        # The ASGI lifespan runs in its own task, so request tasks cannot see a context
        # set there through contextvars; the global fallback makes it visible to them.
        await Tortoise.init(config=config, _enable_global_fallback=True)
        await clock.sync()  # from now on, every judgement is by the database's clock
        row = await Installation.first()
        if row is None:
            row = await Installation.create(id=str(uuid.uuid4()), created_at=clock.utcnow())
        if row.epoch is None:  # a database from before epochs: its timeline starts now
            row.epoch = str(uuid.uuid4())
            await row.save(update_fields=["epoch"])
        return row.id


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


TORTOISE_ORM = tortoise_config(
    os.environ.get("RUNSTATE_DATABASE_URL", "sqlite://runstate.db")
)
"""For Tortoise's own CLI: ``tortoise -c runstate.storage.database.TORTOISE_ORM makemigrations``."""


async def close_database() -> None:
    """Close every connection opened by ``open_database``."""
    await Tortoise.close_connections()
    clock.forget()
