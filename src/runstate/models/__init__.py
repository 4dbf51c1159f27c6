"""Tortoise models: the tables behind sessions, tasks, steps, tool states, events,
LangGraph checkpoints and tokens.

Public ids are chosen per user (``public_id``, unique with ``user_id``), so two users
may pick the same id and neither can learn that the other did. Rows are joined by
integer primary keys.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from tortoise import fields
from tortoise.indexes import Index
from tortoise.models import Model

from runstate.basics.enums import (
    AdmissionPolicy,
    MisfirePolicy,
    SessionStatus,
    StepStatus,
    SubmissionStatus,
    TaskEventKind,
    TaskStatus,
    ToolStatus,
)

ID_LENGTH = 64
USER_LENGTH = 128
RUN_KIND_LENGTH = 64
"""The longest name of a framework whose runs a task holds (``Task.run_of``)."""
KEY_LENGTH = 255

F = TypeVar("F", bound=fields.Field[Any])

LIMIT = "runstate_limit"
"""The attribute of a field that names its content limit (``bounded``)."""


def bounded(field: F, limit: str) -> F:
    """``field``, declared with the content limit that bounds what a client may store
    in it: the name of a ``ContentLimits`` setting, ``..._chars`` (characters of
    text) or ``..._bytes`` (bytes of compact JSON). A step column an agent reports
    must declare one, or ``services.domain.columns`` fails to import; the check of
    a reported value and the answer's size estimate (``schema.cost``) both read it.
    Nothing of it reaches the database or the migrations."""
    setattr(field, LIMIT, limit)
    return field


def box(value: Any) -> dict[str, Any] | None:
    """A client's JSON value as stored in a JSON column: ``{"v": value}``.

    Tortoise's JSONField reads any Python ``str`` as JSON text, both when a model
    is built and when it is saved: the output ``"done"`` would be refused and
    ``"42"`` stored as the number 42. A dict is never mistaken, so client values
    (metadata, step input and output, tool results) are stored boxed in one.
    None stays SQL NULL.
    """
    return None if value is None else {"v": value}


def unbox(stored: Any) -> Any:
    """The client's JSON value of a column written with ``box``."""
    return None if stored is None else stored["v"]


class ApiToken(Model):
    """A bearer token, of which only the SHA-256 digest is stored."""

    id = fields.IntField(primary_key=True)
    user_id = fields.CharField(max_length=USER_LENGTH, db_index=True)
    token_hash = fields.CharField(max_length=64, unique=True)
    created_at = fields.DatetimeField()
    revoked_at = fields.DatetimeField(null=True)

    class Meta:
        table = "api_tokens"


class Usage(Model):
    """How many bytes one user's sessions and tasks hold, kept by every write that
    adds or deletes some (``services/domain/quota.py``) and checked against the user's
    quota, and what they spent."""

    user_id = fields.CharField(max_length=USER_LENGTH, primary_key=True)
    stored_bytes = fields.BigIntField(default=0)
    spent_input_tokens = fields.BigIntField(default=0, db_default=0)
    """The spend of the user's sessions, kept by every write that reports spend in
    the statement that charges its bytes, and lowered when sessions are deleted
    (``services.domain.spend``): the sums of their ``spent_*`` columns, each at
    most 2^53 - 1, read without summing them."""
    spent_output_tokens = fields.BigIntField(default=0, db_default=0)
    spent_cost_micros = fields.BigIntField(default=0, db_default=0)
    spent_calls = fields.BigIntField(default=0, db_default=0)

    class Meta:
        table = "user_usage"


class Session(Model):
    """One user's conversation. ``expires_at`` is kept as ``last_active_at + ttl_seconds``.

    Listings run newest first, which is descending ``id`` (creation order), so the
    listing indexes end in ``id``."""

    id = fields.IntField(primary_key=True)
    public_id = fields.CharField(max_length=ID_LENGTH)
    user_id = fields.CharField(max_length=USER_LENGTH)
    status = fields.CharEnumField(SessionStatus, max_length=16)
    version = fields.IntField(default=1)
    message_count = fields.IntField(default=0)
    ttl_seconds = fields.IntField()
    metadata = fields.JSONField[object](null=True)
    created_at = fields.DatetimeField()
    last_active_at = fields.DatetimeField()
    expires_at = fields.DatetimeField()
    stored_bytes = fields.BigIntField(default=0, db_default=0)
    """What the session's own row and its conversation items hold, counted toward
    its user's quota (``quota``)."""
    item_seq = fields.IntField(default=0, db_default=0)
    """The conversation's log position: each item added takes the next number as
    its ``seq``, each pop or clear one more (``actions.conversation``)."""
    items_reset_seq = fields.IntField(default=0, db_default=0)
    """The position of the last pop or clear: a reader that saw the items up to an
    earlier position must read them all again (the conversation stream's SNAPSHOT)."""
    budget_max_tokens = fields.BigIntField(null=True)
    """The session's budget (``services.domain.spend``): input plus output tokens
    its tasks may spend together; None, no limit."""
    budget_max_cost_micros = fields.BigIntField(null=True)
    """Millionths of the deployment's currency its tasks may spend together."""
    budget_actor = fields.CharField(max_length=USER_LENGTH, null=True)
    """Who last changed the budget (``setBudget``, or ``startSession`` with one), as a
    task's BUDGET_CHANGED event names its actor; None, nobody ever set one."""
    budget_note: str | None = fields.TextField(null=True)
    """Their reason, as given to ``setBudget`` (counted in ``stored_bytes``)."""
    budget_changed_at = fields.DatetimeField(null=True)
    """When they made it."""
    spent_input_tokens = fields.BigIntField(default=0, db_default=0)
    """The spend of the session's tasks, kept by every write that reports spend in the
    write's own transaction (``services.domain.spend``): the sums of its tasks'
    ``spent_*`` columns, read without summing them."""
    spent_output_tokens = fields.BigIntField(default=0, db_default=0)
    spent_cost_micros = fields.BigIntField(default=0, db_default=0)
    spent_calls = fields.IntField(default=0, db_default=0)
    submission_seq = fields.IntField(default=0, db_default=0)
    """The ledger's last position: each submission admitted takes the next number as
    its ``seq``, in the admitting transaction (``services.write.ledger``)."""
    ledger_seq = fields.IntField(default=0, db_default=0)
    """The ledger's change count: every admission or change of a submission takes
    the next number (its ``changed_seq``), first thing in its transaction, so the
    session's row orders every change of its ledger (``sessionSubmissions``)."""

    class Meta:
        table = "sessions"
        unique_together = (("user_id", "public_id"),)
        indexes = (
            Index(fields=("user_id", "id"), name="sessions_user_newest"),
            Index(fields=("user_id", "status", "id"), name="sessions_user_status"),
            Index(fields=("status", "expires_at"), name="sessions_expiry"),
        )


class SessionItem(Model):
    """One item of a session's conversation (an OpenAI Agents SDK input item, or any
    JSON value an agent keeps in order), as compact JSON text exactly as it is
    answered: ``seq`` is its place, given by the write that added it from the
    session's ``item_seq`` in the same transaction."""

    id = fields.IntField(primary_key=True)
    session: fields.ForeignKeyRelation[Session] = fields.ForeignKeyField(
        "runstate.Session", related_name="items", on_delete=fields.CASCADE
    )
    session_id: int
    seq = fields.IntField()
    item = fields.TextField()
    added_at = fields.DatetimeField()
    stored_bytes = fields.BigIntField()

    class Meta:
        table = "session_items"
        unique_together = (("session_id", "seq"),)


class Task(Model):
    """One multi-step job. The lease lives on the task row (``lock_*``) so that the
    version compare-and-swap and the fencing-token check are one conditional UPDATE."""

    id = fields.IntField(primary_key=True)
    public_id = fields.CharField(max_length=ID_LENGTH)
    user_id = fields.CharField(max_length=USER_LENGTH)
    session: fields.ForeignKeyRelation[Session] = fields.ForeignKeyField(
        "runstate.Session", related_name="tasks", on_delete=fields.CASCADE
    )
    session_id: int
    goal = fields.TextField()
    status = fields.CharEnumField(TaskStatus, max_length=24)
    version = fields.IntField(default=1)
    current_step = fields.IntField(default=0)
    total_steps = fields.IntField(default=0)
    event_seq = fields.IntField(default=0)
    lock_holder = fields.CharField(max_length=USER_LENGTH, null=True)
    lock_token = fields.IntField(default=0)
    lock_expires_at = fields.DatetimeField(null=True)
    created_at = fields.DatetimeField()
    updated_at = fields.DatetimeField()
    stored_bytes = fields.BigIntField(default=0, db_default=0)
    """What the task and its history hold (``quota``): grows with every event."""
    spent_input_tokens = fields.BigIntField(default=0, db_default=0)
    """The sum of its steps' ``input_tokens``, kept by every write that reports
    spend in the row it already updates (``services.domain.spend``)."""
    spent_output_tokens = fields.BigIntField(default=0, db_default=0)
    spent_cost_micros = fields.BigIntField(default=0, db_default=0)
    spent_calls = fields.IntField(default=0, db_default=0)
    budget_max_tokens = fields.BigIntField(null=True)
    """The task's own budget: input plus output tokens; None, no limit."""
    budget_max_cost_micros = fields.BigIntField(null=True)
    run_of = fields.CharField(max_length=RUN_KIND_LENGTH, null=True)
    """The framework whose run the task holds (``"openai-agents"``), set at its
    creation and never changed; None: an ordinary task. ``claimTask`` hands a run
    out only to a claim naming its framework, and an ordinary task only to one
    naming none."""
    submission_id = fields.IntField(null=True)
    """The row id of the submission the task carries out (``Submission``); None: a
    task made with ``createTask``, outside the ledger. No foreign key: the
    submission names its task too, and two tables naming each other could not be
    created one after the other."""
    interrupt_requested = fields.BooleanField(default=False, db_default=False)
    """An INTERRUPT or ROLLBACK asked the task to stop: it starts no new work."""

    class Meta:
        table = "tasks"
        unique_together = (("user_id", "public_id"),)
        indexes = (
            Index(fields=("user_id", "id"), name="tasks_user_newest"),
            Index(fields=("user_id", "status", "id"), name="tasks_user_status"),
            # A claim's lookups: the oldest task of one kind (runs of a framework, or
            # ordinary tasks: run_of NULL) in one status, walked from its oldest.
            Index(fields=("user_id", "run_of", "status", "id"), name="tasks_user_kind_status"),
            Index(fields=("session_id", "id"), name="tasks_session_newest"),
            Index(fields=("session_id", "status", "id"), name="tasks_session_status"),
            # A quiet sessionActivity stream's catch-up: its tasks changed lately.
            Index(fields=("session_id", "updated_at"), name="tasks_session_updated"),
        )


class StepState(Model):
    """A step's changing fields: what a write may change after the plan made the
    step. ``Step`` holds them as the step stands now, ``StepVersion`` as they stood
    after each event that changed them, so a field declared here is saved by every
    write, kept in the history and read back by ``taskAt`` with no other edit."""

    output = bounded(fields.JSONField[object](null=True), "json_bytes")
    status = fields.CharEnumField(StepStatus, max_length=16)
    attempts = fields.IntField(default=0)
    error: str | None = bounded(fields.TextField(null=True), "error_chars")
    started_at: datetime | None = fields.DatetimeField(null=True)
    completed_at: datetime | None = fields.DatetimeField(null=True)
    input_tokens = fields.BigIntField(default=0, db_default=0)
    """Spend its writes reported, added up (``services.domain.spend``)."""
    output_tokens = fields.BigIntField(default=0, db_default=0)
    cost_micros = fields.BigIntField(default=0, db_default=0)
    calls = fields.IntField(default=0, db_default=0)
    """How many reports of spend it had."""
    models = fields.JSONField[object](null=True)
    """The model names its reports gave, in first-reported order, boxed (``box``);
    None: none."""

    class Meta:
        abstract = True


class Step(StepState):
    """One step of a task, addressed by its ``position`` (the API's step index).

    Its plan (``action``, ``input``, ``idempotent``: ``validation.StepPlan``) is fixed
    once made; its changing fields are ``StepState``'s."""

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="steps", on_delete=fields.CASCADE
    )
    task_id: int
    position = fields.IntField()
    action = fields.CharField(max_length=200)
    input = fields.JSONField[object](null=True)
    idempotent = fields.BooleanField(default=True)
    created_seq = fields.IntField(default=1, db_default=1)
    """The event that added the step: ``taskAt`` before it does not show it."""
    changed_seq = fields.IntField(default=0, db_default=0)
    """The last event that changed the step (0: none since it was added). At any seq
    from this one on, the row is the step as it stood; before it, ``StepVersion``."""

    class Meta:
        table = "steps"
        unique_together = (("task_id", "position"),)


class StepVersion(StepState):
    """A step's changing fields as they stood just after event ``seq``: the history.

    Its columns are ``StepState``'s with the keys that place them.
    One row per step an event changed, so an event's stored size follows its change.
    A step with no version at or before a seq stood as it was added then (PENDING,
    no attempts). The plan's fields never change and live on the step row alone.
    """

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="step_versions", on_delete=fields.CASCADE
    )
    task_id: int
    position = fields.IntField()
    seq = fields.IntField()

    class Meta:
        table = "step_versions"
        unique_together = (("task_id", "position", "seq"),)


class ToolState(Model):
    """Per task and tool: retries used, last result or error, rate limit."""

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="tool_states", on_delete=fields.CASCADE
    )
    task_id: int
    tool_name = fields.CharField(max_length=128)
    status = fields.CharEnumField(ToolStatus, max_length=16)
    version = fields.IntField(default=1)
    retry_count = fields.IntField(default=0)
    max_retries = fields.IntField(default=3)
    last_result = fields.JSONField[object](null=True)
    last_error = fields.TextField(null=True)
    rate_limit_reset_at = fields.DatetimeField(null=True)
    updated_at = fields.DatetimeField()
    created_seq = fields.IntField(default=1, db_default=1)
    """The event that first reported the tool: ``taskAt`` before it does not show it."""
    changed_seq = fields.IntField(default=0, db_default=0)
    """The last event that changed the tool state; before it, the events tell."""

    class Meta:
        table = "tool_states"
        unique_together = (("task_id", "tool_name"),)


class TaskEvent(Model):
    """One entry of a task's change log. ``seq`` is consecutive per task and unique.

    The row holds what changed and no more: the task's status and version after it,
    who changed it (``actor``, and ``note`` for a decision), and in ``delta`` the
    tool state (TOOL_STATE_CHANGED), the lease (LOCK_*), the origin of a fork, or
    the lease holder whose fencing token a write carried. The steps it changed are
    its ``StepVersion`` rows.
    """

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="events", on_delete=fields.CASCADE
    )
    task_id: int
    seq = fields.IntField()
    task_version = fields.IntField()
    kind = fields.CharEnumField(TaskEventKind, max_length=24)
    step_index = fields.IntField(null=True)
    tool_name = fields.CharField(max_length=128, null=True)
    at = fields.DatetimeField()
    # The default only fills rows of release 1 while migration 0003 converts them.
    status = fields.CharEnumField(TaskStatus, max_length=24, db_default=TaskStatus.PLANNED)
    delta = fields.JSONField[dict[str, object]](null=True)
    actor = fields.CharField(max_length=USER_LENGTH, null=True)
    """Who made the change: the user id of the token that wrote it."""
    note: str | None = fields.TextField(null=True)
    """A person's reason, as ``decideStep`` gave it."""

    class Meta:
        table = "task_events"
        unique_together = (("task_id", "seq"),)
        indexes = (
            # The latest tool-state or lease event at or before a seq (taskAt).
            Index(fields=("task_id", "kind", "tool_name", "seq"), name="task_events_part"),
        )


GRAPH_NAMESPACE_LENGTH = 1024
"""The longest checkpoint namespace: a subgraph's path of ``name:task-id`` parts."""


class GraphCheckpoint(Model):
    """One LangGraph checkpoint of a thread, the thread being the task.

    ``payload`` is the checkpoint without its channel values, as the saver's
    serializer wrote it (``type`` names the encoding); the values live in
    ``GraphBlob``, one row per channel and version, so a checkpoint stores only the
    channels it changed. ``metadata`` and ``channel_versions`` are kept as JSON
    beside it, for listing by metadata and for finding the blobs. ``seq`` is the
    task event that stored it; ``stored_bytes`` what it counts in the quotas."""

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="graph_checkpoints", on_delete=fields.CASCADE
    )
    task_id: int
    namespace = fields.CharField(max_length=GRAPH_NAMESPACE_LENGTH)
    checkpoint_id = fields.CharField(max_length=ID_LENGTH)
    parent_id = fields.CharField(max_length=ID_LENGTH, null=True)
    type = fields.CharField(max_length=32)
    payload = fields.BinaryField()
    metadata = fields.JSONField[dict[str, object]]()
    channel_versions = fields.JSONField[dict[str, str]]()
    run_id = fields.CharField(max_length=KEY_LENGTH, null=True)
    seq = fields.IntField()
    stored_bytes = fields.BigIntField()

    class Meta:
        table = "graph_checkpoints"
        unique_together = (("task_id", "namespace", "checkpoint_id"),)
        indexes = (
            # Newest first across a thread's namespaces (checkpoint ids sort by time).
            Index(fields=("task_id", "checkpoint_id"), name="graph_checkpoints_newest"),
            # A namespace's checkpoints in the order written: its latest, its list.
            Index(fields=("task_id", "namespace", "seq"), name="graph_checkpoints_written"),
            Index(fields=("run_id",), name="graph_checkpoints_run"),
        )


class GraphBlob(Model):
    """One channel's value at one version in a thread's namespace, as the saver's
    serializer wrote it: shared by every checkpoint whose versions name it."""

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="graph_blobs", on_delete=fields.CASCADE
    )
    task_id: int
    namespace = fields.CharField(max_length=GRAPH_NAMESPACE_LENGTH)
    channel = fields.CharField(max_length=KEY_LENGTH)
    version = fields.CharField(max_length=128)
    type = fields.CharField(max_length=32)
    payload = fields.BinaryField()
    stored_bytes = fields.BigIntField()

    class Meta:
        table = "graph_blobs"
        unique_together = (("task_id", "namespace", "channel", "version"),)


class GraphWrite(Model):
    """A pending write of one LangGraph task (``task_key``) against a checkpoint:
    ``idx`` orders a task's writes, special writes (errors, interrupts) have
    LangGraph's negative indexes."""

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="graph_writes", on_delete=fields.CASCADE
    )
    task_id: int
    namespace = fields.CharField(max_length=GRAPH_NAMESPACE_LENGTH)
    checkpoint_id = fields.CharField(max_length=ID_LENGTH)
    task_key = fields.CharField(max_length=KEY_LENGTH)
    task_path = fields.CharField(max_length=GRAPH_NAMESPACE_LENGTH, default="")
    idx = fields.IntField()
    channel = fields.CharField(max_length=KEY_LENGTH)
    type = fields.CharField(max_length=32)
    payload = fields.BinaryField()
    stored_bytes = fields.BigIntField()

    class Meta:
        table = "graph_writes"
        unique_together = (("task_id", "namespace", "checkpoint_id", "task_key", "idx"),)


class GraphNode(Model):
    """Which step of a thread's task shows one LangGraph task (a node's run),
    ``task_key`` being LangGraph's task id in the namespace. ``interrupted``: the
    run stopped at an ``interrupt()`` and waits for a person's answer."""

    id = fields.IntField(primary_key=True)
    task: fields.ForeignKeyRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name="graph_nodes", on_delete=fields.CASCADE
    )
    task_id: int
    namespace = fields.CharField(max_length=GRAPH_NAMESPACE_LENGTH)
    task_key = fields.CharField(max_length=KEY_LENGTH)
    position = fields.IntField()
    interrupted = fields.BooleanField(default=False)

    class Meta:
        table = "graph_nodes"
        unique_together = (("task_id", "namespace", "task_key"),)


class Submission(Model):
    """One input admitted into a session's ledger (``services.write.ledger``):
    ``seq`` its place, given from the session's ``submission_seq`` in the admitting
    transaction; ``task`` the task that carries it out. At most one of a session's
    submissions is ACTIVE; the next to be is the QUEUED one lowest in
    (``rank``, ``seq``): an interrupting one (rank 0) ahead of those queued in
    order (rank 1)."""

    id = fields.IntField(primary_key=True)
    public_id = fields.CharField(max_length=ID_LENGTH)
    user_id = fields.CharField(max_length=USER_LENGTH)
    session: fields.ForeignKeyRelation[Session] = fields.ForeignKeyField(
        "runstate.Session", related_name="submissions", on_delete=fields.CASCADE
    )
    session_id: int
    seq = fields.IntField()
    input = fields.JSONField[object](null=True)
    """The client's input, boxed (``box``)."""
    policy = fields.CharEnumField(AdmissionPolicy, max_length=16)
    status = fields.CharEnumField(SubmissionStatus, max_length=16)
    rank = fields.SmallIntField(default=1)
    reason: str | None = fields.TextField(null=True)
    task: fields.ForeignKeyNullableRelation[Task] = fields.ForeignKeyField(
        "runstate.Task", related_name=False, null=True, on_delete=fields.SET_NULL
    )
    task_id: int | None
    stop = fields.CharEnumField(SubmissionStatus, max_length=16, null=True)
    """What the submission ends as once its task stops (INTERRUPTED or ROLLED_BACK),
    set when another asked it to stop; None: nobody did."""
    displaced_by = fields.CharField(max_length=ID_LENGTH, null=True)
    """The public id of the submission that asked it to stop."""
    schedule_id = fields.IntField(null=True)
    """The row id of the schedule that fired it (no foreign key: a deleted
    schedule's fires stay in the ledger)."""
    scheduled_for = fields.DatetimeField(null=True)
    actor = fields.CharField(max_length=USER_LENGTH + 16)
    changed_seq = fields.IntField(default=0)
    """The session's ``ledger_seq`` at the submission's last change."""
    spent_input_tokens = fields.BigIntField(default=0)
    """What its task spent, kept here when a ROLLBACK removed the task (its spend
    stays counted in its session's); 0 while the task stands."""
    spent_output_tokens = fields.BigIntField(default=0)
    spent_cost_micros = fields.BigIntField(default=0)
    spent_calls = fields.IntField(default=0)
    created_at = fields.DatetimeField()
    updated_at = fields.DatetimeField()
    stored_bytes = fields.BigIntField(default=0, db_default=0)

    class Meta:
        table = "submissions"
        unique_together = (
            ("user_id", "public_id"),
            ("session_id", "seq"),
            # A schedule's due time fires once, whichever process gets there first.
            ("schedule_id", "scheduled_for"),
        )
        indexes = (
            Index(fields=("session_id", "status", "rank", "seq"), name="submissions_turn"),
            Index(fields=("user_id", "status"), name="submissions_user_status"),
            Index(fields=("task_id",), name="submissions_task"),
            Index(fields=("session_id", "changed_seq"), name="submissions_changed"),
            # The stopped tasks whose agent's lease lapsed, found each firing round.
            Index(fields=("status", "stop"), name="submissions_stopping"),
        )


class Schedule(Model):
    """Fires a submission into its session at each due time of ``cron`` in
    ``timezone`` (``services.actions.schedules``); ``next_fire_at`` is the next due
    time not yet fired, None while paused."""

    id = fields.IntField(primary_key=True)
    public_id = fields.CharField(max_length=ID_LENGTH)
    user_id = fields.CharField(max_length=USER_LENGTH)
    session: fields.ForeignKeyRelation[Session] = fields.ForeignKeyField(
        "runstate.Session", related_name="schedules", on_delete=fields.CASCADE
    )
    session_id: int
    version = fields.IntField(default=1)
    cron = fields.CharField(max_length=200)
    timezone = fields.CharField(max_length=64)
    goal = fields.TextField()
    steps = fields.JSONField[object]()
    """The plan of each fire's task: a list of {action, input, idempotent}."""
    input = fields.JSONField[object](null=True)
    policy = fields.CharEnumField(AdmissionPolicy, max_length=16)
    misfire = fields.CharEnumField(MisfirePolicy, max_length=16)
    enabled = fields.BooleanField(default=True)
    next_fire_at = fields.DatetimeField(null=True)
    last_fire_at = fields.DatetimeField(null=True)
    created_at = fields.DatetimeField()
    stored_bytes = fields.BigIntField(default=0, db_default=0)

    class Meta:
        table = "schedules"
        unique_together = (("user_id", "public_id"),)
        indexes = (
            Index(fields=("next_fire_at",), name="schedules_due"),
            Index(fields=("session_id", "id"), name="schedules_session"),
            Index(fields=("user_id", "id"), name="schedules_user"),
        )


class IdempotencyKey(Model):
    """A write done under a client's idempotency key, and the answer it gave.

    The UNIQUE (user_id, key) index decides which of two concurrent calls writes;
    the other answers from ``answer``. Kept until ``expires_at``, then swept.
    """

    id = fields.IntField(primary_key=True)
    user_id = fields.CharField(max_length=USER_LENGTH)
    key = fields.CharField(max_length=KEY_LENGTH)
    operation = fields.CharField(max_length=64)
    fingerprint = fields.CharField(max_length=64)
    answer = fields.JSONField[dict[str, object]](null=True)
    stored_bytes = fields.BigIntField(default=0, db_default=0)
    """What the row counts toward its user's quota (``quota``): an answer kept as it
    is (a session, a tool state); 0 for a task's, kept as a reference."""
    created_at = fields.DatetimeField()
    expires_at = fields.DatetimeField(db_index=True)

    class Meta:
        table = "idempotency_keys"
        unique_together = (("user_id", "key"),)


class Installation(Model):
    """One row naming this database, so that processes sharing it share broker channels.

    Channels are prefixed with the id, so two databases behind one Redis never
    see each other's events even though their row ids overlap.
    """

    id = fields.CharField(max_length=36, primary_key=True)
    created_at = fields.DatetimeField()
    epoch = fields.CharField(max_length=36, null=True)
    """The database's timeline: set on first start, new after ``runstate restore-mark``
    (run once a backup is restored), so that cursors of the old timeline resync."""

    class Meta:
        table = "installation"
