"""Query resolvers."""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON

from runstate.basics.enums import SessionStatus, TaskStatus
from runstate.resolvers.answers import answered
from runstate.schema.context import Info
from runstate.schema.graphs import GraphCheckpoint, GraphCheckpointPage, GraphCheckpointResult
from runstate.schema.intake import ScheduleResult, SubmissionResult
from runstate.schema.results import SessionResult, TaskResult
from runstate.schema.session_items import SessionItemPage, SessionItemsResult
from runstate.schema.spending import Spend
from runstate.schema.types import (
    AgentSession,
    Schedule,
    SessionConnection,
    Submission,
    Task,
    TaskConnection,
    Usage,
)
from runstate.services.domain import quota
from runstate.services.domain.errors import InvalidInputError
from runstate.services.domain.ratelimit import READ_COST
from runstate.services.read import entries, lookups, timetables, transcript
from runstate.services.threads import checkpoints


@strawberry.type
class Query:
    """Reads of the caller's own state."""

    @answered(description="The caller's session. An expired session answers SessionExpired.")
    async def session(self, info: Info, id: strawberry.ID) -> SessionResult:
        user = info.context.user_id
        await info.context.charge(READ_COST)
        return AgentSession.of(await lookups.get_session(user, id))

    @strawberry.field(description="The caller's sessions, newest first.")
    async def sessions(
        self,
        info: Info,
        status: SessionStatus | None = None,
        first: int | None = 50,
        after: str | None = None,
    ) -> SessionConnection:
        await info.context.charge(READ_COST)
        page = await lookups.list_sessions(
            info.context.user_id, status=status, first=50 if first is None else first, after=after
        )
        return SessionConnection.of(page)

    @answered()
    async def task(self, info: Info, id: strawberry.ID) -> TaskResult:
        user = info.context.user_id
        await info.context.charge(READ_COST)
        return Task.of(await lookups.get_task(user, id))

    @answered(
        description="The task exactly as it stood just after event `seq` (history, time travel)."
    )
    async def task_at(self, info: Info, id: strawberry.ID, seq: int) -> TaskResult:
        user = info.context.user_id
        await info.context.charge(READ_COST)
        return Task.of(await lookups.get_task_at(user, id, seq))

    @strawberry.field(
        description=(
            "The caller's tasks, newest first; e.g. tasks(sessionId: $s, status: FAILED). "
            "stalled: true lists only tasks whose agent is gone (see Task.stalled)."
        )
    )
    async def tasks(
        self,
        info: Info,
        session_id: strawberry.ID | None = None,
        status: TaskStatus | None = None,
        stalled: bool | None = None,
        first: int | None = 50,
        after: str | None = None,
    ) -> TaskConnection:
        await info.context.charge(READ_COST)
        page = await lookups.list_tasks(
            info.context.user_id,
            session_id=session_id,
            status=status,
            stalled_only=stalled,
            first=50 if first is None else first,
            after=after,
        )
        return TaskConnection.of(page)

    @answered(
        description=(
            "A LangGraph checkpoint of the thread (task) `threadId` in `namespace`: "
            "`checkpointId`, or the latest. NotFound without the task or the checkpoint."
        )
    )
    async def graph_checkpoint(
        self,
        info: Info,
        thread_id: strawberry.ID,
        namespace: str = "",
        checkpoint_id: strawberry.ID | None = None,
    ) -> GraphCheckpointResult:
        await info.context.charge(READ_COST)
        view = await checkpoints.get_checkpoint(
            info.context.user_id, thread_id, namespace, checkpoint_id
        )
        return GraphCheckpoint.of(view)

    @strawberry.field(
        description=(
            "The caller's LangGraph checkpoints newest first: of one thread (or all), "
            "one namespace (or all), before a checkpoint id, whose metadata holds every "
            "key and value of `metadata`."
        )
    )
    async def graph_checkpoints(
        self,
        info: Info,
        thread_id: strawberry.ID | None = None,
        namespace: str | None = None,
        before: strawberry.ID | None = None,
        metadata: JSON | None = None,
        first: int = 10,
        after: str | None = None,
    ) -> GraphCheckpointPage:
        await info.context.charge(READ_COST)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidInputError("metadata", "must be a JSON object")
        page = await checkpoints.list_checkpoints(
            info.context.user_id,
            task_id=thread_id,
            namespace=namespace,
            before=before,
            metadata=metadata,
            first=first,
            after=after,
        )
        return GraphCheckpointPage.of(page)

    @answered(
        description=(
            "Items of the session's conversation, oldest first: the newest `last` (at most"
            " 100, the default) of those before `beforeSeq`; hasMore says older ones are left."
        )
    )
    async def session_items(
        self,
        info: Info,
        session_id: strawberry.ID,
        last: int | None = None,
        before_seq: int | None = None,
    ) -> SessionItemsResult:
        await info.context.charge(READ_COST)
        page = await transcript.read_items(
            info.context.user_id, session_id, last=last, before_seq=before_seq
        )
        return SessionItemPage.of(page)

    @answered(description="A submission of one of the caller's sessions' ledgers.")
    async def submission(self, info: Info, id: strawberry.ID) -> SubmissionResult:
        await info.context.charge(READ_COST)
        return Submission.of(await entries.get_submission(info.context.user_id, id))

    @answered(description="A schedule of one of the caller's sessions.")
    async def schedule(self, info: Info, id: strawberry.ID) -> ScheduleResult:
        await info.context.charge(READ_COST)
        return Schedule.of(await timetables.get_schedule(info.context.user_id, id))

    @strawberry.field(description="How much the caller's sessions and tasks hold, and may hold.")
    async def usage(self, info: Info) -> Usage:
        await info.context.charge(READ_COST)
        user_id = info.context.user_id
        return Usage(
            stored_bytes=await quota.held(user_id),
            max_stored_bytes=info.context.house.limits.user_bytes,
            max_task_bytes=info.context.house.limits.task_bytes,
            spend=Spend.of(await quota.user_spent(user_id)),
            currency=info.context.settings.currency,
        )
