"""The status vocabularies shared by the models, the services and the GraphQL schema."""

from __future__ import annotations

from enum import StrEnum


class SessionStatus(StrEnum):
    """Where a conversation stands."""

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    EXPIRED = "EXPIRED"


class TaskStatus(StrEnum):
    """Where a multi-step job stands."""

    PLANNED = "PLANNED"
    RUNNING = "RUNNING"
    WAITING_TOOL = "WAITING_TOOL"
    AWAITING_DECISION = "AWAITING_DECISION"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class AdmissionPolicy(StrEnum):
    """What ``submitInput`` does when the session's active submission is unfinished."""

    REJECT = "REJECT"
    ENQUEUE = "ENQUEUE"
    INTERRUPT = "INTERRUPT"
    ROLLBACK = "ROLLBACK"


class SubmissionStatus(StrEnum):
    """Where one input of a session's ledger stands."""

    QUEUED = "QUEUED"
    ACTIVE = "ACTIVE"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"
    ROLLED_BACK = "ROLLED_BACK"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"


class SubmissionEventKind(StrEnum):
    """What one message of a ledger stream (``sessionSubmissions``) carries."""

    SNAPSHOT = "SNAPSHOT"
    ADMITTED = "ADMITTED"
    CHANGED = "CHANGED"


class MisfirePolicy(StrEnum):
    """What a schedule does with due times missed while no server ran."""

    SKIP = "SKIP"
    RUN_ONCE = "RUN_ONCE"


class StepStatus(StrEnum):
    """Where one step of a task stands."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    IN_DOUBT = "IN_DOUBT"
    """Was RUNNING when its agent stopped and is not safe to repeat; waits for decideStep."""


class ToolStatus(StrEnum):
    """The last known state of one tool used by a task."""

    IDLE = "IDLE"
    CALLING = "CALLING"
    SUCCESS = "SUCCESS"
    RETRYING = "RETRYING"
    FAILED = "FAILED"


class TaskEventKind(StrEnum):
    """What one entry of a task's change log records."""

    SNAPSHOT = "SNAPSHOT"
    TASK_CREATED = "TASK_CREATED"
    TASK_STATUS_CHANGED = "TASK_STATUS_CHANGED"
    STEPS_ADDED = "STEPS_ADDED"
    STEP_STARTED = "STEP_STARTED"
    STEP_SUCCEEDED = "STEP_SUCCEEDED"
    STEP_FAILED = "STEP_FAILED"
    STEP_SKIPPED = "STEP_SKIPPED"
    STEP_RESET = "STEP_RESET"
    CHECKPOINT = "CHECKPOINT"
    TOOL_STATE_CHANGED = "TOOL_STATE_CHANGED"
    LOCK_ACQUIRED = "LOCK_ACQUIRED"
    LOCK_RELEASED = "LOCK_RELEASED"
    GRAPH_CHECKPOINT = "GRAPH_CHECKPOINT"
    GRAPH_WRITES = "GRAPH_WRITES"
    GRAPH_CLEARED = "GRAPH_CLEARED"
    GRAPH_PRUNED = "GRAPH_PRUNED"
    GRAPH_COPIED = "GRAPH_COPIED"
    INTERRUPT_ANSWERED = "INTERRUPT_ANSWERED"
    SPEND_RECORDED = "SPEND_RECORDED"
    BUDGET_CHANGED = "BUDGET_CHANGED"
    INTERRUPT_REQUESTED = "INTERRUPT_REQUESTED"


class GraphPruneStrategy(StrEnum):
    """What pruning a LangGraph thread keeps."""

    KEEP_LATEST = "KEEP_LATEST"
    """The last written checkpoint of each namespace, with the ancestors its delta
    channels are rebuilt from."""
    DELETE = "DELETE"
    """Nothing."""


class ToolOutcome(StrEnum):
    """What an agent reports about one tool call."""

    CALLING = "CALLING"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    RATE_LIMITED = "RATE_LIMITED"


class StepDecision(StrEnum):
    """A person's answer for a step that may or may not have had its effect."""

    RETRY = "RETRY"
    SKIP = "SKIP"
    COMPLETE = "COMPLETE"
    """It did happen: record it as SUCCESS with the output the person found."""


class GraphNodeStatus(StrEnum):
    """Where one run of a LangGraph node stands, as its saver reports it."""

    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"
    """Stopped at ``interrupt()``: it waits for a person's answer and runs again
    with it."""


class GraphRunEnd(StrEnum):
    """How a LangGraph run of a thread ended."""

    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class SessionItemsEventKind(StrEnum):
    """What an event of a session's conversation carries."""

    SNAPSHOT = "SNAPSHOT"
    """The conversation as it stands: replace what you hold with its items (more may
    follow at once as ITEMS_ADDED, for a conversation longer than one page)."""
    ITEMS_ADDED = "ITEMS_ADDED"
    """Items added after the ones you hold."""


class BudgetScope(StrEnum):
    """Whose budget refused new work: the task's own, or its session's."""

    TASK = "TASK"
    SESSION = "SESSION"
