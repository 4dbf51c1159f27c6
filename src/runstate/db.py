"""Opening the database and applying migrations, shared by the server and the CLI."""

from __future__ import annotations

import os
from typing import Any

from tortoise import Tortoise
from tortoise.migrations.api.migrate import migrate

APP = "runstate"


def tortoise_config(database_url: str) -> dict[str, Any]:
    """The Tortoise configuration for one database URL (``sqlite://``, ``postgres://``)."""
    return {
        "connections": {"default": _with_sqlite_pragmas(database_url)},
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


def _with_sqlite_pragmas(url: str) -> str:
    """SQLite waits for another process's write instead of failing at once."""
    if not url.startswith("sqlite://") or "busy_timeout" in url:
        return url
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}busy_timeout=30000"


async def open_database(database_url: str) -> None:
    """Apply pending migrations, then open the connections for queries."""
    config = tortoise_config(database_url)
    try:
        await migrate(config=config)
    finally:
        await Tortoise.close_connections()
    # The ASGI lifespan runs in its own task, so request tasks cannot see a context set
    # there through contextvars; the global fallback makes it visible to all of them.
    await Tortoise.init(config=config, _enable_global_fallback=True)


TORTOISE_ORM = tortoise_config(os.environ.get("RUNSTATE_DATABASE_URL", "sqlite://runstate.db"))
"""For Tortoise's own CLI: ``tortoise -c runstate.db.TORTOISE_ORM makemigrations``."""


async def close_database() -> None:
    """Close every connection opened by ``open_database``."""
    await Tortoise.close_connections()
