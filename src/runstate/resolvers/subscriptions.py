"""Subscription resolvers: the gap-free event streams of ``services.live.streams``."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry

from runstate.schema.context import Info
from runstate.schema.session_items import SessionItemsEvent
from runstate.schema.types import SubmissionEvent, TaskEvent
from runstate.services.domain.ratelimit import SUBSCRIBE_COST
from runstate.services.live import item_stream, ledger_stream, streams
from runstate.services.live.relay import Place


def _another_timeline(info: Info, epoch: str | None) -> bool:
    """Whether a client's cursor comes from another timeline of the database."""
    return epoch is not None and epoch != info.context.epoch


@strawberry.type
class Subscription:
    """Live progress for web pages and watchers."""

    @strawberry.subscription(
        description=(
            "The task's streams. First a SNAPSHOT event of the task as it stands now "
            "(its seq is the task's eventSeq), or, with afterSeq, every stored event after "
            "that seq, in order, then each new event as it commits. Every subscriber of one "
            "task, on any server process, sees the same events in the same order with no "
            "gaps; a subscriber that falls behind or misses a broker message is caught up "
            "from the database, never left with a hole. With afterSeq, pass the epoch of the "
            "events the cursor comes from: from another timeline (a restored database) the "
            "stream starts with a SNAPSHOT instead."
        )
    )
    async def task_progress(
        self,
        info: Info,
        task_id: strawberry.ID,
        after_seq: int | None = None,
        epoch: str | None = None,
    ) -> AsyncGenerator[TaskEvent, None]:
        operation = info.context.live
        resumed_after = None if operation is None else operation.after
        if isinstance(resumed_after, int):
            after_seq = resumed_after  # handed back by the relay: its charge was paid
        else:
            await info.context.charge(SUBSCRIBE_COST)
            after_seq = None if _another_timeline(info, epoch) else after_seq
        settings = info.context.settings
        follower = operation if settings.live_relay else None
        with info.context.house.metrics.subscriptions.track_inprogress():
            async for event in streams.task_progress(
                info.context.house,
                info.context.user_id,
                task_id,
                after_seq,
                interval=settings.catch_up_seconds,
                gap_fill=settings.gap_fill,
                follower=follower,
                resumed=isinstance(resumed_after, int),
                pay=info.context.replaying,
            ):
                yield TaskEvent.of(event)

    @strawberry.subscription(
        description=(
            "Events of every task in the session (tasks created, status changes, steps), "
            "from the moment it subscribes. With the epoch of the events a client holds, "
            "from another timeline (a restored database), it starts with a SNAPSHOT of "
            "each of the session's tasks."
        )
    )
    async def session_activity(
        self, info: Info, session_id: strawberry.ID, epoch: str | None = None
    ) -> AsyncGenerator[TaskEvent, None]:
        operation = info.context.live
        resumed = None if operation is None else operation.after
        if not isinstance(resumed, Place):
            resumed = None
            await info.context.charge(SUBSCRIBE_COST)
        settings = info.context.settings
        with info.context.house.metrics.subscriptions.track_inprogress():
            async for event in streams.session_activity(
                info.context.house,
                info.context.user_id,
                session_id,
                resync=resumed is None and _another_timeline(info, epoch),
                interval=settings.catch_up_seconds,
                gap_fill=settings.gap_fill,
                follower=operation if settings.live_relay else None,
                resumed=resumed,
            ):
                yield TaskEvent.of(event)

    @strawberry.subscription(
        description=(
            "The session's conversation: a SNAPSHOT of its items (or, with afterSeq, an"
            " itemSeq you hold, what changed after it), then each change as it commits:"
            " ITEMS_ADDED, or after a pop or a clear the conversation again as a SNAPSHOT."
        )
    )
    async def session_conversation(
        self, info: Info, session_id: strawberry.ID, after_seq: int | None = None
    ) -> AsyncGenerator[SessionItemsEvent, None]:
        await info.context.charge(SUBSCRIBE_COST)
        settings = info.context.settings
        with info.context.house.metrics.subscriptions.track_inprogress():
            async for event in item_stream.conversation(
                info.context.house.broker,
                info.context.user_id,
                session_id,
                after_seq,
                interval=settings.catch_up_seconds,
            ):
                yield SessionItemsEvent.of(event)

    @strawberry.subscription(
        description=(
            "The session's ledger: a SNAPSHOT of its unfinished submissions, then each one"
            " admitted or changed, in commit order."
        )
    )
    async def session_submissions(
        self, info: Info, session_id: strawberry.ID
    ) -> AsyncGenerator[SubmissionEvent, None]:
        await info.context.charge(SUBSCRIBE_COST)
        settings = info.context.settings
        with info.context.house.metrics.subscriptions.track_inprogress():
            async for event in ledger_stream.ledger(
                info.context.house.broker,
                info.context.user_id,
                session_id,
                interval=settings.catch_up_seconds,
            ):
                yield SubmissionEvent.of(event.kind, event.submissions)
