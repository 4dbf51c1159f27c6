"""A run followed live: the frames of a task from the run's base to its first
resting point, delivered by ``taskProgress``'s own stream (``streams.task_progress``:
the stored events after the base, then each new one as it commits, gaps filled
from the database), so there is no second delivery path to keep gap-free.

A reconnect names the last frame it holds (a ``Cursor``): the run's groups are
computed again from the log (``frames``) and only what lies after that frame is
sent, so any process continues any run, with or without Redis.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from runstate.services.domain.errors import NotFoundError, SessionExpiredError
from runstate.services.domain.views import TaskView
from runstate.services.live import streams
from runstate.services.read import history
from runstate.services.read.lookups import get_task
from runstate.transport.agui.document import document
from runstate.transport.agui.frames import (
    Cursor,
    Frame,
    Renderings,
    Run,
    error,
    framed,
    opening,
)


class ResyncRequiredError(Exception):
    """The cursor is of another timeline, past the task's log, or of no frame of
    the run: the client must open a new run (``RUN_ERROR RESYNC_REQUIRED``)."""

    message = "this cursor cannot be continued: open a new run without Last-Event-ID"


class RunEndedError(Exception):
    """The cursor is the run's last frame: there is nothing more to send (204)."""


class _Waiting:
    """The frames before a reconnect's cursor, which are not sent again."""

    def __init__(self, cursor: Cursor | None) -> None:
        self.cursor = cursor

    def rest(self, group: list[Frame]) -> list[Frame]:
        """What of ``group`` comes after the cursor (all of it once it is passed)."""
        cursor = self.cursor
        if cursor is None:
            return group
        first = group[0].cursor
        assert first is not None
        if first.seq != cursor.seq:
            if group[-1].last:
                raise ResyncRequiredError  # the run ended before the cursor's seq
            return []
        if cursor.k >= len(group):
            raise ResyncRequiredError
        if group[cursor.k].last:
            raise RunEndedError
        self.cursor = None
        return group[cursor.k + 1 :]


async def follow(
    house: streams.Watching,
    user_id: str,
    task: TaskView,
    run: Run,
    after: Cursor | None,
    *,
    interval: float,
    gap_fill: bool = True,
    pay: streams.Pay | None = None,
    renderings: Renderings,
) -> AsyncGenerator[list[Frame] | None, None]:
    """The run's frames after ``after`` (all of them without it), live to its end,
    a group at a time (the frames of one event, sent together); the stored events
    it reads are paid for with ``pay``, and each event is rendered once for every
    run of the process that shares ``renderings``.

    ``task`` is the task as the request read it. Before the first frame the
    generator yields None once: up to then it may raise ``ResyncRequiredError`` or
    ``RunEndedError`` (the cursor's seq is stored, so deciding never waits for a new
    event); after it, the answer has begun, and an end other than a resting point
    is a ``RUN_ERROR`` frame: ``SESSION_EXPIRED``, or ``NOT_FOUND`` once the task
    (or its session) is deleted.
    """
    if after is not None and (
        after.epoch != run.epoch or not 1 <= run.base <= after.seq <= task.event_seq
    ):
        raise ResyncRequiredError
    waiting = _Waiting(after)
    groups = _groups(house, user_id, task, run, waiting, interval, gap_fill, pay, renderings)
    try:
        async with contextlib.aclosing(groups):
            async for group in groups:
                yield group
                if group is not None and group[-1].last:
                    return
    except (SessionExpiredError, NotFoundError) as ended:
        if waiting.cursor is not None:
            yield None
        yield [error(ended.code, ended.message)]
        return
    if waiting.cursor is not None:
        yield None
    yield [error("NOT_FOUND", NotFoundError("task", task.id).message)]


async def _groups(
    house: streams.Watching,
    user_id: str,
    task: TaskView,
    run: Run,
    waiting: _Waiting,
    interval: float,
    gap_fill: bool,
    pay: streams.Pay | None,
    renderings: Renderings,
) -> AsyncGenerator[list[Frame] | None, None]:
    """``follow``'s groups; it returns when the task's stream ends before a resting
    point (the task was deleted)."""
    try:
        at_base = await history.task_at(task, run.base)
    except ValueError:  # no event at the base any more: the task was deleted since
        raise NotFoundError("task", task.id) from None
    chained = renderings.at(task.pk, run.base, at_base.version, at_base.updated_at)
    doc = document(at_base) if chained is None else chained
    group = waiting.rest(opening(doc, run, at_base.updated_at))
    if waiting.cursor is None:
        yield None
    if group:
        yield group
        if group[-1].last:
            return
    events = streams.task_progress(
        house, user_id, task.id, run.base, interval=interval, gap_fill=gap_fill, pay=pay
    )
    async with contextlib.aclosing(events):
        async for event in events:
            if event.task is not None:  # a SNAPSHOT: the log was replaced under the run
                if waiting.cursor is not None:
                    raise ResyncRequiredError
                yield [error("RESYNC_REQUIRED", ResyncRequiredError.message)]
                return
            rendered = renderings.of(doc, event)
            doc, frames = rendered.after, framed(rendered, run)
            ready = waiting.cursor is None
            group = waiting.rest(frames)
            if not ready and waiting.cursor is None:
                yield None
            if group:
                yield group
            if frames[-1].last:
                return


async def reopened(
    house: streams.Watching,
    user_id: str,
    task_id: str,
    run: Run,
    after: Cursor | None,
    *,
    interval: float,
    gap_fill: bool = True,
    renderings: Renderings,
) -> AsyncGenerator[list[Frame] | None, None]:
    """The run's groups after ``after`` (all of them after None), read again from the
    database for a stream that was paused (``wire``), unpaid: they were paid for
    when first sent. Unlike ``follow``, no None comes first, and a cursor that
    cannot be continued (the log was replaced meanwhile) is a ``RUN_ERROR
    RESYNC_REQUIRED``, the run's last frame simply the end."""
    try:
        task = await get_task(user_id, task_id)
    except (NotFoundError, SessionExpiredError) as ended:
        yield [error(ended.code, ended.message)]
        return
    frames = follow(
        house,
        user_id,
        task,
        run,
        after,
        interval=interval,
        gap_fill=gap_fill,
        renderings=renderings,
    )
    try:
        async with contextlib.aclosing(frames):
            async for group in frames:
                if group is not None:
                    yield group
    except ResyncRequiredError:
        yield [error("RESYNC_REQUIRED", ResyncRequiredError.message)]
    except RunEndedError:
        return
