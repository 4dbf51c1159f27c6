"""Budgets: ``setBudget`` on a task or a session (``services.domain.spend``)."""

from __future__ import annotations

from tortoise.expressions import F
from tortoise.transactions import in_transaction

from runstate.models import Session
from runstate.services.actions import sessions, tasks
from runstate.services.domain import quota, validation
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
    budget_change_columns,
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
    its BUDGET_CHANGED event, with the actor and ``note``; a session's keeps them on
    the session (``SessionView.budget_change``)."""
    if (task_id is None) == (session_id is None):
        raise InvalidInputError("taskId", "give exactly one of taskId and sessionId")
    if task_id is not None:
        done = await tasks.set_task_budget(
            house, user_id, task_id, budget, expected_version=expected_version, note=note
        )
        return done.giving(done.value)
    assert session_id is not None
    reason = validation.note(note)
    return Written(
        await _set_session_budget(house, user_id, session_id, budget, expected_version, reason)
    )


async def _set_session_budget(
    house: House,
    user_id: str,
    session_id: str,
    budget: BudgetView | None,
    expected_version: int,
    note: str | None,
) -> SessionView:
    """The session's budget changed if its version is still ``expected_version`` (a
    change of the session: its version grows by one), with who changed it, when and
    why. The note counts in the session's bytes and its user's at its current size,
    as the session's metadata does: the previous note's bytes are given back."""
    validation.known_id(session_id, "session")
    now = utcnow()
    changes = {**budget_columns(budget), **budget_change_columns(user_id, note, now)}
    # Read before the transaction (SQLite's write lock comes with its first
    # statement); the UPDATE below matches only this same version of the row.
    held = await (
        Session.filter(user_id=user_id, public_id=session_id, version=expected_version)
        .only("id", "budget_note")
        .first()
    )
    resized = quota.text_bytes(note) - (0 if held is None else quota.text_bytes(held.budget_note))
    if resized:
        changes["stored_bytes"] = F("stored_bytes") + resized
    try:
        async with in_transaction() as conn:
            row = await sessions.versioned(
                conn, user_id, session_id, expected_version, now, changes
            )
            if resized:
                await quota.charge(conn, house.limits, user_id, resized, "note")
    except UnmatchedWriteError:
        current = await get_session(user_id, session_id)  # NotFound, SessionExpired
        raise VersionConflictError(expected_version, current.version) from None
    return session_view(row, now)
