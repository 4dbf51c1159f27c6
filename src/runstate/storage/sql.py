"""Raw SQL through Tortoise's own connection, for statements the ORM cannot say in one.

The write path opens with an UPDATE ... RETURNING (the row as the compare-and-swap
left it, with the session and the step it touches, in one statement), and history
reads need "the latest version at or before a seq" per step. Both are plain SQL
that SQLite (3.35+) and PostgreSQL share; only the placeholders differ. Values go
in as parameters, in the form Tortoise itself writes them, and come back through
the model fields' own decoding.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.exceptions import IntegrityError, OperationalError
from tortoise.fields import DatetimeField, Field
from tortoise.models import Model
from tortoise.queryset import DeleteQuery, UpdateQuery

_MARK_OR_LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?")
"""A ``?`` placeholder, or a quoted string or name to leave as it is."""

CHUNK = 500
"""Values per ``IN (...)``: SQLite binds at most 999 variables in one statement."""

T = TypeVar("T")


def chunks(items: Sequence[T]) -> Iterator[list[T]]:
    """``items`` in slices of at most ``CHUNK``, one statement's worth each."""
    for start in range(0, len(items), CHUNK):
        yield list(items[start : start + CHUNK])


def numbered(conn: BaseDBAsyncClient, sql: str) -> str:
    """``sql`` written with ``?`` placeholders, in the connection's own style."""
    return in_dialect(conn.capabilities.dialect, sql)


@functools.lru_cache(maxsize=1024)
def in_dialect(dialect: str, sql: str) -> str:
    """``sql``'s ``?`` placeholders as ``dialect`` writes them: as they are on SQLite,
    ``$1``, ``$2``, ... on PostgreSQL. A ``?`` inside a quoted literal or name is
    text, not a placeholder, and stays. Rewritten once per statement and dialect:
    the write path's statements are a few fixed texts."""
    if dialect == "sqlite":
        return sql
    counter = itertools.count(1)

    def mark(found: re.Match[str]) -> str:
        text = found.group()
        return f"${next(counter)}" if text == "?" else text

    return _MARK_OR_LITERAL.sub(mark, sql)


async def fetch(conn: BaseDBAsyncClient, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    """The rows of ``sql`` (``?`` placeholders) as dicts of column to raw value."""
    return [dict(r) for r in await conn.execute_query_dict(numbered(conn, sql), list(params))]


async def execute(conn: BaseDBAsyncClient, sql: str, params: Sequence[Any]) -> None:
    """Run ``sql`` (``?`` placeholders) for its effect."""
    await conn.execute_query(numbered(conn, sql), list(params))


Statement = tuple[str, Sequence[Any]]


PG_PARAMS = 32_767
"""Parameters ``run_all`` binds in one PostgreSQL statement: the most asyncpg sends."""


async def run_all(conn: BaseDBAsyncClient, statements: Sequence[Statement]) -> list[dict[str, Any]]:
    """Run ``statements`` (``?`` placeholders); the rows of the last. They must not
    read one another's changes (a write's tail: rows built from values in hand).

    On SQLite all of them run in one call, in order (inside a transaction on the
    loop's own thread, ``storage.sqlite``; outside one, a single trip to SQLite's
    thread): a statement a trip, a write held the one connection across nine of
    them, each waiting its turn on the busy event loop. On PostgreSQL they go as
    one statement, all but the last as data-modifying WITH queries of the last
    (``joined``): one round trip to the server instead of one each, and each of
    those a send that wakes a server process. Errors are Tortoise's, as one
    statement at a time raises them."""
    if not statements:
        return []
    if conn.capabilities.dialect != "sqlite":
        rows: list[dict[str, Any]] = []
        for group in _groups(statements):
            rows = await fetch(conn, *joined(group))
        return rows
    found: list[dict[str, Any]] = await _in_sqlite_thread(conn, _run_all, statements)
    return found


async def _in_sqlite_thread(
    conn: BaseDBAsyncClient,
    run: Callable[[sqlite3.Connection, Sequence[Statement]], T],
    statements: Sequence[Statement],
) -> T:
    """``run(db, statements)`` in one call where the connection runs its statements
    (a transaction's: the loop's thread; else SQLite's, in one trip), its errors
    raised as Tortoise raises them for one statement at a time."""
    async with conn.acquire_connection() as raw:
        try:
            done: T = await raw._execute(run, raw._conn, statements)
        except sqlite3.IntegrityError as error:
            raise IntegrityError(error) from error
        except sqlite3.OperationalError as error:
            raise OperationalError(error) from error
    return done


def _executed(db: sqlite3.Connection, statement: Statement) -> list[Any]:
    """One statement's rows, where the connection runs it (a NUL in its text written as
    ``CHAR(0)``, which SQLite's parser would take for the text's end)."""
    text, params = statement
    return db.execute(text.replace("\x00", "'||CHAR(0)||'"), list(params)).fetchall()


async def stored_each(conn: BaseDBAsyncClient, inserts: Sequence[Statement]) -> list[int | None]:
    """Run ``INSERT ... RETURNING "stored_bytes"`` statements together: the bytes
    each stored (None: it stored no row, every row's key being held already).

    On SQLite they run in one call (``run_all``'s); on PostgreSQL as one
    statement, each a data-modifying WITH query whose rows a ``UNION ALL`` reads
    back by its position. As ``run_all``'s, they must not read one another's
    changes: inserts into different tables, or of different keys."""
    stored, _ = await stored_and_read(conn, inserts, None)
    return stored


async def stored_and_read(
    conn: BaseDBAsyncClient, inserts: Sequence[Statement], read: Statement | None
) -> tuple[list[int | None], list[Any]]:
    """``stored_each``, and in the same trip the rows of ``read``: a SELECT of one
    column, ``"packed"``, each row's values as one JSON array (``array``), which
    come back decoded (a list a row). ``read`` must not read the inserts' tables:
    on PostgreSQL it sees the statement's snapshot, taken before them."""
    if not inserts and read is None:
        return [], []
    if conn.capabilities.dialect == "sqlite":
        done: tuple[list[int | None], list[Any]] = await _in_sqlite_thread(
            conn, functools.partial(_stored_and_read, read=read), inserts
        )
        return done
    if not inserts:
        assert read is not None
        return [], [_loaded(r["packed"]) for r in await fetch(conn, *read)]
    stored: list[int | None] = []
    found: list[Any] = []
    groups = list(_groups(inserts))
    for n, group in enumerate(groups):
        parts = [
            f'SELECT {i} AS "part", "stored_bytes", CAST(NULL AS json) AS "packed" FROM _{i}'
            for i in range(len(group))
        ]
        withs = list(group)
        if read is not None and n == len(groups) - 1:  # the read goes with the last group
            parts.append(f'SELECT -1, NULL, "packed" FROM _{len(group)}')
            withs.append(read)
        part: list[int | None] = [None] * len(group)
        for row in await fetch(conn, *joined([*withs, (" UNION ALL ".join(parts), [])])):
            if row["part"] < 0:
                found.append(_loaded(row["packed"]))
            else:
                part[row["part"]] = (part[row["part"]] or 0) + int(row["stored_bytes"])
        stored += part
    return stored, found


def _loaded(value: Any) -> Any:
    """A JSON value as the driver gives it: text, or already decoded."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def _stored_and_read(
    db: sqlite3.Connection, inserts: Sequence[Statement], read: Statement | None
) -> tuple[list[int | None], list[Any]]:
    """``stored_and_read`` where the connection runs it."""
    stored: list[int | None] = []
    for insert in inserts:
        rows = _executed(db, insert)
        stored.append(sum(int(r[0]) for r in rows) if rows else None)
    found = [] if read is None else [_loaded(r[0]) for r in _executed(db, read)]
    return stored, found


def _groups(statements: Sequence[Statement]) -> Iterator[list[Statement]]:
    """``statements`` in runs of at most ``PG_PARAMS`` parameters (or one statement)."""
    group: list[Statement] = []
    bound = 0
    for statement in statements:
        if group and bound + len(statement[1]) > PG_PARAMS:
            yield group
            group, bound = [], 0
        group.append(statement)
        bound += len(statement[1])
    yield group


def joined(statements: Sequence[Statement]) -> Statement:
    """Statements as one for PostgreSQL: ``WITH _0 AS (first), ... last``. Every
    data-modifying WITH query runs once, to completion, on the statement's one
    snapshot, so none sees another's changes (``run_all``'s rule)."""
    *before, (last, params) = statements
    if not before:
        return last, params
    queries = ", ".join(f"_{i} AS ({text})" for i, (text, _) in enumerate(before))
    bound = [value for _, values in before for value in values]
    return f"WITH {queries} {last}", [*bound, *params]


def _run_all(db: sqlite3.Connection, statements: Sequence[Statement]) -> list[dict[str, Any]]:
    """``run_all`` where the connection runs it."""
    rows: list[Any] = []
    for statement in statements:
        rows = _executed(db, statement)
    return [dict(r) for r in rows]


def marks(values: Sequence[Any]) -> str:
    """One ``?`` per value, comma-separated: the inside of an ``IN (...)``."""
    return ", ".join("?" for _ in values)


def names(columns: Sequence[str], alias: str = "") -> str:
    """Quoted column names, comma-separated, each after ``alias.`` if given."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f'{prefix}"{name}"' for name in columns)


Fragment = tuple[str, list[Any]]
"""A piece of SQL with ``?`` placeholders, and its parameters in order."""


def both(*parts: Fragment) -> Fragment:
    """Conditions joined with AND."""
    return " AND ".join(f"({text})" for text, _ in parts), [p for _, ps in parts for p in ps]


def assignments(
    model: type[Model], values: Mapping[str, Any], increments: Sequence[str] = ()
) -> Fragment:
    """An UPDATE's SET list: ``values`` as Tortoise writes them, ``increments`` raised by 1."""
    sets = [f'"{name}" = "{name}" + 1' for name in increments]
    sets += [f'"{name}" = ?' for name in values]
    return ", ".join(sets), [db_value(model, name, value) for name, value in values.items()]


def update_row(model: type[Model], pk: int, columns: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """``UPDATE`` of one row by primary key, and its parameters: on the write path,
    where building the same statement through the ORM costs more than running it."""
    sets = ", ".join(f'"{name}" = ?' for name in columns)
    params = [db_value(model, name, value) for name, value in columns.items()]
    return f'UPDATE "{model._meta.db_table}" SET {sets} WHERE "id" = ?', [*params, pk]


def insert_rows(model: type[Model], rows: Sequence[Mapping[str, Any]]) -> tuple[str, list[Any]]:
    """One ``INSERT`` of ``rows`` (each with the same columns, ids left to the
    database), and its parameters: the write path's history and event rows."""
    fields = list(rows[0])
    params = [db_value(model, field, row[field]) for row in rows for field in fields]
    quoted = names([model._meta.fields_db_projection[field] for field in fields])
    values = ", ".join(f"({marks(fields)})" for _ in rows)
    return f'INSERT INTO "{model._meta.db_table}" ({quoted}) VALUES {values}', params


def columns(model: type[Model], *leaving: str) -> tuple[str, ...]:
    """Every column of ``model``'s table by field name, foreign keys' ``<name>_id``
    included, but those ``leaving``: the lists a statement reads back, derived from
    the model so that none can miss a column added to it. (Tortoise lists a foreign
    key's column among the fields only once it is initialised.)"""
    meta = model._meta
    keys = [meta.fields_map[name].source_field or f"{name}_id" for name in sorted(meta.fk_fields)]
    names = dict.fromkeys([*meta.fields_db_projection, *keys])
    return tuple(name for name in names if name not in leaving)


def db_value(model: type[Model], field: str, value: Any) -> Any:
    """A Python value as Tortoise writes it to ``model.field``'s column."""
    return model._meta.fields_map[field].to_db_value(value, model)


def decode(
    model: type[Model], row: Mapping[str, Any], names: Sequence[str], prefix: str = ""
) -> dict[str, Any]:
    """The named fields of ``model`` from a raw row whose columns carry ``prefix``."""
    fields_map = model._meta.fields_map
    return {name: _python(fields_map[name], row[prefix + name]) for name in names}


def _python(field: Field[Any], value: Any) -> Any:
    """A column's value as the field gives it. SQLite keeps times as ISO 8601 text,
    which the field parses in pure Python (iso8601), a tenth of a write's time on
    the write path; ``datetime.fromisoformat`` reads Tortoise's own format in C,
    and the field still sets the time zone."""
    if isinstance(value, str) and isinstance(field, DatetimeField):
        with contextlib.suppress(ValueError):  # not Tortoise's format: the field parses it
            value = datetime.fromisoformat(value)
    return field.to_python_value(value)


def packed(dialect: str, alias: str, fields: Sequence[str], source: str, table: str) -> str:
    """A scalar subquery returning the columns ``fields`` of the one row of ``table``
    that ``source`` (its alias and WHERE clause) picks, as one JSON array named
    ``alias``: one lookup for all of them (None when there is no such row)."""
    packing = array(dialect, (fields, source.split()[0]))
    return f'(SELECT {packing} FROM "{table}" {source}) AS "{alias}"'


def array(dialect: str, *parts: tuple[Sequence[str], str]) -> str:
    """The columns of each part (its fields, of the row its alias names), in order,
    as one JSON array: the form ``unpacked`` reads."""
    pack = "json_array" if dialect == "sqlite" else "json_build_array"
    return f"{pack}({', '.join(names(fields, alias) for fields, alias in parts)})"


def unpacked(model: type[Model], value: Any, names: Sequence[str]) -> dict[str, Any]:
    """The fields ``names`` of ``model`` from a ``packed`` column (JSON text, or the
    list a driver already decoded)."""
    return decode(model, dict(zip(names, _loaded(value), strict=True)), names)


async def update_returning(
    conn: BaseDBAsyncClient, query: UpdateQuery | DeleteQuery, returning: str
) -> list[dict[str, Any]]:
    """Run a Tortoise ``.update()`` (or ``.delete()``) with a RETURNING clause: one
    statement that both writes and reads back the rows it matched."""
    query.sql()  # builds ``query.query`` for this connection's dialect
    sql, params = query.query.get_parameterized_sql()
    rows = await conn.execute_query_dict(f"{sql} RETURNING {returning}", list(params))
    return [dict(r) for r in rows]
