"""The database URL as the operator wrote it: every parameter reaches every
connection, the migration lock's included, and an old SQLite is refused at start."""

from __future__ import annotations

import asyncio

import asyncpg  # type: ignore[import-untyped]
import pytest

from runstate.storage.database import _migration_lock, check_sqlite, current_epoch
from tests.support import POSTGRES_URL, opened, postgres_database, require_service

PROBE = "runstate-lock-probe"


async def lock_holders() -> list[str]:
    """The application names of the sessions holding runstate's migration lock."""
    conn = await asyncpg.connect(POSTGRES_URL.replace("postgres://", "postgresql://", 1))
    try:
        rows = await conn.fetch(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a"
            " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
        )
    finally:
        await conn.close()
    return [r["application_name"] for r in rows]


@pytest.mark.postgres
async def test_the_migration_lock_keeps_every_url_parameter() -> None:
    """Guards ``database.lock_connection``: the lock's connection is made from the whole
    URL. With the parameters dropped (the lock connected to scheme, host and path
    alone, as before), the holder shows no application name and ``sslmode=require``
    connects without SSL: both assertions fail."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    async with _migration_lock(f"{POSTGRES_URL}?sslmode=disable&application_name={PROBE}"):
        assert await lock_holders() == [PROBE]
    assert await lock_holders() == []
    # This server speaks no SSL: a lock asked to require it cannot connect.
    with pytest.raises(ConnectionError, match="rejected SSL upgrade"):
        async with _migration_lock(f"{POSTGRES_URL}?sslmode=require"):
            pytest.fail("the lock connected without the SSL its URL requires")


@pytest.mark.postgres
def test_a_server_starts_on_a_url_with_sslmode() -> None:
    """Guards ``database._postgres_connection``: libpq's ``sslmode`` becomes asyncpg's
    ``ssl``. Handed to Tortoise as it is, asyncpg refuses the keyword
    (TypeError: unexpected keyword argument 'sslmode') and nothing starts."""

    async def start(url: str) -> None:
        async with opened(url):  # open_database, Tortoise's statement cache cleared first
            assert await current_epoch()

    with postgres_database() as url:
        asyncio.run(start(f"{url}?sslmode=disable"))


def test_an_old_sqlite_is_refused_at_start() -> None:
    """Guards ``database.check_sqlite``: SQLite before 3.35 has no RETURNING, and the
    server says so when it starts instead of failing at its first write."""
    with pytest.raises(RuntimeError, match=r"needs SQLite 3\.35\.0 or newer.*has SQLite 3\.34\.1"):
        check_sqlite((3, 34, 1))
    check_sqlite((3, 35, 0))
