"""Mutation resolvers."""

from __future__ import annotations

import strawberry

from runstate.resolvers.answers import answered_mutation, once
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
    CheckpointTaskInput,
    ClaimTaskInput,
    CompleteStepInput,
    CreateTaskInput,
    DecideStepInput,
    DeleteSessionInput,
    FailStepInput,
    ForkTaskInput,
    RecordToolCallInput,
    ReleaseTaskLockInput,
    RenewTaskLockInput,
    ResumeTaskInput,
    SetTaskStatusInput,
    StartSessionInput,
    StepRefInput,
    UpdateSessionInput,
)
from runstate.schema.results import (
    DeleteResult,
    LockResult,
    ReleaseResult,
    ResumeResult,
    SessionResult,
    TaskResult,
    ToolStateResult,
)
from runstate.schema.types import AgentSession, Deleted, ResumePlan, Task, TaskLock, ToolState
from runstate.services.actions import leases, recovery, sessions, tasks, tools
from runstate.services.domain.views import (
    LockView,
    ResumePlanView,
    SessionView,
    TaskView,
    ToolStateView,
    unpublished,
)
from runstate.services.threads import checkpoints, nodes


def _deleted(session_id: str) -> Deleted:
    return Deleted(id=strawberry.ID(session_id))


@strawberry.type
class Mutation:
    """Every change an agent or a person makes."""

    @answered_mutation()
    async def start_session(self, info: Info, input: StartSessionInput) -> SessionResult:
        return AgentSession.of(
            await once(
                info,
                input,
                SessionView,
                lambda: unpublished(
                    sessions.start_session(
                        info.context.house,
                        info.context.user_id,
                        default_ttl=info.context.settings.session_ttl,
                        session_id=input.id,
                        ttl_seconds=input.ttl_seconds,
                        metadata=input.metadata,
                    )
                ),
            )
        )

    @answered_mutation()
    async def update_session(self, info: Info, input: UpdateSessionInput) -> SessionResult:
        set_metadata = input.metadata is not strawberry.UNSET
        return AgentSession.of(
            await once(
                info,
                input,
                SessionView,
                lambda: unpublished(
                    sessions.update_session(
                        info.context.house,
                        info.context.user_id,
                        input.id,
                        expected_version=input.expected_version,
                        status=input.status,
                        message_count_delta=input.message_count_delta,
                        metadata=input.metadata if set_metadata else None,
                        set_metadata=set_metadata,
                    )
                ),
            )
        )

    @answered_mutation(
        description=(
            "Ends the session now and deletes it with all its tasks, steps, tool states and events."
        )
    )
    async def delete_session(self, info: Info, input: DeleteSessionInput) -> DeleteResult:
        return _deleted(
            await once(
                info,
                input,
                str,
                lambda: unpublished(sessions.delete_session(info.context.user_id, input.id)),
            )
        )

    @answered_mutation()
    async def create_task(self, info: Info, input: CreateTaskInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.create_task(
                    info.context.house,
                    info.context.user_id,
                    input.session_id,
                    goal=input.goal,
                    steps=[s.plan() for s in input.steps],
                    task_id=input.id,
                    lease=None
                    if input.lease is None
                    else (input.lease.holder_id, input.lease.ttl_seconds),
                ),
            )
        )

    @answered_mutation(
        description="Appends steps to the plan (agents often discover steps as they go)."
    )
    async def add_steps(self, info: Info, input: AddStepsInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.add_steps(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    [s.plan() for s in input.steps],
                    expected_version=input.expected_version,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def start_step(self, info: Info, input: StepRefInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.start_step(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.step_index,
                    expected_version=input.expected_version,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def complete_step(self, info: Info, input: CompleteStepInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.complete_step(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.step_index,
                    expected_version=input.expected_version,
                    output=input.output,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def fail_step(self, info: Info, input: FailStepInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.fail_step(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.step_index,
                    expected_version=input.expected_version,
                    error=input.error,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def checkpoint_task(self, info: Info, input: CheckpointTaskInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.checkpoint_task(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    [s.patch() for s in input.steps],
                    expected_version=input.expected_version,
                    status=input.status,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def set_task_status(self, info: Info, input: SetTaskStatusInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.set_task_status(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.status,
                    expected_version=input.expected_version,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def resume_task(self, info: Info, input: ResumeTaskInput) -> ResumeResult:
        return ResumePlan.of(
            await once(
                info,
                input,
                ResumePlanView,
                lambda: recovery.resume_task(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    expected_version=input.expected_version,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def decide_step(self, info: Info, input: DecideStepInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: recovery.decide_step(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.step_index,
                    input.decision,
                    expected_version=input.expected_version,
                    output=input.output,
                    note=input.note,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation()
    async def acquire_task_lock(self, info: Info, input: AcquireTaskLockInput) -> LockResult:
        return TaskLock.of(
            await once(
                info,
                input,
                LockView,
                lambda: leases.acquire_task_lock(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.holder_id,
                    input.ttl_seconds,
                ),
            )
        )

    @answered_mutation()
    async def renew_task_lock(self, info: Info, input: RenewTaskLockInput) -> LockResult:
        return TaskLock.of(
            await once(
                info,
                input,
                LockView,
                lambda: leases.renew_task_lock(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.holder_id,
                    input.ttl_seconds,
                ),
            )
        )

    @answered_mutation()
    async def release_task_lock(self, info: Info, input: ReleaseTaskLockInput) -> ReleaseResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: leases.release_task_lock(
                    info.context.house, info.context.user_id, input.task_id, input.holder_id
                ),
            )
        )

    @answered_mutation()
    async def record_tool_call(self, info: Info, input: RecordToolCallInput) -> ToolStateResult:
        return ToolState.of(
            await once(
                info,
                input,
                ToolStateView,
                lambda: tools.record_tool_call(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.tool_name,
                    input.outcome,
                    expected_version=input.expected_version,
                    fencing_token=input.fencing_token,
                    result=input.result,
                    error=input.error,
                    retry_after_seconds=input.retry_after_seconds,
                    max_retries=input.max_retries,
                ),
            )
        )

    @answered_mutation(
        description=(
            "A new task in the same session from a past state of another: its steps as "
            "they stood at atSeq (RUNNING ones PENDING); its first event names the source."
        )
    )
    async def fork_task(self, info: Info, input: ForkTaskInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: tasks.fork_task(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.at_seq,
                    new_id=input.id,
                    goal=input.goal,
                ),
            )
        )

    @answered_mutation(
        description=(
            "Atomically picks the oldest task that needs a worker and leases it; NotFound "
            "when none does."
        )
    )
    async def claim_task(self, info: Info, input: ClaimTaskInput) -> LockResult:
        return TaskLock.of(
            await once(
                info,
                input,
                LockView,
                lambda: leases.claim_task(
                    info.context.house,
                    info.context.user_id,
                    input.holder_id,
                    input.ttl_seconds,
                    session_id=input.session_id,
                ),
            )
        )

    @answered_mutation(
        description=(
            "Store a LangGraph checkpoint in the thread's task (GRAPH_CHECKPOINT): a "
            "task write like any other, refused by a live lease without its token."
        )
    )
    async def put_graph_checkpoint(self, info: Info, input: PutGraphCheckpointInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: checkpoints.put_checkpoint(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    namespace=input.namespace,
                    checkpoint_id=input.checkpoint_id,
                    parent_id=input.parent_id,
                    checkpoint=input.checkpoint(),
                    metadata=input.metadata,
                    channel_versions=input.versions(),
                    channels=input.values(),
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation(
        description="Store a LangGraph task's pending writes in the thread's task (GRAPH_WRITES)."
    )
    async def put_graph_writes(self, info: Info, input: PutGraphWritesInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: checkpoints.put_writes(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    namespace=input.namespace,
                    checkpoint_id=input.checkpoint_id,
                    writes=input.pending(),
                    node=None if input.node is None else input.node.run(),
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation(
        description=(
            "Report node runs of a LangGraph thread, shown as its task's steps "
            "(STEP_STARTED), and the end of a run (TASK_STATUS_CHANGED)."
        )
    )
    async def record_graph_run(self, info: Info, input: RecordGraphRunInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: nodes.record_run(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    [n.run() for n in input.nodes],
                    ended=input.ended,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation(
        description="Delete the thread's checkpoints, values and writes (GRAPH_CLEARED)."
    )
    async def clear_graph(self, info: Info, input: ClearGraphInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: checkpoints.clear(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation(
        description=(
            "Prune a LangGraph thread (GRAPH_PRUNED): KEEP_LATEST keeps each "
            "namespace's latest checkpoint and the ancestors its delta channels need."
        )
    )
    async def prune_graph(self, info: Info, input: PruneGraphInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: checkpoints.prune(
                    info.context.house,
                    info.context.user_id,
                    input.task_id,
                    input.strategy,
                    fencing_token=input.fencing_token,
                ),
            )
        )

    @answered_mutation(
        description="Delete the checkpoints of LangGraph runs, in every thread of the caller."
    )
    async def delete_graph_runs(self, info: Info, input: DeleteGraphRunsInput) -> GraphRunsResult:
        deleted = await once(
            info,
            input,
            int,
            lambda: checkpoints.delete_runs(
                info.context.house, info.context.user_id, input.run_ids
            ),
        )
        return GraphRunsDeleted(checkpoints=deleted)

    @answered_mutation(
        description=(
            "Copy a LangGraph thread whole into another task (GRAPH_COPIED), forking "
            "the thread's task when the target does not exist."
        )
    )
    async def copy_graph(self, info: Info, input: CopyGraphInput) -> TaskResult:
        return Task.of(
            await once(
                info,
                input,
                TaskView,
                lambda: checkpoints.copy(
                    info.context.house, info.context.user_id, input.task_id, input.new_task_id
                ),
            )
        )
