"""Mutation resolvers: one table, a row per mutation (``answers.write``).

Each row names the service that does the write, the input and result types, and
how the service's value is answered; the service's parameters are taken from the
input's fields of the same names, or given where they are computed. A new input
field reaches its service with no edit here, and one that no parameter takes
fails as the schema is built. docs/writes.md (``runstate export-writes``) lists
every row with what feeds each parameter."""

from __future__ import annotations

import strawberry

from runstate.basics.enums import AdmissionPolicy, MisfirePolicy
from runstate.resolvers.answers import write
from runstate.schema.context import Info
from runstate.schema.graphs import (
    ClearGraphInput,
    CopyGraphInput,
    DeleteGraphRunsInput,
    GraphRunsDeleted,
    GraphRunsResult,
    PruneGraphInput,
    PutGraphCheckpointInput,
    PutGraphWritesInput,
    RecordGraphRunInput,
)
from runstate.schema.inputs import (
    AcquireTaskLockInput,
    AddStepsInput,
    AnswerInterruptInput,
    CheckpointTaskInput,
    ClaimTaskInput,
    CompleteStepInput,
    CreateTaskInput,
    DecideStepInput,
    DeleteSessionInput,
    FailStepInput,
    ForkTaskInput,
    RecordSpendInput,
    RecordToolCallInput,
    ReleaseTaskLockInput,
    RenewTaskLockInput,
    ResumeTaskInput,
    SetBudgetInput,
    SetTaskStatusInput,
    StartSessionInput,
    StepRefInput,
    UpdateSessionInput,
)
from runstate.schema.intake import (
    CancelSubmissionInput,
    CreateScheduleInput,
    DeleteScheduleInput,
    ScheduleResult,
    SubmissionResult,
    SubmitInput,
    UpdateScheduleInput,
)
from runstate.schema.results import (
    BudgetResult,
    DeleteResult,
    LockResult,
    ReleaseResult,
    ResumeResult,
    SessionResult,
    TaskResult,
    ToolStateResult,
)
from runstate.schema.session_items import (
    AddSessionItemsInput,
    ClearSessionItemsInput,
    PopSessionItemInput,
    SessionItemsChanged,
    SessionItemsChangeResult,
)
from runstate.schema.spending import budget_of, report_of
from runstate.schema.types import (
    AgentSession,
    Deleted,
    ResumePlan,
    Schedule,
    Submission,
    Task,
    TaskLock,
    ToolState,
)
from runstate.services.actions import (
    budgets,
    conversation,
    leases,
    recovery,
    schedules,
    sessions,
    submissions,
    tasks,
    tools,
)
from runstate.services.domain.views import SessionView, TaskView
from runstate.services.threads import checkpoints, interrupts, nodes


def _deleted(session_id: str) -> Deleted:
    return Deleted(id=strawberry.ID(session_id))


_PLANS = {"steps": lambda _, input: [s.plan() for s in input.steps]}
_SPEND = {"spend": lambda _, input: report_of(input.spend)}
_BUDGET = {"budget": lambda _, input: budget_of(input.budget)}


def _rules(info: Info, _: object) -> schedules.Rules:
    settings = info.context.settings
    return schedules.Rules(settings.max_schedules, settings.schedule_min_seconds)


def _task_or_session(value: TaskView | SessionView) -> Task | AgentSession:
    return Task.of(value) if isinstance(value, TaskView) else AgentSession.of(value)


@strawberry.type
class Mutation:
    """Every change an agent or a person makes."""

    start_session = write(
        sessions.start_session,
        StartSessionInput,
        SessionResult,
        AgentSession.of,
        given={
            "default_ttl": lambda info, _: info.context.settings.session_ttl,
            "session_id": lambda _, input: input.id,
            **_BUDGET,
        },
        reads=("id",),
    )
    update_session = write(
        sessions.update_session,
        UpdateSessionInput,
        SessionResult,
        AgentSession.of,
        given={
            "session_id": lambda _, input: input.id,
            "metadata": lambda _, input: (
                None if input.metadata is strawberry.UNSET else input.metadata
            ),
            "set_metadata": lambda _, input: input.metadata is not strawberry.UNSET,
        },
        reads=("id", "metadata"),
    )
    delete_session = write(
        sessions.delete_session,
        DeleteSessionInput,
        DeleteResult,
        _deleted,
        given={"session_id": lambda _, input: input.id},
        reads=("id",),
        description=(
            "Ends the session now and deletes it with all its tasks, steps, tool states and events."
        ),
    )
    add_session_items = write(
        conversation.add_items,
        AddSessionItemsInput,
        SessionItemsChangeResult,
        SessionItemsChanged.of,
        description=(
            "Append items to the session's conversation, in order, as one batch: each takes"
            " the next seq, given in the write's transaction, so writers in several"
            " processes never share or skip one. Marks the session active."
        ),
    )
    pop_session_item = write(
        conversation.pop_item,
        PopSessionItemInput,
        SessionItemsChangeResult,
        SessionItemsChanged.of,
        description=(
            "Remove the newest item of the conversation by the server's order, and answer"
            " it exactly as it was stored (popped null, nothing written, when there is none)."
        ),
    )
    clear_session_items = write(
        conversation.clear_items,
        ClearSessionItemsInput,
        SessionItemsChangeResult,
        SessionItemsChanged.of,
        description="Remove every item of the session's conversation.",
    )
    create_task = write(
        tasks.create_task,
        CreateTaskInput,
        TaskResult,
        Task.of,
        given={
            **_PLANS,
            **_BUDGET,
            "task_id": lambda _, input: input.id,
            "lease": lambda _, input: (
                None if input.lease is None else (input.lease.holder_id, input.lease.ttl_seconds)
            ),
        },
        reads=("id", "lease"),
    )
    add_steps = write(
        tasks.add_steps,
        AddStepsInput,
        TaskResult,
        Task.of,
        given=_PLANS,
        description="Appends steps to the plan (agents often discover steps as they go).",
    )
    start_step = write(tasks.start_step, StepRefInput, TaskResult, Task.of)
    complete_step = write(tasks.complete_step, CompleteStepInput, TaskResult, Task.of, given=_SPEND)
    fail_step = write(tasks.fail_step, FailStepInput, TaskResult, Task.of, given=_SPEND)
    record_spend = write(
        tasks.record_spend,
        RecordSpendInput,
        TaskResult,
        Task.of,
        given=_SPEND,
        description=(
            "Report spend of a step that has started, running or ended (SPEND_RECORDED); "
            "the task's version is left alone, like a tool report's. Always recorded, "
            "even past a budget."
        ),
    )
    set_budget = write(
        budgets.set_budget,
        SetBudgetInput,
        BudgetResult,
        _task_or_session,
        given=_BUDGET,
        kept_as=SessionView,
        description=(
            "Set, change or remove (null limits) the budget of a task or a session, at the "
            "version seen: a person's decision (a task's BUDGET_CHANGED event carries the "
            "actor and the note). Raising it lets refused work go on."
        ),
    )
    checkpoint_task = write(
        tasks.checkpoint_task,
        CheckpointTaskInput,
        TaskResult,
        Task.of,
        given={"patches": lambda _, input: [s.patch() for s in input.steps]},
        reads=("steps",),
    )
    set_task_status = write(tasks.set_task_status, SetTaskStatusInput, TaskResult, Task.of)
    resume_task = write(recovery.resume_task, ResumeTaskInput, ResumeResult, ResumePlan.of)
    decide_step = write(recovery.decide_step, DecideStepInput, TaskResult, Task.of)
    answer_interrupt = write(
        interrupts.answer_interrupt,
        AnswerInterruptInput,
        TaskResult,
        Task.of,
        description=(
            "A person's answer to a LangGraph thread waiting at interrupt(), kept on the"
            " node's step for the graph's process to resume with (INTERRUPT_ANSWERED)."
            " Needs the version seen, not the thread's lease."
        ),
    )
    acquire_task_lock = write(
        leases.acquire_task_lock, AcquireTaskLockInput, LockResult, TaskLock.of
    )
    renew_task_lock = write(leases.renew_task_lock, RenewTaskLockInput, LockResult, TaskLock.of)
    release_task_lock = write(
        leases.release_task_lock, ReleaseTaskLockInput, ReleaseResult, Task.of
    )
    record_tool_call = write(
        tools.record_tool_call, RecordToolCallInput, ToolStateResult, ToolState.of, given=_SPEND
    )
    fork_task = write(
        tasks.fork_task,
        ForkTaskInput,
        TaskResult,
        Task.of,
        given={"new_id": lambda _, input: input.id},
        reads=("id",),
        description=(
            "A new task in the same session from a past state of another: its steps as "
            "they stood at atSeq (RUNNING ones PENDING); its first event names the source."
        ),
    )
    submit_input = write(
        submissions.submit_input,
        SubmitInput,
        SubmissionResult,
        Submission.of,
        given={
            **_PLANS,
            **_BUDGET,
            "policy": lambda _, input: input.policy or AdmissionPolicy.REJECT,
        },
        reads=("policy",),
        description=(
            "Admits an input into its session's ledger under its policy (default REJECT),"
            " with the task that carries it out."
        ),
    )
    cancel_submission = write(
        submissions.cancel_submission,
        CancelSubmissionInput,
        SubmissionResult,
        Submission.of,
        given={"submission_id": lambda _, input: input.id},
        reads=("id",),
    )
    create_schedule = write(
        schedules.create_schedule,
        CreateScheduleInput,
        ScheduleResult,
        Schedule.of,
        given={
            **_PLANS,
            "rules": _rules,
            "cron_expression": lambda _, input: input.cron,
            "timezone": lambda _, input: input.timezone or "UTC",
            "policy": lambda _, input: input.policy or AdmissionPolicy.ENQUEUE,
            "misfire": lambda _, input: input.misfire or MisfirePolicy.SKIP,
            "enabled": lambda _, input: input.enabled is not False,
        },
        reads=("cron", "timezone", "policy", "misfire", "enabled"),
    )
    update_schedule = write(
        schedules.update_schedule,
        UpdateScheduleInput,
        ScheduleResult,
        Schedule.of,
        given={
            "rules": _rules,
            "schedule_id": lambda _, input: input.id,
            "cron_expression": lambda _, input: input.cron,
        },
        reads=("id", "cron"),
    )
    delete_schedule = write(
        schedules.delete_schedule,
        DeleteScheduleInput,
        DeleteResult,
        _deleted,
        given={"schedule_id": lambda _, input: input.id},
        reads=("id",),
    )
    claim_task = write(
        leases.claim_task,
        ClaimTaskInput,
        LockResult,
        TaskLock.of,
        description=(
            "Atomically picks the oldest task that needs a worker and leases it; NotFound "
            "when none does."
        ),
    )
    put_graph_checkpoint = write(
        checkpoints.put_checkpoint,
        PutGraphCheckpointInput,
        TaskResult,
        Task.of,
        given={
            "checkpoint": lambda _, input: input.checkpoint(),
            "channel_versions": lambda _, input: input.versions(),
            "channels": lambda _, input: input.values(),
            "held": lambda _, input: input.held(),
            "new_thread": lambda info, input: (
                None
                if input.new_thread is None
                else input.new_thread.thread(info.context.settings.session_ttl)
            ),
        },
        reads=("type", "payload", "writes"),
        description=(
            "Store a LangGraph checkpoint in the thread's task (GRAPH_CHECKPOINT): a "
            "task write like any other, refused by a live lease without its token."
        ),
    )
    put_graph_writes = write(
        checkpoints.put_writes,
        PutGraphWritesInput,
        TaskResult,
        Task.of,
        given={
            "writes": lambda _, input: input.pending(),
            "node": lambda _, input: None if input.node is None else input.node.run(),
        },
        reads=("graph_task_id", "graph_task_path"),
        description="Store a LangGraph task's pending writes in the thread's task (GRAPH_WRITES).",
    )
    record_graph_run = write(
        nodes.record_run,
        RecordGraphRunInput,
        TaskResult,
        Task.of,
        given={"runs": lambda _, input: [n.run() for n in input.nodes]},
        reads=("nodes",),
        description=(
            "Report node runs of a LangGraph thread, shown as its task's steps "
            "(STEP_STARTED), and the end of a run (TASK_STATUS_CHANGED)."
        ),
    )
    clear_graph = write(
        checkpoints.clear,
        ClearGraphInput,
        TaskResult,
        Task.of,
        description="Delete the thread's checkpoints, values and writes (GRAPH_CLEARED).",
    )
    prune_graph = write(
        checkpoints.prune,
        PruneGraphInput,
        TaskResult,
        Task.of,
        description=(
            "Prune a LangGraph thread (GRAPH_PRUNED): KEEP_LATEST keeps each "
            "namespace's latest checkpoint and the ancestors its delta channels need."
        ),
    )
    delete_graph_runs = write(
        checkpoints.delete_runs,
        DeleteGraphRunsInput,
        GraphRunsResult,
        lambda deleted: GraphRunsDeleted(checkpoints=deleted),
        description="Delete the checkpoints of LangGraph runs, in every thread of the caller.",
    )
    copy_graph = write(
        checkpoints.copy,
        CopyGraphInput,
        TaskResult,
        Task.of,
        given={"new_id": lambda _, input: input.new_task_id},
        reads=("new_task_id",),
        description=(
            "Copy a LangGraph thread whole into another task (GRAPH_COPIED), forking "
            "the thread's task when the target does not exist."
        ),
    )
