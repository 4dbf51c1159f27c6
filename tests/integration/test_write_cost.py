"""What a write costs follows its change, not the task's size: the statements of a
step write (SQLite and PostgreSQL), and the bytes the history of a long task keeps
(SQLite), in-process."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from tortoise import connections

from runstate.basics.enums import GraphNodeStatus, StepStatus
from runstate.services.actions import leases, sessions, tasks
from runstate.services.domain import spend
from runstate.services.domain.validation import ContentLimits, Report, StepPatch, StepPlan
from runstate.services.domain.views import BudgetView, TaskView, Written
from runstate.services.read import history, lookups
from runstate.services.threads import checkpoints, nodes
from runstate.services.write import engine, idempotency
from runstate.services.write.house import House
from runstate.storage import sql
from runstate.storage.clock import utcnow
from tests.support import opened, postgres_database

USER = "counter"
BEGUN = ["PRAGMA busy_timeout=0", "BEGIN IMMEDIATE", "PRAGMA busy_timeout=30000"]
"""How a transaction begins on SQLite (``storage.sqlite``): the write lock taken
on the loop's thread if it is free now, never waiting for it there."""
WRITE = [
    "UPDATE tasks SET",
    "UPDATE steps SET",
    "INSERT INTO step_versions",
    "UPDATE tasks SET",
    "INSERT INTO task_events",
    "UPDATE user_usage SET",
]
"""The statements of a single-step write inside its transaction, in order (the
SQLite test's docstring says what each is for)."""
SINGLE = [*BEGUN, *WRITE, "COMMIT"]
"""A single-step write's transaction on SQLite."""
SPENT_SINGLE = [*BEGUN, *WRITE[:4], "UPDATE sessions SET", *WRITE[4:], "COMMIT"]
"""A single-step write reporting spend: the session's running totals raised after
the task's row (``spend.added_to_session``)."""
STEPS = 1000
KB = 1024


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with opened(f"sqlite://{tmp_path / 'cost.db'}") as house:
        yield house


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """The write path's clock, moving 1 ms per reading unless moved on by hand: so
    "less than a second since the session was touched" does not depend on how fast
    this machine is."""
    now = [utcnow()]

    def tick() -> datetime:
        now[0] += timedelta(milliseconds=1)
        return now[0]

    def advance(seconds: float) -> None:
        now[0] += timedelta(seconds=seconds)

    monkeypatch.setattr(engine, "utcnow", tick)
    return advance


def _sqlite() -> aiosqlite.Connection:
    """The aiosqlite connection inside Tortoise's SQLite client (a private attribute)."""
    connection: aiosqlite.Connection = connections.get("default")._connection
    return connection


def kind(statement: str) -> str:
    """A statement named by its first three words, quotes and a last ";" left out."""
    return " ".join(statement.rstrip(";").split()[:3]).replace('"', "")


class Statements:
    """Every SQL statement the database connection runs, BEGIN and COMMIT included,
    through SQLite's own trace hook on Tortoise's connection."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __aenter__(self) -> Statements:
        await _sqlite().set_trace_callback(self.seen.append)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await _sqlite().set_trace_callback(None)  # type: ignore[arg-type]  # None clears it

    def kinds(self) -> list[str]:
        return [kind(s) for s in self.seen]


async def long_task(house: House, steps: int = STEPS) -> str:
    session = await sessions.start_session(house, USER, default_ttl=3600)
    plan = [StepPlan(f"step-{i}", {"i": i}) for i in range(steps)]
    task = (await tasks.create_task(house, USER, session.id, goal="long", steps=plan)).value
    return task.id


async def costs(
    house: House, task_id: str, first: int, version: int
) -> tuple[list[list[str]], int]:
    """The statements of a 10-patch checkpoint (steps first..first+9 to SUCCESS), then
    of startStep and completeStep of the step after them."""
    found = []
    patches = [StepPatch(i, StepStatus.SUCCESS) for i in range(first, first + 10)]
    calls: tuple[Callable[[int], Awaitable[Written[TaskView]]], ...] = (
        lambda v: tasks.checkpoint_task(house, USER, task_id, patches, expected_version=v),
        lambda v: tasks.start_step(house, USER, task_id, first + 10, expected_version=v),
        lambda v: tasks.complete_step(
            house, USER, task_id, first + 10, expected_version=v, output="x"
        ),
    )
    for call in calls:
        async with Statements() as statements:
            version = (await call(version)).value.version
        found.append(statements.kinds())
    return found, version


async def test_a_write_costs_the_same_at_step_5_and_at_step_995(
    house: House, clock: Callable[[float], None]
) -> None:
    """Guards the write path: no read of all steps, no re-read after the opening
    compare-and-swap, and a session touched at most once a second. A single-step
    write is 8 statements:

    - BEGIN and COMMIT;
    - UPDATE tasks ... RETURNING: the compare-and-swap (version, owner, lease), which
      also returns the task, its session's expiry, the step and the next unfinished;
    - UPDATE steps: the step's new state;
    - INSERT step_versions: the step as the event left it (history);
    - UPDATE tasks: its stored bytes, and status and currentStep when they moved;
    - INSERT task_events: the event;
    - UPDATE user_usage ... RETURNING: the user's byte count, within the quota.
    """
    task_id = await long_task(house)
    version = (await tasks.start_step(house, USER, task_id, 0, expected_version=1)).value.version
    early, version = await costs(house, task_id, 0, version)
    for first in range(11, 985, 100):
        patches = [StepPatch(i, StepStatus.SUCCESS) for i in range(first, min(first + 100, 985))]
        done = (
            await tasks.checkpoint_task(house, USER, task_id, patches, expected_version=version)
        ).value
        version = done.version
    late, version = await costs(house, task_id, 985, version)
    assert early == late
    checkpoint, start, complete = early
    assert start == SINGLE
    assert complete == SINGLE
    assert checkpoint.count("UPDATE steps SET") == 10
    assert len(checkpoint) == len(late[0])


async def test_the_opening_statement_reads_steps_by_index(house: House) -> None:
    """Guards the indexes the write path relies on: SQLite's plan for the opening
    UPDATE ... RETURNING of a step write searches every table by an index, never
    scans one (a scan would grow with the task, or with all tasks)."""
    task_id = await long_task(house, 50)
    async with Statements() as statements:
        await tasks.start_step(house, USER, task_id, 0, expected_version=1)
    (opening,) = [s for s in statements.seen if s.startswith('UPDATE "tasks"') and "RETURNING" in s]
    client = connections.get("default")
    _, plan = await client.execute_query(f"EXPLAIN QUERY PLAN {opening}")
    details = [str(row[-1]) for row in plan]
    assert not [d for d in details if d.startswith("SCAN")], details
    assert any(d.startswith("SEARCH n USING INDEX") for d in details), details


async def test_a_past_lease_and_budget_are_found_by_index(house: House) -> None:
    """Guards ``history._latest_delta``, which ``taskAt`` reads a past lease and
    budget through: SQLite's plan for each of its lookups searches the
    (task, kind, tool, seq) index down to one seq, never the task's log by seq.
    Seen failing without ``"tool_name" IS NULL`` (the plan then took the (task,
    seq) index and walked the log back from the seq: 46 ms a lookup at 200,000
    events, 0.007 ms with the index)."""
    task_id = await long_task(house, 5)
    version = 1
    for index in range(5):
        version = (
            await tasks.start_step(house, USER, task_id, index, expected_version=version)
        ).value.version
        version = (
            await tasks.complete_step(house, USER, task_id, index, expected_version=version)
        ).value.version
    row = await lookups.get_task(USER, task_id)
    async with Statements() as statements:
        await history.task_at(row, row.event_seq)
    lookups_seen = [s for s in statements.seen if '"kind"=' in s.replace(" ", "")]
    assert len(lookups_seen) == 2  # the lease, the budget
    client = connections.get("default")
    for statement in lookups_seen:
        _, plan = await client.execute_query(f"EXPLAIN QUERY PLAN {statement}")
        searches = [str(row[-1]) for row in plan if str(row[-1]).startswith("SEARCH")]
        assert len(searches) == 2, (statement, searches)  # one probe for each kind
        for search in searches:
            assert "USING INDEX task_events_part" in search, (statement, searches)
            assert "tool_name=?" in search, (statement, searches)
            assert "seq<?" in search, (statement, searches)


async def test_a_claim_finds_tasks_of_its_kind_by_index(house: House) -> None:
    """Guards the claim's lookups (``leases._oldest_claimable``, one per claimable
    status): SQLite searches the tasks by an index naming the user and the status,
    never scans them, ordinary claims or claims for a framework's runs, with a
    session or without; and a claim for runs searches by the (user, run_of, status)
    index, so it never walks past the user's ordinary working tasks to find a run.
    Seen failing with ``tasks_user_kind_status`` left out of migration 0018 (the
    plans then named ``tasks_user_status`` alone, the kind checked row by row)."""
    session = await sessions.start_session(house, USER, default_ttl=3600)
    for n in range(12):  # two claimable of each kind, and leased ones of both
        kind = "openai-agents" if n % 3 == 0 else None
        await tasks.create_task(
            house, USER, session.id, goal="g", steps=[StepPlan("a")], run_of=kind,
            lease=("w", 600) if n % 2 else None,
        )  # fmt: skip
    client = connections.get("default")
    for session_id, kind in itertools.product((None, session.id), (None, "openai-agents")):
        async with Statements() as statements:
            await leases.claim_task(house, USER, "h", 60, session_id=session_id, run_of=kind)
        lookups_seen = [s for s in statements.seen if s.startswith('SELECT "tasks"')]
        assert len(lookups_seen) == 3, statements.seen  # PLANNED, RUNNING, WAITING_TOOL
        for statement in lookups_seen:
            _, plan = await client.execute_query(f"EXPLAIN QUERY PLAN {statement}")
            details = [str(row[-1]) for row in plan]
            assert not [d for d in details if d.startswith("SCAN")], (kind, details)
            (search,) = [d for d in details if d.startswith("SEARCH tasks ")]
            assert "user_id=?" in search, (kind, details)
            assert "status=?" in search, (kind, details)
            if kind is not None:
                assert "USING INDEX tasks_user_kind_status" in search, details
                assert "run_of=?" in search, details


async def test_the_opening_statement_is_one_text_at_every_step(
    house: House, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards the step index bound as a parameter: the opening UPDATE of a write to
    step 3 and of one to step 40 are one statement text, so the statement caches
    (SQLite's, asyncpg's, ``sql.in_dialect``'s) hold one entry for every position.
    With the index written into the text, as before, the two texts differ."""
    texts: list[str] = []
    fetch = sql.fetch

    async def recorded(conn: Any, text: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        texts.append(text)
        return await fetch(conn, text, params)

    task_id = await long_task(house, 50)
    monkeypatch.setattr(sql, "fetch", recorded)
    version = (await tasks.start_step(house, USER, task_id, 3, expected_version=1)).value.version
    await tasks.start_step(house, USER, task_id, 40, expected_version=version)
    opening = [t for t in texts if t.startswith('UPDATE "tasks"')]
    assert len(opening) == 2
    assert opening[0] == opening[1]


async def test_a_write_a_second_after_the_last_touches_the_session(
    house: House, clock: Callable[[float], None]
) -> None:
    """Guards the session's activity: the write after a second of quiet moves
    ``lastActiveAt`` (one statement more); the next, a moment later, does not."""
    task_id = await long_task(house, 3)
    version = (await tasks.start_step(house, USER, task_id, 0, expected_version=1)).value.version
    clock(1.5)
    async with Statements() as quiet:
        version = (
            (await tasks.complete_step(house, USER, task_id, 0, expected_version=version)).value
        ).version
    async with Statements() as busy:
        await tasks.start_step(house, USER, task_id, 1, expected_version=version)
    assert quiet.kinds().count("UPDATE sessions SET") == 1
    assert busy.kinds().count("UPDATE sessions SET") == 0


SPENT = Report(input_tokens=1200, output_tokens=340, cost_micros=5100, model="gpt-4o-mini")


async def test_a_write_with_spend_costs_one_update_of_its_session_more(
    house: House, clock: Callable[[float], None]
) -> None:
    """Guards where spend is kept: the task's totals go in the UPDATE of the task
    row every write already makes, the session's running totals in one UPDATE of
    its row after it (in the write's tail, so on PostgreSQL no round trip more), a
    user's are summed when read: no usage row written, no sum read. A completeStep
    with spend, and a recordSpend, are SINGLE's 8 statements and that UPDATE; the
    task's totals are the step's, and the session's the task's."""
    task_id = await long_task(house, 3)
    version = (await tasks.start_step(house, USER, task_id, 0, expected_version=1)).value.version
    async with Statements() as bare:
        version = (
            await tasks.complete_step(house, USER, task_id, 0, expected_version=version)
        ).value.version
    version = (
        await tasks.start_step(house, USER, task_id, 1, expected_version=version)
    ).value.version
    async with Statements() as reported:
        await tasks.record_spend(house, USER, task_id, 1, SPENT)
    async with Statements() as spent:
        done = await tasks.complete_step(
            house, USER, task_id, 1, expected_version=version, spend=SPENT
        )
    assert bare.kinds() == SINGLE
    assert reported.kinds() == SPENT_SINGLE
    assert spent.kinds() == SPENT_SINGLE
    assert done.value.spend.input_tokens == 2400
    assert done.value.spend.calls == 2
    session = await lookups.get_session(USER, done.value.session_id)
    totals = await spend.sessions_spent(connections.get("default"), [session.pk])
    assert totals[session.pk] == done.value.spend


BUDGET = BudgetView(max_tokens=10**9)


async def budgeted_session_writes(
    house: House, tasks_in_session: int, counted: Callable[[], Any]
) -> list[Any]:
    """In a session with a budget and ``tasks_in_session`` tasks, each of the others
    having spent, what ``counted()`` (an async context manager) sees of a startStep
    (checked against the session's budget), a recordSpend and a completeStep with
    spend (each telling whether it crossed the session's budget) of the last task."""
    session = await sessions.start_session(house, USER, default_ttl=3600, budget=BUDGET)
    plan = [StepPlan("a"), StepPlan("b")]
    made = [
        (await tasks.create_task(house, USER, session.id, goal="g", steps=plan)).value.id
        for _ in range(tasks_in_session)
    ]
    for task_id in made[:-1]:
        await tasks.start_step(house, USER, task_id, 0, expected_version=1)
        await tasks.record_spend(house, USER, task_id, 0, SPENT)
    task_id = made[-1]
    seen = []
    async with counted() as started:
        version = (await tasks.start_step(house, USER, task_id, 0, expected_version=1)).value
    seen.append(started)
    async with counted() as reported:
        await tasks.record_spend(house, USER, task_id, 0, SPENT)
    seen.append(reported)
    async with counted() as completed:
        done = await tasks.complete_step(
            house, USER, task_id, 0, expected_version=version.version, spend=SPENT
        )
    seen.append(completed)
    totals = await spend.sessions_spent(connections.get("default"), [version.session_pk])
    calls = tasks_in_session + 1  # one report of each other task, two of the last
    assert totals[version.session_pk].calls == calls
    assert totals[version.session_pk].input_tokens == calls * SPENT.input_tokens
    assert done.value.spend.calls == 2
    return seen


class Steps(Statements):
    """``Statements``, and the SQLite virtual machine's instructions they ran (its
    progress handler, called at each one): the work, where a statement's count
    cannot tell a lookup of one row from a sum over a thousand."""

    def __init__(self) -> None:
        super().__init__()
        self.instructions = 0

    def _step(self) -> int:
        self.instructions += 1
        return 0  # go on

    async def __aenter__(self) -> Steps:
        await super().__aenter__()
        await _sqlite().set_progress_handler(self._step, 1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await _sqlite().set_progress_handler(None, 1)  # type: ignore[arg-type]  # None clears it
        await super().__aexit__(*exc)


async def test_a_budgeted_session_s_write_costs_the_same_at_1_and_1000_tasks(
    tmp_path: Path, clock: Callable[[float], None]
) -> None:
    """Guards the session's running spend (issue 54, item 6a): in a session with a
    budget, a startStep is SINGLE's 8 statements, and a recordSpend and a
    completeStep with spend SPENT_SINGLE's 9, whether the session holds 1 task or
    1,000, with the same SQLite instructions at both sizes: the budget's check reads
    the session's row (the opening statement's reading: SQLite's write lock is held
    from it), never a sum of its tasks. Seen failing on the code before (10
    statements each: a SELECT of the session's row and a SUM over its tasks; at
    1,000 tasks 16,595 instructions for a startStep where 1 task took 611)."""
    found = []
    for size in (1, 1000):
        async with opened(f"sqlite://{tmp_path / f'budget-{size}.db'}") as house:
            found.append(await budgeted_session_writes(house, size, Steps))
    one, thousand = found
    assert [s.kinds() for s in one] == [SINGLE, SPENT_SINGLE, SPENT_SINGLE]
    assert [s.kinds() for s in thousand] == [SINGLE, SPENT_SINGLE, SPENT_SINGLE]
    assert [s.instructions for s in one] == [s.instructions for s in thousand]


async def test_a_budgeted_session_s_write_on_postgresql_reads_one_row_of_it(
    postgres_url: str, clock: Callable[[float], None]
) -> None:
    """Guards the session's running spend on PostgreSQL: in a session with a budget
    of 1 task or 1,000, a startStep, a recordSpend and a completeStep with spend
    are five round trips each, the one past a step write's four reading the
    session's totals locked (``SELECT ... FOR UPDATE`` of its one row), never a sum
    of its tasks. Seen failing on the code before (six: the row locked, then its
    tasks' SUM)."""
    found = []
    for size in (1, 1000):
        async with opened(f"{postgres_url}?minsize=1&maxsize=1") as house:
            found.append(await budgeted_session_writes(house, size, LoggedStatements))
    for logged in [*found[0], *found[1]]:
        assert logged.kinds() == [
            "BEGIN",
            "UPDATE tasks SET",
            "SELECT id AS",
            "WITH _0 AS",
            "COMMIT",
        ]
        (read,) = [s for s in logged.seen if s.startswith("SELECT")]
        assert read.startswith('SELECT "id" AS "k", "spent_input_tokens"')
        assert read.endswith("FOR UPDATE")


async def test_the_history_of_a_long_task_costs_what_it_changed(house: House) -> None:
    """Guards deltas in storage: a 1,000-step task whose steps each get a 1 KB output
    keeps events and step history within 3x the bytes of those outputs (with the
    task in every event, as release 1 stored it, it was over 100x)."""
    task_id = await long_task(house)
    version = 1
    output = "x" * KB
    for index in range(STEPS):
        version = (
            (await tasks.start_step(house, USER, task_id, index, expected_version=version)).value
        ).version
        view = (
            await tasks.complete_step(
                house, USER, task_id, index, expected_version=version, output=output
            )
        ).value
        version = view.version
    assert view.event_seq == 2 * STEPS + 1
    client = connections.get("default")
    _, rows = await client.execute_query(
        "SELECT SUM(pgsize) FROM dbstat WHERE name IN"
        " (SELECT name FROM sqlite_master WHERE tbl_name IN ('task_events', 'step_versions'))"
    )
    stored = rows[0][0]
    assert stored < 3 * STEPS * KB, f"{stored} bytes of history for {STEPS * KB} of outputs"


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture
async def pg_house(postgres_url: str) -> AsyncIterator[House]:
    """A house on PostgreSQL with a pool of one connection, so that a query logger
    on that connection sees every statement of a write."""
    async with opened(f"{postgres_url}?minsize=1&maxsize=1") as house:
        yield house


class LoggedStatements:
    """Every statement asyncpg sends on the pool's one connection, BEGIN and COMMIT
    included, through asyncpg's query logger."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        (holder,) = connections.get("default")._pool._holders  # a private attribute
        self._connection = holder._con

    def _log(self, record: Any) -> None:
        self.seen.append(record.query)

    async def __aenter__(self) -> LoggedStatements:
        self._connection.add_query_logger(self._log)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._connection.remove_query_logger(self._log)

    def kinds(self) -> list[str]:
        return [kind(s) for s in self.seen]


async def test_a_step_write_on_postgresql_is_as_many_statements_as_on_sqlite(
    pg_house: House, clock: Callable[[float], None]
) -> None:
    """Guards the write path on PostgreSQL, counted on the connection itself
    (asyncpg's query logger), at step 5 as at step 45: the same statements as on
    SQLite, in four round trips. BEGIN, the compare-and-swap, then the write's
    tail as one statement (``sql.joined``: the other five as WITH queries of the
    last), and COMMIT; no reset query when the connection goes back to its pool
    (``runstate.storage.postgres``). Sent one by one with asyncpg's pool as it comes, the
    same write was nine round trips."""
    task_id = await long_task(pg_house, 50)
    version = 1
    found = []
    for index in (5, 45):
        for write in (tasks.start_step, tasks.complete_step):
            async with LoggedStatements() as statements:
                view = await write(pg_house, USER, task_id, index, expected_version=version)
            version = view.value.version
            found.append(statements.kinds())
            (tail,) = [s for s in statements.seen if s.startswith("WITH")]
            assert inner_kinds(tail) == WRITE[1:]
    assert found == [["BEGIN", "UPDATE tasks SET", "WITH _0 AS", "COMMIT"]] * 4


async def test_a_write_with_spend_on_postgresql_is_the_same_round_trips(
    pg_house: House, clock: Callable[[float], None]
) -> None:
    """Guards spend's cost on PostgreSQL: a completeStep with spend, and a
    recordSpend, are the four round trips of any step write, their tail holding
    the session's UPDATE besides (no usage row written, no sum read)."""
    task_id = await long_task(pg_house, 3)
    version = (await tasks.start_step(pg_house, USER, task_id, 0, expected_version=1)).value.version
    found = []
    async with LoggedStatements() as statements:
        await tasks.record_spend(pg_house, USER, task_id, 0, SPENT)
    found.append(statements)
    async with LoggedStatements() as statements:
        await tasks.complete_step(pg_house, USER, task_id, 0, expected_version=version, spend=SPENT)
    found.append(statements)
    for logged in found:
        assert logged.kinds() == ["BEGIN", "UPDATE tasks SET", "WITH _0 AS", "COMMIT"]
        (tail,) = [s for s in logged.seen if s.startswith("WITH")]
        assert inner_kinds(tail) == SPENT_SINGLE[len(BEGUN) + 1 : -1]


def inner_kinds(joined: str) -> list[str]:
    """The statements inside ``WITH _0 AS (...), _1 AS (...) last``, as ``kinds``
    names them: each query's first three words, and the last statement's."""
    starts = [m.end() for m in re.finditer(r"_\d+ AS \(", joined)]
    last = joined[joined.rindex(") ") + 2 :]
    texts = [joined[start:] for start in starts] + [last]
    return [kind(t) for t in texts]


async def test_a_task_of_5000_steps_is_stored_in_statements_postgresql_can_bind(
    postgres_url: str,
) -> None:
    """Guards ``sql._groups``: the inserts of 5,000 new steps bind more parameters
    than asyncpg sends with one statement (32,767), so ``run_all`` joins them in
    runs of at most ``sql.PG_PARAMS``. Joined all in one, the task is refused by
    asyncpg (InterfaceError: too many arguments)."""
    limits = ContentLimits(steps=5000)
    async with opened(f"{postgres_url}?minsize=1&maxsize=1", limits=limits) as house:
        session = await sessions.start_session(house, USER, default_ttl=3600)
        plan = [StepPlan(f"step-{i}", {"i": i}) for i in range(5000)]
        async with LoggedStatements() as statements:
            task = await tasks.create_task(house, USER, session.id, goal="long", steps=plan)
        inserts = [s for s in statements.seen if 'INSERT INTO "steps"' in s]
        assert len(inserts) > 1  # one statement would bind more than asyncpg sends
        assert max(bound(s) for s in inserts) <= sql.PG_PARAMS
        assert task.value.total_steps == 5000


def bound(statement: str) -> int:
    """How many parameters a PostgreSQL statement binds: its highest ``$n``."""
    return max(int(n) for n in re.findall(r"\$(\d+)", statement))


async def test_a_keyed_write_is_three_statements_more(
    house: House, clock: Callable[[float], None]
) -> None:
    """Guards the idempotency key's cost: a single-step write under a new key is the
    write's own statements, run on the key's transaction, and three more: the key's
    row inserted first (``INSERT ... ON CONFLICT DO NOTHING``), its answer kept
    last, with the row's bytes charged to its user's quota in the same trip (key
    rows of task writes counted nothing, issue 38). Before, a read of the key came
    first (a statement a write: a repeat is found by the insert now), the delete of
    an expired row ran when there was none, and the write had a savepoint of its
    own (two statements)."""
    task_id = await long_task(house, 3)
    call = idempotency.keyed(USER, "key-1", "startStep", {"stepIndex": 0})

    async def start() -> Written[TaskView]:
        return await tasks.start_step(house, USER, task_id, 0, expected_version=1)

    async with Statements() as statements:
        await idempotency.once(house, call, 3600, TaskView, start)
    assert statements.kinds() == [
        *BEGUN,
        "INSERT INTO idempotency_keys",
        *WRITE,
        "UPDATE idempotency_keys SET",
        "UPDATE user_usage SET",
        "COMMIT",
    ]


# ------------------------------------------------ a LangGraph super-step
# The write RunstateSaver sends for a node of a chain: the checkpoint that
# follows the node (putGraphCheckpoint) carrying the node's pending writes with
# its SUCCESS report. The measure the graph path's write levers are judged by
# (docs/performance.md).

GRAPHER = "grapher"
PULL = "~__pregel_pull, "


def graph_blob(text: str) -> checkpoints.Blob:
    return checkpoints.Blob("msgpack", text.encode())


async def graph_thread(house: House) -> str:
    """A thread's task, as the saver makes it for a new thread."""
    session = await sessions.start_session(house, GRAPHER, default_ttl=3600)
    made = await tasks.create_task(house, GRAPHER, session.id, goal="graph", steps=[])
    return made.value.id


async def super_step(
    house: House,
    task_id: str,
    step: int,
    parent: str,
    logged: Callable[[], Any],
    *,
    watched: bool = False,
) -> list[str]:
    """Node ``n<step>`` of a chain: checkpoint ``c<step>`` carrying the node's
    writes (its value, the edge to the next node) and its SUCCESS report, and when
    ``watched`` the next node's start (``nextNodes``, as a watched saver sends it);
    the statements, by kind."""
    key = f"task-{step}"
    writes = [
        checkpoints.PendingWrite(key, PULL + f"n{step}", 0, "count", graph_blob(str(step))),
        checkpoints.PendingWrite(
            key, PULL + f"n{step}", 1, f"branch:to:n{step + 1}", graph_blob("")
        ),
    ]
    node = nodes.NodeRun("", key, f"n{step}", GraphNodeStatus.SUCCESS, step, {"count": step})
    version = f"c{step}"
    channels = {"count": version, f"branch:to:n{step + 1}": version}
    async with logged() as checkpointed:
        await checkpoints.put_checkpoint(
            house,
            GRAPHER,
            task_id,
            namespace="",
            checkpoint_id=version,
            parent_id=parent,
            checkpoint=graph_blob(version),
            metadata={"step": step, "source": "loop"},
            channel_versions=channels,
            channels=[checkpoints.ChannelValue(c, v, graph_blob(c)) for c, v in channels.items()],
            held=[checkpoints.TaskWrites(writes, node)],
            next_nodes=[f"n{step + 1}"] if watched else (),
        )
    kinds: list[str] = checkpointed.kinds()
    return kinds


SUPER_STEP = [
    *BEGUN,
    "UPDATE tasks SET",
    "INSERT INTO graph_writes",
    "INSERT INTO graph_blobs",
    "INSERT INTO graph_checkpoints",
    "SELECT json_array(g.id, g.namespace,",
    "INSERT INTO graph_nodes",
    "INSERT INTO steps",
    "INSERT INTO step_versions",
    "UPDATE tasks SET",
    "INSERT INTO task_events",
    "UPDATE user_usage SET",
    "COMMIT",
]
"""A super-step's statements on SQLite, in order: the compare-and-swap that opens
the write; the node's writes, the checkpoint's new channel values and its row,
each insert telling what it stored (so no lookup comes first: a write at a
stored index, a value at a stored version are kept), the three in one trip to
SQLite's thread (``sql.stored_each``); the node found by its LangGraph task id
and added; and the write's tail (the node's step and its version, the task, the
event, the quota) in one trip (``sql.run_all``)."""
PG_SUPER_STEP = ["BEGIN", "UPDATE tasks SET", "WITH _0 AS", "WITH _0 AS", "COMMIT"]
WATCHED_SUPER_STEP = [
    *SUPER_STEP[: SUPER_STEP.index("INSERT INTO graph_nodes")],
    "UPDATE graph_nodes SET",
    "INSERT INTO graph_nodes",
    "UPDATE steps SET",
    "INSERT INTO steps",
    "INSERT INTO step_versions",
    *SUPER_STEP[SUPER_STEP.index("UPDATE tasks SET", 4) :],
]
"""A watched super-step on SQLite: the node's expected start (its step, RUNNING
since the checkpoint before) found with its step in the graph rows' trip and
adopted, the next node's start added, all in the tail's trip."""


async def steps_of(
    house: House, logged: Callable[[], Any], *, watched: bool = False
) -> list[list[str]]:
    task_id = await graph_thread(house)
    parent = "c-1"
    found = []
    for step in range(6):
        found.append(await super_step(house, task_id, step, parent, logged, watched=watched))
        parent = f"c{step}"
    return found


@pytest.mark.usefixtures("clock")
async def test_a_super_step_on_sqlite(house: House) -> None:
    """Guards what a super-step costs on SQLite: one transaction of 13 statements
    in 7 trips to SQLite's thread (``SUPER_STEP``; 22 statements in two
    transactions when the node's writes went alone and each insert was looked up
    first), the same at the sixth super-step as at the second (nothing read grows
    with the thread)."""
    found = await steps_of(house, Statements)
    assert found[1:] == [SUPER_STEP] * 5


@pytest.mark.usefixtures("clock")
async def test_a_super_step_on_postgresql(pg_house: House) -> None:
    """Guards what a super-step costs on PostgreSQL: BEGIN, the compare-and-swap,
    the graph rows as one statement of WITH queries (``sql.stored_each``), the
    node's lookup and row, the tail (the step, the task, the event, the quota) as
    one statement of WITH queries (``sql.joined``), and COMMIT: 7 round trips (16
    in two transactions before)."""
    found = await steps_of(pg_house, LoggedStatements)
    assert found[1:] == [PG_SUPER_STEP] * 5


@pytest.mark.usefixtures("clock")
async def test_a_watched_super_step_on_sqlite(house: House) -> None:
    """Guards that a watched super-step (the next node's start shown with the
    checkpoint, ``nextNodes``) costs SQLite the trips an unwatched one does: the
    node's expected start read with its step in the graph rows' trip
    (``nodes.lookup``), its adoption and the next start's row in the tail's
    (``Draft.tail``)."""
    found = await steps_of(house, Statements, watched=True)
    assert found[1:] == [WATCHED_SUPER_STEP] * 5


@pytest.mark.usefixtures("clock")
async def test_a_watched_super_step_on_postgresql(pg_house: House) -> None:
    """Guards that a watched super-step costs PostgreSQL the 5 round trips an
    unwatched one does (9 when the node's lookup, its step's read, its adoption
    and the next start's row each went alone)."""
    found = await steps_of(pg_house, LoggedStatements, watched=True)
    assert found[1:] == [PG_SUPER_STEP] * 5


@pytest.mark.usefixtures("clock")
async def test_a_node_expected_again_after_it_ran_moves_its_key_first_on_postgresql(
    pg_house: House,
) -> None:
    """Guards ``nodes._save``'s order for a loop (node ``n`` routes to itself): the
    checkpoint after ``n`` ran adopts its expected start (``next:n`` becomes its
    task id) and expects ``n`` again under ``next:n``. The adoption runs first, a
    trip of its own (6 round trips, not 5): in the tail's one PostgreSQL statement
    the insert met the key before the update moved it (a unique violation, seen)."""
    task_id = await graph_thread(pg_house)
    found = []
    parent: str | None = None
    for step in range(4):
        key = f"task-{step}"
        writes = [checkpoints.PendingWrite(key, PULL + "n", 0, "count", graph_blob(str(step)))]
        node = nodes.NodeRun("", key, "n", GraphNodeStatus.SUCCESS, step, {"count": step})
        async with LoggedStatements() as checkpointed:
            await checkpoints.put_checkpoint(
                pg_house,
                GRAPHER,
                task_id,
                namespace="",
                checkpoint_id=f"c{step}",
                parent_id=parent,
                checkpoint=graph_blob(f"c{step}"),
                metadata={"step": step, "source": "loop"},
                channel_versions={"count": f"c{step}"},
                channels=[checkpoints.ChannelValue("count", f"c{step}", graph_blob("v"))],
                held=[checkpoints.TaskWrites(writes, node)] if parent else [],
                next_nodes=["n"],
            )
        found.append(checkpointed.kinds())
        parent = f"c{step}"
    adopting = ["BEGIN", "UPDATE tasks SET", "WITH _0 AS", "UPDATE graph_nodes SET"]
    assert found[1:] == [[*adopting, "WITH _0 AS", "COMMIT"]] * 3
    rows = await sql.fetch(
        connections.get("default"),
        'SELECT "task_key", "position" FROM "graph_nodes"'
        ' WHERE "task_id" = (SELECT "id" FROM "tasks" WHERE "public_id" = ?) ORDER BY "position"',
        [task_id],
    )
    assert [(r["task_key"], r["position"]) for r in rows] == [
        ("task-1", 0),
        ("task-2", 1),
        ("task-3", 2),
        ("next:n", 3),
    ]


async def test_an_expected_start_stopped_at_its_interrupt_is_saved_in_one_update(
    pg_house: House,
) -> None:
    """Guards ``nodes._saved``'s one statement a row: a watched node (its step
    shown RUNNING by the checkpoint before, keyed ``next:n0``) whose first report
    under its task id is its interrupt is adopted and flagged in one UPDATE.
    Two UPDATEs of the row in the tail's one PostgreSQL statement would leave
    either; the adoption alone would lose the flag, and with it the thread's
    wait for a person's answer."""
    task_id = await graph_thread(pg_house)
    await checkpoints.put_checkpoint(
        pg_house,
        GRAPHER,
        task_id,
        namespace="",
        checkpoint_id="c-1",
        parent_id=None,
        checkpoint=graph_blob("c-1"),
        metadata={"step": -1, "source": "input"},
        channel_versions={},
        channels=[],
        next_nodes=["n0"],
    )
    stop = nodes.NodeRun("", "task-0", "n0", GraphNodeStatus.INTERRUPTED, 0, ["approve?"])
    written = await checkpoints.put_writes(
        pg_house,
        GRAPHER,
        task_id,
        namespace="",
        checkpoint_id="c-1",
        writes=[checkpoints.PendingWrite("task-0", PULL + "n0", 0, "count", graph_blob("0"))],
        node=stop,
    )
    assert written.value.status.value == "AWAITING_DECISION"
    rows = await sql.fetch(
        connections.get("default"),
        'SELECT "task_key", "interrupted" FROM "graph_nodes"'
        ' WHERE "task_id" = (SELECT "id" FROM "tasks" WHERE "public_id" = ?)',
        [task_id],
    )
    assert [(r["task_key"], r["interrupted"]) for r in rows] == [("task-0", True)]
