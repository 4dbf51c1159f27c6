"""The input types of the contract."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, cast

import strawberry
from strawberry.scalars import JSON

from runstate.basics.enums import SessionStatus, StepDecision, StepStatus, TaskStatus, ToolOutcome
from runstate.schema.spending import BudgetInput, SpendInput
from runstate.services.domain.columns import REPORTED
from runstate.services.domain.validation import StepPatch, StepPlan

IDEMPOTENCY_KEY = (
    "Client-chosen, unique per caller: a retry with the same key and input, within "
    "RUNSTATE_IDEMPOTENCY_TTL, answers as the first call did and writes nothing."
)


T = TypeVar("T")


def plain(target: type[T], given: object) -> T:
    """The service's ``target`` dataclass for a GraphQL input, led by the target's
    fields: each is the input's field of the same name, and one the client left null
    or unset takes the target's default (``idempotent: null`` is the default true)."""
    values = {}
    for field in dataclasses.fields(cast(Any, target)):
        value = getattr(given, field.name)
        if value is not None and value is not strawberry.UNSET:
            values[field.name] = value
    return target(**values)


@strawberry.input
class StartSessionInput:
    """Start a conversation."""

    id: strawberry.ID | None = strawberry.field(
        default=None,
        description=(
            "Optional client-chosen id; starting the same id twice returns the existing "
            "session (idempotent)."
        ),
    )
    ttl_seconds: int | None = strawberry.field(
        default=None,
        description="Inactivity timeout for this session; the server default when omitted.",
    )
    metadata: JSON | None = None
    budget: BudgetInput | None = strawberry.field(
        default=None, description="What the session's tasks may spend together."
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class UpdateSessionInput:
    """Change a session's own fields."""

    id: strawberry.ID
    expected_version: int
    status: SessionStatus | None = None
    message_count_delta: int | None = strawberry.field(
        default=None, description="Adds to messageCount; also marks the session active now."
    )
    metadata: JSON | None = strawberry.UNSET
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class StepPlanInput:
    """One planned step."""

    action: str
    input: JSON | None = None
    idempotent: bool | None = True

    def plan(self) -> StepPlan:
        """The service's value for this input."""
        return plain(StepPlan, self)


@strawberry.input
class CreateTaskInput:
    """Create a task with its plan."""

    session_id: strawberry.ID
    id: strawberry.ID | None = strawberry.field(
        default=None,
        description=(
            "Optional client-chosen id; creating the same id twice returns the existing "
            "task (idempotent)."
        ),
    )
    goal: str
    steps: list[StepPlanInput]
    budget: BudgetInput | None = strawberry.field(
        default=None, description="What the task may spend (its session's budget holds too)."
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)
    lease: TaskLeaseInput | None = strawberry.field(
        default=None,
        description=(
            "Create the task leased to this holder (fencing token 1) in the same write, "
            "so that no claimTask hands it to a worker before its creator runs it."
        ),
    )
    run_of: str | None = strawberry.field(
        default=None,
        description=(
            "The framework whose run the task holds (1 to 64 characters, e.g. "
            '"openai-agents"): only a claimTask naming it (ClaimTaskInput.runOf) hands '
            "the task out, never an ordinary claim. Null: an ordinary task."
        ),
    )


@strawberry.input
class TaskLeaseInput:
    """The lease a task is created with (see CreateTaskInput.lease)."""

    holder_id: str
    ttl_seconds: int


@strawberry.input
class StepRefInput:
    """One step of a task, at a version."""

    task_id: strawberry.ID
    step_index: int
    expected_version: int
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class CompleteStepInput:
    """Finish a running step with its output."""

    task_id: strawberry.ID
    step_index: int
    expected_version: int
    fencing_token: int | None = None
    output: JSON | None = None
    spend: SpendInput | None = strawberry.field(
        default=None, description="What the step spent since its last report."
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class FailStepInput:
    """Fail a running step with its error."""

    task_id: strawberry.ID
    step_index: int
    expected_version: int
    fencing_token: int | None = None
    error: str
    spend: SpendInput | None = strawberry.field(
        default=None, description="What the step spent since its last report."
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


def reported(input: object) -> dict[str, Any]:
    """The input's fields that are columns a step reports (``columns.REPORTED``)."""
    return {name: getattr(input, name) for name in REPORTED if hasattr(input, name)}


@strawberry.input
class StepPatchInput:
    """One step change inside a checkpoint."""

    index: int
    status: StepStatus
    output: JSON | None = strawberry.UNSET
    error: str | None = None
    spend: SpendInput | None = strawberry.field(
        default=None, description="What the step spent since its last report."
    )

    def patch(self) -> StepPatch:
        """The service's value for this input."""
        set_output = self.output is not strawberry.UNSET
        return StepPatch(
            index=self.index,
            status=self.status,
            output=self.output if set_output else None,
            set_output=set_output,
            error=self.error,
            reported=reported(self),
            spend=None if self.spend is None else self.spend.report(),
        )


@strawberry.input(
    description=(
        "Several step changes and an optional task status, committed as one transaction "
        "and one version step."
    )
)
class CheckpointTaskInput:
    """A batch of step changes."""

    task_id: strawberry.ID
    expected_version: int
    fencing_token: int | None = None
    status: TaskStatus | None = None
    steps: list[StepPatchInput]
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class AddStepsInput:
    """Steps to append to a plan."""

    task_id: strawberry.ID
    expected_version: int
    fencing_token: int | None = None
    steps: list[StepPlanInput]
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "A new task in the same session, its steps as they stood at `atSeq` of the source "
        "task (RUNNING and IN_DOUBT steps become PENDING)."
    )
)
class ForkTaskInput:
    """Fork a task from a past state."""

    task_id: strawberry.ID
    at_seq: int
    id: strawberry.ID | None = strawberry.field(
        default=None, description="Optional client-chosen id for the new task."
    )
    goal: str | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class DeleteSessionInput:
    """The session to delete."""

    id: strawberry.ID
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class SetTaskStatusInput:
    """A task status change."""

    task_id: strawberry.ID
    expected_version: int
    status: TaskStatus
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class ResumeTaskInput:
    """Resume a task after a crash."""

    task_id: strawberry.ID
    expected_version: int | None = None
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class DecideStepInput:
    """A person's decision on a step in doubt."""

    task_id: strawberry.ID
    step_index: int
    expected_version: int
    fencing_token: int | None = None
    decision: StepDecision
    output: JSON | None = strawberry.field(
        default=None,
        description="With COMPLETE: the step's output (what the person found happened).",
    )
    note: str | None = strawberry.field(
        default=None,
        description="Why (at most 1,000 characters); the decision's event carries it.",
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class AnswerInterruptInput:
    """A person's answer to a LangGraph thread waiting at interrupt()."""

    task_id: strawberry.ID
    step_index: int = strawberry.field(description="The node's step waiting at interrupt().")
    expected_version: int
    value: JSON = strawberry.field(
        description=(
            "The answer: what the graph's process passes to Command(resume=...)"
            " (RunstateSaver.interrupt_answer reads it)."
        )
    )
    note: str | None = strawberry.field(
        default=None,
        description="Why (at most 1,000 characters); the answer's event carries it.",
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "Lease the next task that needs a worker: PLANNED, or RUNNING / WAITING_TOOL whose "
        "lease lapsed (its agent died)."
    )
)
class ClaimTaskInput:
    """Ask for the next task that needs a worker."""

    holder_id: str
    ttl_seconds: int
    session_id: strawberry.ID | None = strawberry.field(
        default=None, description="Only tasks of this session."
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)
    stalled_for_seconds: int = strawberry.field(
        default=0,
        description=(
            "A stalled task is claimed only once its lease lapsed at least this long ago"
            " (0 to 3600; 0, the default: at once). Leaves a dead agent's task visibly"
            " stalled for a while, or gives a slow agent's renewal a grace."
        ),
    )
    run_of: str | None = strawberry.field(
        default=None,
        description=(
            "Only runs of this framework (tasks created with this CreateTaskInput.runOf),"
            " for its loader. Null, the default: only ordinary tasks, never a run."
        ),
    )


@strawberry.input
class AcquireTaskLockInput:
    """Ask for a lease on a task."""

    task_id: strawberry.ID
    holder_id: str
    ttl_seconds: int
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class RenewTaskLockInput:
    """Extend a lease (a heartbeat)."""

    task_id: strawberry.ID
    holder_id: str
    ttl_seconds: int
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class ReleaseTaskLockInput:
    """Give a lease up."""

    task_id: strawberry.ID
    holder_id: str
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input
class RecordToolCallInput:
    """One report about a tool call."""

    task_id: strawberry.ID
    tool_name: str
    expected_version: int | None = strawberry.field(
        default=None,
        description=(
            "Omit to apply unconditionally (tool counters are often written by several workers)."
        ),
    )
    fencing_token: int | None = None
    outcome: ToolOutcome
    result: JSON | None = None
    error: str | None = None
    retry_after_seconds: int | None = strawberry.field(
        default=None, description="With RATE_LIMITED: when the tool may be called again."
    )
    max_retries: int | None = strawberry.field(
        default=None, description="Sets the tool's retry budget (default 3)."
    )
    spend: SpendInput | None = strawberry.field(
        default=None,
        description="What the call spent: added to the task's first RUNNING step.",
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "Report spend of a running step between its start and its end (a step that makes "
        "several model calls)."
    )
)
class RecordSpendInput:
    """Spend of a running step."""

    task_id: strawberry.ID
    step_index: int
    spend: SpendInput
    fencing_token: int | None = None
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)


@strawberry.input(
    description=(
        "Set (or with null fields, remove) the budget of a task (taskId) or a session "
        "(sessionId): exactly one of them."
    )
)
class SetBudgetInput:
    """A person's change of a budget."""

    task_id: strawberry.ID | None = None
    session_id: strawberry.ID | None = None
    expected_version: int
    budget: BudgetInput
    note: str | None = strawberry.field(
        default=None,
        description="Why (at most 1,000 characters); a task's BUDGET_CHANGED event carries it.",
    )
    idempotency_key: str | None = strawberry.field(default=None, description=IDEMPOTENCY_KEY)
