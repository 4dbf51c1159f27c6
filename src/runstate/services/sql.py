"""Raw SQL through Tortoise's own connection, for statements the ORM cannot say in one.

The write path opens with an UPDATE ... RETURNING (the row as the compare-and-swap
left it, with the session and the step it touches, in one statement), and history
reads need "the latest version at or before a seq" per step. Both are plain SQL
that SQLite (3.35+) and PostgreSQL share; only the placeholders differ. Values go
in as parameters, in the form Tortoise itself writes them, and come back through
the model fields' own decoding.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.models import Model
from tortoise.queryset import DeleteQuery, UpdateQuery

_QMARK = re.compile(r"\?")

CHUNK = 500
"""Values per ``IN (...)``: SQLite binds at most 999 variables in one statement."""

T = TypeVar("T")


def chunks(items: Sequence[T]) -> Iterator[list[T]]:
    """``items`` in slices of at most ``CHUNK``, one statement's worth each."""
    for start in range(0, len(items), CHUNK):
        yield list(items[start : start + CHUNK])


def numbered(conn: BaseDBAsyncClient, sql: str) -> str:
    """``sql`` written with ``?`` placeholders, in the connection's own style."""
    if conn.capabilities.dialect == "sqlite":
        return sql
    counter = itertools.count(1)
    return _QMARK.sub(lambda _: f"${next(counter)}", sql)


async def fetch(conn: BaseDBAsyncClient, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    """The rows of ``sql`` (``?`` placeholders) as dicts of column to raw value."""
    return [dict(r) for r in await conn.execute_query_dict(numbered(conn, sql), list(params))]


async def execute(conn: BaseDBAsyncClient, sql: str, params: Sequence[Any]) -> None:
    """Run ``sql`` (``?`` placeholders) for its effect."""
    await conn.execute_query(numbered(conn, sql), list(params))


def update_row(model: type[Model], pk: int, columns: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """``UPDATE`` of one row by primary key, and its parameters: on the write path,
    where building the same statement through the ORM costs more than running it."""
    sets = ", ".join(f'"{name}" = ?' for name in columns)
    params = [db_value(model, name, value) for name, value in columns.items()]
    return f'UPDATE "{model._meta.db_table}" SET {sets} WHERE "id" = ?', [*params, pk]


def db_value(model: type[Model], field: str, value: Any) -> Any:
    """A Python value as Tortoise writes it to ``model.field``'s column."""
    return model._meta.fields_map[field].to_db_value(value, model)


def decode(
    model: type[Model], row: Mapping[str, Any], names: Sequence[str], prefix: str = ""
) -> dict[str, Any]:
    """The named fields of ``model`` from a raw row whose columns carry ``prefix``."""
    fields_map = model._meta.fields_map
    return {name: fields_map[name].to_python_value(row[prefix + name]) for name in names}


async def update_returning(
    conn: BaseDBAsyncClient, query: UpdateQuery | DeleteQuery, returning: str
) -> list[dict[str, Any]]:
    """Run a Tortoise ``.update()`` (or ``.delete()``) with a RETURNING clause: one
    statement that both writes and reads back the rows it matched."""
    query.sql()  # builds ``query.query`` for this connection's dialect
    sql, params = query.query.get_parameterized_sql()
    rows = await conn.execute_query_dict(f"{sql} RETURNING {returning}", list(params))
    return [dict(r) for r in rows]
