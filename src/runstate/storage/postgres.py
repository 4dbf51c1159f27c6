"""Tortoise's asyncpg engine, with a pool that gives a connection back without a
round trip: ``"engine": "runstate.storage.postgres"`` in a Tortoise configuration.

asyncpg resets a connection given back to its pool with one query (advisory locks
released, cursors closed, LISTENs dropped, settings reset): a ninth round trip
for every write, and a send that wakes a server process. runstate's pooled
connections take no advisory lock (the migration lock has a connection of its
own, ``database.lock_connection``), open no cursor, LISTEN to nothing and change no
setting, so there is nothing to reset. An open transaction is still rolled back:
asyncpg does that itself before calling the pool's ``reset``.
"""

from __future__ import annotations

from typing import Any

import asyncpg  # type: ignore[import-untyped]
from tortoise.backends.asyncpg.client import AsyncpgDBClient


async def _nothing_to_reset(connection: asyncpg.Connection) -> None:
    """The pool's ``reset``: asyncpg has already rolled back any open transaction."""


class PooledClient(AsyncpgDBClient):
    """``AsyncpgDBClient`` on a pool that skips asyncpg's reset query."""

    async def create_pool(self, **kwargs: Any) -> asyncpg.Pool:
        return await asyncpg.create_pool(None, reset=_nothing_to_reset, **kwargs)


client_class = PooledClient
