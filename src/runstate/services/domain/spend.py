"""Spend and budgets: what an agent's steps report spending, and the limits on it.

A report (``Report``: tokens in and out, cost in millionths of the deployment's
currency, the model) is added to one step (``add``): the step's columns keep the
sums, its history rows keep them as they stood, so ``taskAt`` shows a step's spend
at any seq. The task row keeps the sum of its steps (``Task.spent_*``), raised by
the same UPDATE every write already makes of it, and the session row the sum of
its tasks (``Session.spent_*``), raised in the write's own transaction by one
UPDATE more (``added_to_session``, sent with the write's tail: on PostgreSQL in
the same round trip), so a session's budget is checked against one row whatever
its number of tasks. The user's ``user_usage`` row keeps the sum of its sessions,
raised by the statement that charges the write's bytes (``quota.charge``) and
lowered when sessions are deleted.

Every total is at most ``MAX_LONG`` (2^53 - 1, the API's ``Long``): a report that
would take its step's, its task's or its user's spend past it is InvalidInput
naming its spend field, and nothing is written. A session's total and a task's
are parts of their user's, so no sum, in SQL or in an answer, can pass it:
SQLite's 64-bit SUM once overflowed on a user's many tasks.

A budget limits tokens (input and output together) and cost. Reported spend is
always recorded: it has happened. Once the task's or its session's spend reaches a
limit, writes that would start new work are refused (``BudgetExceededError``) in
the transaction that would start it (``write.engine.Draft.refuse_over_budget``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tortoise.backends.base.client import BaseDBAsyncClient

from runstate.basics.enums import BudgetScope
from runstate.models import Step, box, unbox
from runstate.services.domain.errors import BudgetExceededError, InvalidInputError
from runstate.services.domain.validation import MAX_LONG, MODELS_PER_STEP, Report
from runstate.services.domain.views import BudgetView, SpendView
from runstate.storage import sql


def add(step: Step, report: Report, field: str) -> None:
    """Add ``report`` to the step's spend; its model joins the step's names unless
    there already. InvalidInput on ``field`` when a sum would pass ``MAX_LONG``."""
    sums = {
        "input_tokens": step.input_tokens + report.input_tokens,
        "output_tokens": step.output_tokens + report.output_tokens,
        "cost_micros": step.cost_micros + report.cost_micros,
    }
    if any(value > MAX_LONG for value in sums.values()):
        raise InvalidInputError(field, f"the step's spend would pass {MAX_LONG}")
    for name, value in sums.items():
        setattr(step, name, value)
    step.calls += 1
    names: list[str] = list(unbox(step.models) or [])
    if report.model is not None and report.model not in names and len(names) < MODELS_PER_STEP:
        step.models = box([*names, report.model])


def budget(
    max_tokens: int | None, max_cost_micros: int | None, field: str = "budget"
) -> BudgetView | None:
    """A budget as given (``BudgetInput``): each limit 0 to ``MAX_LONG`` or None (no
    limit); None when neither is set. InvalidInput naming the limit's field."""
    for name, value in (("maxTokens", max_tokens), ("maxCostMicros", max_cost_micros)):
        if value is not None and not 0 <= value <= MAX_LONG:
            raise InvalidInputError(f"{field}.{name}", f"must be between 0 and {MAX_LONG}")
    return BudgetView.of(max_tokens, max_cost_micros)


def refuse_reached(
    scope: BudgetScope, limit: BudgetView | None, spent: SpendView, currency: str
) -> None:
    """BudgetExceeded for ``scope`` when ``spent`` reached ``limit`` (None: no limit),
    its message counting cost in ``currency``."""
    if limit is not None and limit.reached(spent):
        raise BudgetExceededError(scope, limit, spent, currency)


def crossed(limit: BudgetView | None, before: SpendView, after: SpendView) -> bool:
    """Whether going from ``before`` to ``after`` reached ``limit`` (None: no limit)."""
    return limit is not None and not limit.reached(before) and limit.reached(after)


def _spend(row: dict[str, Any]) -> SpendView:
    return SpendView(int(row["i"]), int(row["o"]), int(row["c"]), int(row["n"]))


_SESSION_SPENT = (
    'SELECT "id" AS "k", "spent_input_tokens" AS "i", "spent_output_tokens" AS "o",'
    ' "spent_cost_micros" AS "c", "spent_calls" AS "n" FROM "sessions"'
)


async def session_spent(conn: BaseDBAsyncClient, session_pk: int) -> SpendView:
    """The spend of one session's tasks, its row's totals, read under a lock of the
    row (PostgreSQL's ``FOR UPDATE``; SQLite's writes hold the whole database),
    which every write that starts work or reports spend in a session with a budget
    takes: such writes of the session's tasks are serialized, so a start never
    passes on a total a report is about to raise past the budget. Taken after the
    task's row, as every task write takes its locks (``quota``). One statement,
    whatever the number of the session's tasks."""
    lock = "" if conn.capabilities.dialect == "sqlite" else " FOR UPDATE"
    rows = await sql.fetch(conn, f'{_SESSION_SPENT} WHERE "id" = ?{lock}', [session_pk])
    return _spend(rows[0]) if rows else SpendView()


async def sessions_spent(
    conn: BaseDBAsyncClient, session_pks: Sequence[int]
) -> dict[int, SpendView]:
    """The spend of each session (by row id), its row's totals; a session gone, none."""
    found: dict[int, SpendView] = dict.fromkeys(session_pks, SpendView())
    for chunk in sql.chunks(list(session_pks)):
        rows = await sql.fetch(conn, f'{_SESSION_SPENT} WHERE "id" IN ({sql.marks(chunk)})', chunk)
        found |= {row["k"]: _spend(row) for row in rows}
    return found


def added_to_session(session_pk: int, spent: SpendView) -> sql.Statement:
    """The UPDATE that adds a write's reported spend to its session's totals, for
    the write's tail (``sql.run_all``), after the task's own row (the order every
    task write takes its locks in)."""
    return (
        'UPDATE "sessions" SET "spent_input_tokens" = "spent_input_tokens" + ?,'
        ' "spent_output_tokens" = "spent_output_tokens" + ?,'
        ' "spent_cost_micros" = "spent_cost_micros" + ?, "spent_calls" = "spent_calls" + ?'
        ' WHERE "id" = ?',
        [spent.input_tokens, spent.output_tokens, spent.cost_micros, spent.calls, session_pk],
    )


def _reached(limit: str, spent: str) -> str:
    return f"({limit} IS NOT NULL AND {spent} >= {limit})"


OVER_BUDGET_SQL = (
    "("
    + _reached(
        '"tasks"."budget_max_tokens"',
        '("tasks"."spent_input_tokens" + "tasks"."spent_output_tokens")',
    )
    + " OR "
    + _reached('"tasks"."budget_max_cost_micros"', '"tasks"."spent_cost_micros"')
    + ' OR EXISTS (SELECT 1 FROM "sessions" b WHERE b."id" = "tasks"."session_id" AND ('
    + _reached('b."budget_max_tokens"', '(b."spent_input_tokens" + b."spent_output_tokens")')
    + " OR "
    + _reached('b."budget_max_cost_micros"', 'b."spent_cost_micros"')
    + ")))"
)
"""Whether a task's spend, or its session's, reached its budget, as SQL on the
"tasks" row: ``claimTask`` passes over such tasks. A session's spend is its row's
totals."""
