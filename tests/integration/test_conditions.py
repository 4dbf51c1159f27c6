"""The forms of each shared condition (``services/domain/conditions.py``, and the
budget rule of ``services/domain/spend.py``) agree: Python, the ORM's Q and SQL pick
the same rows on every combination of the values they read."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tortoise import connections
from tortoise.queryset import QuerySet

from runstate.basics.enums import SessionStatus, TaskStatus
from runstate.models import Session, Task
from runstate.services.domain import conditions, spend
from runstate.services.domain.views import BudgetView, SpendView
from runstate.storage import sql
from runstate.storage.clock import utcnow
from tests.support import opened

NOW = utcnow()
TIMES = (NOW - timedelta(minutes=5), NOW, NOW + timedelta(minutes=5))


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[None]:
    async with opened(f"sqlite://{tmp_path / 'conditions.db'}"):
        yield


async def session(status: SessionStatus, expires_at: datetime, name: str) -> Session:
    return await Session.create(
        public_id=name,
        user_id="u",
        status=status,
        ttl_seconds=60,
        created_at=NOW,
        last_active_at=NOW,
        expires_at=expires_at,
    )


async def ids(query: QuerySet[Any]) -> set[int]:
    """The primary keys of the rows ``query`` picks."""
    found: list[Any] = await query.values_list("id", flat=True)
    return {int(pk) for pk in found}


async def picked_by_sql(table: str, alias: str, condition: sql.Fragment) -> set[int]:
    text, params = condition
    rows = await sql.fetch(
        connections.get("default"),
        f'SELECT {alias}."id" FROM "{table}" {alias} WHERE {text}',
        params,
    )
    return {int(r["id"]) for r in rows}


@pytest.mark.usefixtures("db")
async def test_lease_and_stalled_forms_agree() -> None:
    """Guards ``conditions``' task rules: for every status, token (never or once
    leased) and lease expiry (none, lapsed, now, ahead), the Python test, the Q and
    the SQL pick the same tasks. Seen failing with ``stalled_sql`` missing its
    ``"lock_token" > 0`` (it then also picked tasks never leased)."""
    home = await session(SessionStatus.ACTIVE, NOW + timedelta(hours=1), "home")
    expected_stalled, expected_free = set(), set()
    combos = itertools.product(TaskStatus, (0, 2), (None, *TIMES))
    for n, (status, token, expires) in enumerate(combos):
        task = await Task.create(
            public_id=f"t{n}",
            user_id="u",
            session=home,
            goal="g",
            status=status,
            lock_holder=None if expires is None else "w",
            lock_token=token,
            lock_expires_at=expires,
            created_at=NOW,
            updated_at=NOW,
        )
        live = conditions.lease_live(expires, NOW)
        if conditions.is_stalled(status, token, live):
            expected_stalled.add(task.id)
        if not live:
            expected_free.add(task.id)
    assert 0 < len(expected_stalled) < len(expected_free)
    stalled_q = await ids(Task.filter(conditions.stalled(NOW)))
    free_q = await ids(Task.filter(conditions.no_live_lease(NOW)))
    assert stalled_q == expected_stalled
    assert free_q == expected_free
    assert await picked_by_sql("tasks", "tasks", conditions.stalled_sql(NOW)) == expected_stalled
    assert await picked_by_sql("tasks", "tasks", conditions.no_live_lease_sql(NOW)) == (
        expected_free
    )


@pytest.mark.usefixtures("db")
async def test_kind_forms_agree() -> None:
    """Guards ``conditions``' kind rule (what ``claimTask`` hands out): for every
    kind asked (ordinary, a framework's runs, another framework's), the Q and the
    SQL pick the same tasks: those of that kind alone. Seen failing with
    ``of_kind_sql(None)`` written ``"run_of" = ?`` (SQL's NULL then matched
    nothing: no ordinary task was picked)."""
    home = await session(SessionStatus.ACTIVE, NOW + timedelta(hours=1), "kinds")
    kinds = (None, "openai-agents", "other", "openai-agents", None)
    made = {}
    for n, kind in enumerate(kinds):
        task = await Task.create(
            public_id=f"k{n}", user_id="u", session=home, goal="g", status=TaskStatus.PLANNED,
            created_at=NOW, updated_at=NOW, run_of=kind,
        )  # fmt: skip
        made[task.id] = kind
    for asked in (None, "openai-agents", "other", "nobody's"):
        expected = {pk for pk, kind in made.items() if kind == asked}
        assert await ids(Task.filter(conditions.of_kind(asked))) == expected
        assert await picked_by_sql("tasks", "tasks", conditions.of_kind_sql(asked)) == expected
    assert len({pk for pk, kind in made.items() if kind is None}) == 2


@pytest.mark.usefixtures("db")
async def test_open_session_forms_agree() -> None:
    """Guards ``conditions``' session rule: for every status and expiry, the Python
    test, the Q (on sessions, and on tasks through their session) and the SQL pick
    the same sessions."""
    expected: set[int] = set()
    tasks_of: dict[int, int] = {}
    for n, (status, expires) in enumerate(itertools.product(SessionStatus, TIMES)):
        row = await session(status, expires, f"s{n}")
        task = await Task.create(
            public_id=f"t{n}", user_id="u", session=row, goal="g",
            status=TaskStatus.PLANNED, created_at=NOW, updated_at=NOW,
        )  # fmt: skip
        tasks_of[row.id] = task.id
        if conditions.session_open(status, expires, NOW):
            expected.add(row.id)
    assert 0 < len(expected) < len(tasks_of)
    by_q = await ids(Session.filter(conditions.open_session(NOW)))
    assert by_q == expected
    via = conditions.open_session(NOW, via="session__")
    assert await ids(Task.filter(via)) == {tasks_of[s] for s in expected}
    assert await picked_by_sql("sessions", "s", conditions.open_session_sql(NOW, "s")) == expected


@pytest.mark.usefixtures("db")
async def test_expired_session_forms_agree() -> None:
    """Guards ``conditions``' expiry rule: for every status and expiry, the Python
    test and the Q (and its negation, the live sessions) pick the same sessions.
    Seen failing with ``expired_session`` testing ``expires_at < now``."""
    expected: set[int] = set()
    every: set[int] = set()
    for n, (status, expires) in enumerate(itertools.product(SessionStatus, TIMES)):
        row = await session(status, expires, f"e{n}")
        every.add(row.id)
        if conditions.session_expired(status, expires, NOW):
            expected.add(row.id)
    assert 0 < len(expected) < len(every)
    assert await ids(Session.filter(conditions.expired_session(NOW))) == expected
    assert await ids(Session.filter(~conditions.expired_session(NOW))) == every - expected
    live = conditions.live_session_sql(NOW)
    assert await picked_by_sql("sessions", "s", live) == every - expected


@pytest.mark.usefixtures("db")
async def test_over_budget_forms_agree() -> None:
    """Guards the budget rule's two forms: ``spend.OVER_BUDGET_SQL`` (what
    ``claimTask`` passes over) picks exactly the tasks that ``BudgetView.reached``
    says are stopped (what ``startStep`` refuses), by the task's own budget or by its
    session's, against the session's running total (the sum of its tasks, as every
    write keeps it). Every budget (none, tokens, cost, both) of task and session,
    against spends below, at and past each limit, input and output tokens counted
    together. Seen failing with the SQL's ``>=`` made ``>`` (a spend at the limit
    then passed), and with the session's sum taken over the task alone (before the
    running totals)."""
    limits = (BudgetView(), BudgetView(10, None), BudgetView(None, 100), BudgetView(10, 100))
    spends = (SpendView(2, 3, 40), SpendView(4, 6, 99), SpendView(1, 1, 100), SpendView(9, 9, 0))
    expected: set[int] = set()
    every: set[int] = set()
    for n, (own, shared, spent, beside) in enumerate(
        itertools.product(limits, limits, spends, spends[:2])
    ):
        home = await session(SessionStatus.ACTIVE, NOW + timedelta(hours=1), f"b{n}")
        home.budget_max_tokens, home.budget_max_cost_micros = (
            shared.max_tokens,
            shared.max_cost_micros,
        )
        await home.save(update_fields=["budget_max_tokens", "budget_max_cost_micros"])
        rows = []
        for k, (budget, used) in enumerate(((own, spent), (BudgetView(), beside))):
            rows.append(
                await Task.create(
                    public_id=f"b{n}-{k}",
                    user_id="u",
                    session=home,
                    goal="g",
                    status=TaskStatus.PLANNED,
                    created_at=NOW,
                    updated_at=NOW,
                    spent_input_tokens=used.input_tokens,
                    spent_output_tokens=used.output_tokens,
                    spent_cost_micros=used.cost_micros,
                    budget_max_tokens=budget.max_tokens,
                    budget_max_cost_micros=budget.max_cost_micros,
                )
            )
        summed = spent + beside
        home.spent_input_tokens, home.spent_output_tokens, home.spent_cost_micros = (
            summed.input_tokens,
            summed.output_tokens,
            summed.cost_micros,
        )
        await home.save(
            update_fields=["spent_input_tokens", "spent_output_tokens", "spent_cost_micros"]
        )
        for row, budget, used in ((rows[0], own, spent), (rows[1], BudgetView(), beside)):
            every.add(row.id)
            if budget.reached(used) or shared.reached(summed):
                expected.add(row.id)
    assert 0 < len(expected) < len(every)
    assert await picked_by_sql("tasks", "tasks", (spend.OVER_BUDGET_SQL, [])) == expected
