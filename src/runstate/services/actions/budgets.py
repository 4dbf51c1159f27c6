"""Budgets: ``setBudget`` on a task or a session (``services.domain.spend``)."""

from __future__ import annotations

from tortoise.transactions import in_transaction

from runstate.services.actions import sessions, tasks
from runstate.services.domain import validation
from runstate.services.domain.errors import (
    InvalidInputError,
    UnmatchedWriteError,
    VersionConflictError,
)
from runstate.services.domain.views import (
    BudgetView,
    SessionView,
    TaskView,
    Written,
    budget_columns,
)
from runstate.services.read.convert import session_view
from runstate.services.read.lookups import get_session
from runstate.services.write.house import House
from runstate.storage.clock import utcnow


async def set_budget(
    house: House,
    user_id: str,
    budget: BudgetView | None,
    *,
    expected_version: int,
    task_id: str | None = None,
    session_id: str | None = None,
    note: str | None = None,
) -> Written[TaskView | SessionView]:
    """Set, change or (None) remove the budget of the task ``task_id`` or the session
    ``session_id`` (exactly one), at the version the person saw. A task's change is
    its BUDGET_CHANGED event, with the actor and ``note``."""
    if (task_id is None) == (session_id is None):
        raise InvalidInputError("taskId", "give exactly one of taskId and sessionId")
    if task_id is not None:
        done = await tasks.set_task_budget(
            house, user_id, task_id, budget, expected_version=expected_version, note=note
        )
        return done.giving(done.value)
    assert session_id is not None
    validation.note(note)
    return Written(await _set_session_budget(user_id, session_id, budget, expected_version))


async def _set_session_budget(
    user_id: str, session_id: str, budget: BudgetView | None, expected_version: int
) -> SessionView:
    """The session's budget changed if its version is still ``expected_version`` (a
    change of the session: its version grows by one)."""
    validation.known_id(session_id, "session")
    now = utcnow()
    limits = budget_columns(budget)
    try:
        async with in_transaction() as conn:
            row = await sessions.versioned(conn, user_id, session_id, expected_version, now, limits)
    except UnmatchedWriteError:
        current = await get_session(user_id, session_id)  # NotFound, SessionExpired
        raise VersionConflictError(expected_version, current.version) from None
    return session_view(row, now)
