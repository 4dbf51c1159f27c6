"""A session's admission ledger and schedules in the schema (contract version 5):
their types, inputs and result unions."""

from __future__ import annotations

from typing import Annotated

import strawberry
from strawberry.scalars import JSON

from runstate.basics.enums import AdmissionPolicy, MisfirePolicy
from runstate.schema.inputs import IDEMPOTENCY_KEY, StepPlanInput
from runstate.schema.problems import (
    MORE,
    BudgetExceeded,
    IdempotencyKeyReused,
    InvalidInput,
    InvalidTransition,
    NotFound,
    Problem,
    ProblemCode,
    RateLimited,
    SessionExpired,
    VersionConflict,
)
from runstate.schema.spending import BudgetInput
from runstate.schema.types import Schedule, Submission
from runstate.services.domain import errors


@strawberry.type(
    description=("REJECT found the session's active submission unfinished: nothing was written.")
)
class SessionBusy(Problem):
    """A submission refused under REJECT (``active``: the one whose turn it is)."""

    active: Submission


@strawberry.type(
    description=(
        "The task's submission was interrupted or is being rolled back: it starts no"
        " new work. Nothing was written."
    )
)
class TaskInterrupted(Problem):
    """A start of work refused on a task asked to stop."""

    submission: Submission


def _busy(error: errors.SessionBusyError) -> SessionBusy:
    return SessionBusy(
        code=ProblemCode.SESSION_BUSY, message=error.message, active=Submission.of(error.active)
    )


def _interrupted(error: errors.TaskInterruptedError) -> TaskInterrupted:
    return TaskInterrupted(
        code=ProblemCode.TASK_INTERRUPTED,
        message=error.message,
        submission=Submission.of(error.submission),
    )


MORE[errors.SessionBusyError] = _busy
MORE[errors.TaskInterruptedError] = _interrupted


@strawberry.input(
    description=(
        "An input for a session: admitted into its ledger with a task that carries it"
        " out (goal, steps), or refused."
    )
)
class SubmitInput:
    """An input for a session's ledger."""

    session_id: strawberry.ID
    input: JSON | None = None
    goal: str
    steps: list[StepPlanInput]
    policy: AdmissionPolicy | None = AdmissionPolicy.REJECT
    budget: BudgetInput | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "Cancels a QUEUED submission (its task is removed); any other status answers"
        " InvalidTransition."
    )
)
class CancelSubmissionInput:
    """The submission to cancel."""

    id: strawberry.ID
    note: str | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class CreateScheduleInput:
    """A schedule for a session."""

    session_id: strawberry.ID
    cron: str
    timezone: str | None = "UTC"
    goal: str
    steps: list[StepPlanInput]
    input: JSON | None = None
    policy: AdmissionPolicy | None = AdmissionPolicy.ENQUEUE
    misfire: MisfirePolicy | None = MisfirePolicy.SKIP
    enabled: bool | None = True
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class UpdateScheduleInput:
    """A change of a schedule, at the version the caller read."""

    id: strawberry.ID
    expected_version: int
    cron: str | None = None
    timezone: str | None = None
    enabled: bool | None = None
    policy: AdmissionPolicy | None = None
    misfire: MisfirePolicy | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class DeleteScheduleInput:
    """The schedule to delete."""

    id: strawberry.ID
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


SubmissionResult = Annotated[
    Submission
    | NotFound
    | InvalidTransition
    | InvalidInput
    | SessionExpired
    | SessionBusy
    | BudgetExceeded
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("SubmissionResult"),
]
ScheduleResult = Annotated[
    Schedule
    | NotFound
    | VersionConflict
    | InvalidInput
    | SessionExpired
    | IdempotencyKeyReused
    | RateLimited,
    strawberry.union("ScheduleResult"),
]
