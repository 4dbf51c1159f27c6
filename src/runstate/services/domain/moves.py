"""The step and task state machines of semantics.md, as data.

``STEP_MOVES`` and ``TASK_MOVES`` list the single allowed moves. A checkpoint may
jump along a path of allowed moves, so ``reachable`` gives the closure. IN_DOUBT
is outside ``STEP_MOVES``: only a resume puts a step there (``RESUME_MOVES``) and
only a decision takes it out (``DECISION_MOVES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from runstate.basics.enums import SessionStatus, StepStatus, TaskStatus
from runstate.services.domain.errors import InvalidTransitionError

S = StepStatus
T = TaskStatus

STEP_MOVES: Mapping[StepStatus, frozenset[StepStatus]] = {
    S.PENDING: frozenset({S.RUNNING, S.SKIPPED}),
    S.RUNNING: frozenset({S.SUCCESS, S.FAILED, S.PENDING, S.SKIPPED}),
    S.FAILED: frozenset({S.PENDING, S.SKIPPED}),
    S.SUCCESS: frozenset(),
    S.SKIPPED: frozenset(),
    S.IN_DOUBT: frozenset(),
}

RESUME_MOVES: Mapping[StepStatus, frozenset[StepStatus]] = {
    **{status: frozenset() for status in S},
    S.RUNNING: frozenset({S.PENDING, S.IN_DOUBT}),
    S.FAILED: frozenset({S.PENDING}),
}
"""What resumeTask does to a step: RUNNING is reset (idempotent) or put IN_DOUBT."""

DECISION_MOVES: Mapping[StepStatus, frozenset[StepStatus]] = {
    **STEP_MOVES,
    S.IN_DOUBT: frozenset({S.PENDING, S.SKIPPED, S.SUCCESS}),
}
"""What decideStep may do: RETRY, SKIP or COMPLETE a step in doubt, and RETRY or
SKIP along the usual machine for the others."""

FINISHED_STEPS = frozenset({S.SUCCESS, S.SKIPPED})

TASK_MOVES: Mapping[TaskStatus, frozenset[TaskStatus]] = {
    T.PLANNED: frozenset({T.RUNNING, T.FAILED, T.CANCELLED, T.COMPLETED}),
    T.RUNNING: frozenset({T.WAITING_TOOL, T.AWAITING_DECISION, T.FAILED, T.CANCELLED, T.COMPLETED}),
    T.WAITING_TOOL: frozenset({T.RUNNING, T.FAILED, T.CANCELLED, T.COMPLETED}),
    T.AWAITING_DECISION: frozenset({T.RUNNING, T.FAILED, T.CANCELLED, T.COMPLETED}),
    T.FAILED: frozenset({T.RUNNING, T.CANCELLED, T.COMPLETED}),
    T.COMPLETED: frozenset(),
    T.CANCELLED: frozenset(),
}
"""COMPLETED is listed from every non-final status, but only once every step is
finished (``check_task_move`` enforces it): a task completes when its work does."""

FINAL_TASKS = frozenset({T.COMPLETED, T.CANCELLED})

SESSION_MOVES: Mapping[SessionStatus, frozenset[SessionStatus]] = {
    SessionStatus.ACTIVE: frozenset({SessionStatus.PAUSED, SessionStatus.COMPLETED}),
    SessionStatus.PAUSED: frozenset({SessionStatus.ACTIVE, SessionStatus.COMPLETED}),
    SessionStatus.COMPLETED: frozenset(),
    SessionStatus.EXPIRED: frozenset(),
}
"""EXPIRED is reached by inactivity only, never by a request."""

E = TypeVar("E", StepStatus, TaskStatus)


def reachable(moves: Mapping[E, frozenset[E]], start: E) -> frozenset[E]:
    """Every status reachable from ``start`` by one or more allowed moves."""
    seen: set[E] = set()
    todo = list(moves[start])
    while todo:
        status = todo.pop()
        if status not in seen:
            seen.add(status)
            todo.extend(moves[status])
    return frozenset(seen)


def check_step_move(
    old: StepStatus,
    new: StepStatus,
    *,
    jump: bool = False,
    moves: Mapping[StepStatus, frozenset[StepStatus]] = STEP_MOVES,
) -> None:
    """Refuse a step move ``moves`` does not allow; ``jump`` allows a whole path, but
    never back to where the step stands (nothing moves a step RUNNING -> RUNNING)."""
    allowed = reachable(moves, old) - {old} if jump else moves[old]
    if new not in allowed:
        raise InvalidTransitionError("step", old, new)


def check_task_move(
    old: TaskStatus, new: TaskStatus, *, all_steps_finished: bool, jump: bool = False
) -> None:
    """Refuse a task move the machine does not allow (see ``TASK_MOVES``)."""
    allowed = reachable(TASK_MOVES, old) if jump else TASK_MOVES[old]
    if new not in allowed or (new is T.COMPLETED and not all_steps_finished):
        raise InvalidTransitionError("task", old, new)


def check_session_move(old: SessionStatus, new: SessionStatus) -> None:
    """Refuse a session status change a client may not make."""
    if new is not old and new not in SESSION_MOVES[old]:
        raise InvalidTransitionError("session", old, new)
