"""The migrations match the models, and the log's guard survives them all.

Step 1 of "Adding a field" (docs/architecture.md) is ``make migrations``: it must
write the new field alone. A change the migrations never recorded comes along in
that file, and on SQLite Tortoise carries out an ``AlterField`` by rebuilding the
table without its unique indexes (0006 and 0017 say how ``task_events`` lost
UNIQUE (task_id, seq) that way).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from tortoise.backends.base.executor import EXECUTOR_CACHE
from tortoise.context import TortoiseContext
from tortoise.migrations.api.migrate import migrate
from tortoise.migrations.autodetector import MigrationAutodetector

from runstate.models import Task
from runstate.services.actions import sessions, tasks
from runstate.services.domain.validation import StepPlan
from runstate.storage.database import tortoise_config
from tests.support import database, opened


async def test_the_models_need_no_new_migration(tmp_path: Path) -> None:
    """Guards the migration state (0017 recorded ``TaskEvent.kind``'s description):
    on a clean tree Tortoise's own autodetector, the one ``make migrations`` runs,
    finds nothing to write. Seen failing with 0017 removed (it proposed
    ``AlterField(TaskEvent.kind)``)."""
    config = tortoise_config(f"sqlite://{tmp_path / 'detect.db'}")
    async with TortoiseContext() as ctx:
        await ctx.init(config=config)
        assert ctx.apps is not None
        detector = MigrationAutodetector(ctx.apps, config["apps"])
        writers = await detector.changes()
    assert [w.operations for w in writers] == []


INSERT_TWICE = (
    "INSERT INTO task_events (task_id, seq, task_version, kind, at, status)"
    " SELECT task_id, seq, task_version, kind, at, status FROM task_events WHERE seq = 1"
)
"""A second event at a (task, seq) that already holds one, in plain SQL."""


@pytest.fixture(params=["sqlite", "postgres"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each backend."""
    with database(request.param, tmp_path) as url:
        yield url


async def test_after_every_migration_a_second_event_at_one_seq_is_refused(fresh: str) -> None:
    """Guards the gap-free log's constraint as the migrations leave it: after all
    of them (a server's first start), on each backend, a second ``task_events`` row
    at a (task_id, seq) is refused by the database itself, and the
    ``task_events_part`` index is there. Seen failing on SQLite with 0017 as
    ``make migrations`` first wrote it (a real ``AlterField``: the duplicate was
    stored and the index gone)."""
    async with opened(fresh) as house:
        session = await sessions.start_session(house, "m", default_ttl=3600, session_id="s")
        await tasks.create_task(house, "m", session.id, goal="g", steps=[StepPlan("a")])
    if fresh.startswith("sqlite"):
        with sqlite3.connect(fresh.removeprefix("sqlite://")) as conn:
            with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
                conn.execute(INSERT_TWICE)
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    else:
        conn = await asyncpg.connect(fresh.replace("postgres://", "postgresql://", 1))
        try:
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(INSERT_TWICE)
            names = {r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes")}
        finally:
            await conn.close()
    assert "task_events_part" in names


STORED_BEFORE_0018 = [
    "INSERT INTO sessions (id, public_id, user_id, status, version, message_count, ttl_seconds,"
    " created_at, last_active_at, expires_at)"
    " VALUES (1, 's', 'm', 'ACTIVE', 1, 0, 3600, {now}, {now}, {now})",
    *(
        "INSERT INTO tasks (id, public_id, user_id, session_id, goal, status, version,"
        " current_step, total_steps, event_seq, lock_token, created_at, updated_at)"
        f" VALUES ({n}, 't{n}', 'm', 1, 'g', 'RUNNING', 1, 0, 2, 1, 0, {{now}}, {{now}})"
        for n in (1, 2, 3)
    ),
    *(
        "INSERT INTO steps (task_id, position, action, status, idempotent, attempts)"
        f" VALUES ({task}, {position}, '{action}', 'PENDING', {{yes}}, 0)"
        for task, position, action in (
            (1, 0, "openai-agents run"),
            (1, 1, "resume run"),
            (2, 0, "search"),
            (2, 1, "openai-agents run"),
            (3, 0, "openai-agents runs"),
        )
    ),
]
"""A run of the OpenAI Agents integration (task 1: its first step's action), as
stored before 0018, and two ordinary tasks whose steps name it elsewhere or
almost."""


async def test_0018_marks_the_runs_stored_before_it(fresh: str) -> None:
    """Guards 0018's data step: a run the OpenAI Agents integration saved before the
    upgrade (first step ``openai-agents run``) is marked ``openai-agents``, so its
    loader still finds it and ordinary claims pass it over; a task with that
    action at another position, or another action, stays ordinary. Seen failing
    with the ``RunSQL`` left out (every ``run_of`` NULL)."""
    EXECUTOR_CACHE.clear()
    async with TortoiseContext():
        await migrate(config=tortoise_config(fresh), target="runstate.0017_event_kind_descriptions")
    if fresh.startswith("sqlite"):
        with sqlite3.connect(fresh.removeprefix("sqlite://")) as db:
            for statement in STORED_BEFORE_0018:
                db.execute(statement.format(now="CURRENT_TIMESTAMP", yes=1))
    else:
        conn = await asyncpg.connect(fresh.replace("postgres://", "postgresql://", 1))
        try:
            for statement in STORED_BEFORE_0018:
                await conn.execute(statement.format(now="now()", yes="true"))
        finally:
            await conn.close()
    async with opened(fresh):  # migrates to the head, as a server's start does
        kinds = dict(await Task.all().order_by("id").values_list("public_id", "run_of"))
    assert kinds == {"t1": "openai-agents", "t2": None, "t3": None}


BEFORE_0019 = [
    "INSERT INTO sessions (id, public_id, user_id, status, version, message_count, ttl_seconds,"
    " created_at, last_active_at, expires_at) VALUES"
    " (1, 's-spent', 'm', 'ACTIVE', 1, 0, 3600, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP,"
    " CURRENT_TIMESTAMP), (2, 's-idle', 'm', 'ACTIVE', 1, 0, 3600, CURRENT_TIMESTAMP,"
    " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
    "INSERT INTO tasks (id, public_id, user_id, session_id, goal, status, version, current_step,"
    " total_steps, event_seq, lock_token, created_at, updated_at, spent_input_tokens,"
    " spent_output_tokens, spent_cost_micros, spent_calls) VALUES"
    " (1, 't-1', 'm', 1, 'g', 'RUNNING', 1, 0, 0, 1, 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP,"
    " 100, 20, 300, 2),"
    " (2, 't-2', 'm', 1, 'g', 'RUNNING', 1, 0, 0, 1, 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP,"
    " 5000000000, 1, 7, 1),"
    " (3, 't-3', 'm', 1, 'g', 'PLANNED', 1, 0, 0, 1, 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP,"
    " 0, 0, 0, 0)",
]
"""Two sessions as 0018's schema holds them: one with three tasks that spent
(a sum past 2^32 among them), one with none."""
TOTALS = (
    "SELECT public_id, spent_input_tokens, spent_output_tokens, spent_cost_micros, spent_calls"
    " FROM sessions ORDER BY id"
)


async def migrated_with(url: str, target: str, statements: list[str]) -> None:
    """The database at ``url`` migrated up to ``target``, ``statements`` run there
    (rows as that schema held them), then migrated to the end."""
    config = tortoise_config(url)
    EXECUTOR_CACHE.clear()
    async with TortoiseContext():
        await migrate(config=config, target=target)
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite://")) as db:
            for statement in statements:
                db.execute(statement)
    else:
        conn = await asyncpg.connect(url.replace("postgres://", "postgresql://", 1))
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()
    EXECUTOR_CACHE.clear()
    async with TortoiseContext():
        await migrate(config=config)


async def fetched(url: str, query: str) -> list[tuple[Any, ...]]:
    """The rows of ``query``, read straight from the database at ``url``."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite://")) as db:
            return [tuple(row) for row in db.execute(query)]
    conn = await asyncpg.connect(url.replace("postgres://", "postgresql://", 1))
    try:
        return [tuple(row) for row in await conn.fetch(query)]
    finally:
        await conn.close()


async def test_0019_fills_each_session_s_spend_from_its_tasks(fresh: str) -> None:
    """Guards migration 0019's fill (issue 54, item 6a): sessions written before it
    get, as it adds their running spend, the sums of their tasks' spend (their
    budgets are checked against those totals from then on), on SQLite and
    PostgreSQL alike; a session without tasks gets 0. Seen failing with the
    migration's ``RunSQL`` left out (every total 0)."""
    await migrated_with(fresh, "runstate.0018_run_kinds", BEFORE_0019)
    totals = await fetched(fresh, TOTALS)
    assert totals == [("s-spent", 5000000100, 21, 307, 3), ("s-idle", 0, 0, 0, 0)]


def _session_row(pk: int, user: str, spent: tuple[int, int, int, int]) -> str:
    return (
        "INSERT INTO sessions (id, public_id, user_id, status, version, message_count,"
        " ttl_seconds, created_at, last_active_at, expires_at, spent_input_tokens,"
        " spent_output_tokens, spent_cost_micros, spent_calls) VALUES"
        f" ({pk}, 's-{pk}', '{user}', 'ACTIVE', 1, 0, 3600, CURRENT_TIMESTAMP,"
        f" CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, {', '.join(map(str, spent))})"
    )


MAX_LONG = 2**53 - 1
BEFORE_0020 = [
    "INSERT INTO user_usage (user_id, stored_bytes) VALUES ('a', 500), ('b', 7)",
    _session_row(1, "a", (100, 20, 300, 2)),
    _session_row(2, "a", (5000000000, 1, 7, 1)),
    _session_row(3, "b", (MAX_LONG, 1, 2, 3)),
    _session_row(4, "b", (10, MAX_LONG + 5, 0, 1)),
    _session_row(5, "c", (1, 2, 3, 4)),
]
"""Sessions as 0019's schema holds them: user a's add up past 2^32; user b's pass
2^53 - 1 together (input) and alone (output: only an earlier release let that
happen); user c has no usage row."""
USERS = (
    "SELECT user_id, stored_bytes, spent_input_tokens, spent_output_tokens, spent_cost_micros,"
    " spent_calls FROM user_usage ORDER BY user_id"
)


async def test_0020_fills_each_user_s_spend_from_its_sessions(fresh: str) -> None:
    """Guards migration 0020's fill: users get, as it adds their running spend, the
    sums of their sessions' totals (``usage`` reads them, and reports are capped
    against them from then on), on SQLite and PostgreSQL alike, each at most
    2^53 - 1 (a session past it is set to it); a user with sessions but no usage
    row gets one; stored bytes stay. Seen failing with the ``RunPython`` left out
    (every total 0, no row for c)."""
    await migrated_with(fresh, "runstate.0019_session_spend", BEFORE_0020)
    users = await fetched(fresh, USERS)
    capped = (await fetched(fresh, "SELECT spent_output_tokens FROM sessions WHERE id = 4"))[0][0]
    assert users == [
        ("a", 500, 5000000100, 21, 307, 3),
        ("b", 7, MAX_LONG, MAX_LONG, 2, 4),
        ("c", 0, 1, 2, 3, 4),
    ]
    assert capped == MAX_LONG
