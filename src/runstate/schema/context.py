"""What every resolver gets: the caller, the settings and the batch loaders."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import strawberry
from strawberry.dataloader import DataLoader

from runstate.auth import Principal
from runstate.enums import TaskStatus
from runstate.ratelimit import RateLimiter
from runstate.services import history, queries
from runstate.services.history import TaskRef
from runstate.services.views import EventView, Page, SessionView, TaskView
from runstate.settings import Settings

EventsKey = tuple[TaskRef | TaskView, int, int]
"""A task, ``afterSeq`` and ``first``."""
TasksKey = tuple[str, int, TaskStatus | None, int, str | None]
"""The caller, a session's row id, and the ``status``, ``first`` and ``after`` asked."""


async def _tasks(keys: Sequence[TasksKey]) -> list[Page[TaskView]]:
    """``AgentSession.tasks`` of every session of a page: one query per set of
    arguments."""
    groups: dict[tuple[str, TaskStatus | None, int, str | None], list[int]] = defaultdict(list)
    for i, (user_id, _, status, first, after) in enumerate(keys):
        groups[user_id, status, first, after].append(i)
    found: list[Page[TaskView]] = [Page((), (), False) for _ in keys]
    for (user_id, status, first, after), indexes in groups.items():
        pks = [keys[i][1] for i in indexes]
        pages = await queries.session_task_pages(
            user_id, pks, status=status, first=first, after=after
        )
        for i, page in zip(indexes, pages, strict=True):
            found[i] = page
    return found


async def _events(keys: Sequence[EventsKey]) -> list[list[EventView]]:
    """``Task.events`` of every task of a page: one batch per (afterSeq, first)."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, (_, after_seq, first) in enumerate(keys):
        groups[after_seq, first].append(i)
    found: list[list[EventView]] = [[] for _ in keys]
    for (after_seq, first), indexes in groups.items():
        batch = await history.events_of([keys[i][0] for i in indexes], after_seq, first)
        for i, events in zip(indexes, batch, strict=True):
            found[i] = events
    return found


@dataclass
class Loaders:
    """Batch loaders: a field asked of every item of a page is read with one batch
    of queries for the page, not one per item (``tasks(first: 50) { session events
    { steps } }`` ran 201 SELECTs, now 5). They never cache: a WebSocket's context
    lives as long as its socket."""

    sessions: DataLoader[int, SessionView] = field(
        default_factory=lambda: DataLoader(queries.sessions_by_pk, cache=False)
    )
    events: DataLoader[EventsKey, list[EventView]] = field(
        default_factory=lambda: DataLoader(_events, cache=False)
    )
    tasks: DataLoader[TasksKey, Page[TaskView]] = field(
        default_factory=lambda: DataLoader(_tasks, cache=False)
    )


@dataclass
class Context:
    """Per-request context, built by the GraphQL view after authentication."""

    principal: Principal | None
    settings: Settings
    connection_params: dict[str, object] | None = None
    """The graphql-transport-ws ``connection_init`` payload, set by Strawberry."""
    limiter: RateLimiter | None = None
    """The per-user rate limit; None when it is switched off."""
    loaders: Loaders = field(default_factory=Loaders)

    async def charge(self, points: float) -> None:
        """Pay ``points`` from the caller's budget; RateLimitedError when it cannot."""
        if self.limiter is not None:
            await self.limiter.charge(self.user_id, points)

    @property
    def user_id(self) -> str:
        """The caller's user id; a request without a caller never reaches a resolver."""
        if self.principal is None:
            raise PermissionError("no authenticated caller")
        return self.principal.user_id


Info = strawberry.Info[Context, None]
