"""What every resolver gets: the caller, the settings, the app's services (its
``House``) and the batch loaders."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, TypeVar

import strawberry
from strawberry.dataloader import DataLoader
from tortoise import connections

from runstate.basics.enums import TaskStatus
from runstate.schema.fanout import SharedEvents
from runstate.schema.turns import Turns
from runstate.services.actions.tokens import Principal
from runstate.services.domain import spend
from runstate.services.domain.events import TaskRef
from runstate.services.domain.ratelimit import (
    REPLAYED_EVENTS_PER_POINT,
    SPEND,
    RateLimiter,
    Spending,
)
from runstate.services.domain.views import (
    EventView,
    Page,
    SessionView,
    SpendView,
    StepView,
    TaskView,
    ToolStateView,
)
from runstate.services.live.relay import Follower, Position
from runstate.services.read import history, lookups
from runstate.services.write.house import House
from runstate.settings import Settings

A = TypeVar("A", bound=Hashable)
Item = TypeVar("Item")
V = TypeVar("V")

EventsKey = tuple[tuple[int, int], TaskRef | TaskView]
"""The ``afterSeq`` and ``first`` asked, and a task."""
TasksKey = tuple[tuple[str, TaskStatus | None, int, str | None], int]
"""The caller and the ``status``, ``first`` and ``after`` asked, and a session's row id."""


async def _per_arguments(
    keys: Sequence[tuple[A, Item]], load: Callable[[A, list[Item]], Awaitable[list[V]]]
) -> list[V]:
    """``load`` once per distinct arguments among ``keys`` (a field asked alike of
    every item of a page), with those items; the answers in the keys' order."""
    groups: dict[A, list[int]] = defaultdict(list)
    for i, (arguments, _) in enumerate(keys):
        groups[arguments].append(i)
    found: dict[int, V] = {}
    for arguments, indexes in groups.items():
        answers = await load(arguments, [keys[i][1] for i in indexes])
        found.update(zip(indexes, answers, strict=True))
    return [found[i] for i in range(len(keys))]


async def _tasks(keys: Sequence[TasksKey]) -> list[Page[TaskView]]:
    """``AgentSession.tasks`` of every session of a page: one query per set of
    arguments."""

    async def load(
        arguments: tuple[str, TaskStatus | None, int, str | None], pks: list[int]
    ) -> list[Page[TaskView]]:
        user_id, status, first, after = arguments
        return await lookups.session_task_pages(
            user_id, pks, status=status, first=first, after=after
        )

    return await _per_arguments(keys, load)


async def _events(keys: Sequence[EventsKey]) -> list[list[EventView]]:
    """``Task.events`` of every task of a page: one batch per (afterSeq, first)."""
    return await _per_arguments(keys, lambda arguments, tasks: history.events_of(tasks, *arguments))


async def _steps(keys: Sequence[tuple[int, int]]) -> list[tuple[StepView, ...]]:
    """``Task.steps`` of every task of a page, each at its seq."""
    return await history.steps_at_many(keys)


async def _session_spend(keys: Sequence[int]) -> list[SpendView]:
    found = await spend.sessions_spent(connections.get("default"), keys)
    return [found[k] for k in keys]


async def _tool_states(keys: Sequence[tuple[int, str, int]]) -> list[tuple[ToolStateView, ...]]:
    """``Task.toolStates`` of every task of a page, each at its seq."""
    return await history.tool_states_at_many(keys)


class Loaders:
    """Batch loaders: a field asked of every item of a page is read with one batch
    of queries for the page, not one per item (``tasks(first: 50) { session events
    { steps } }`` ran 201 SELECTs, now 5). They never cache: a WebSocket's context
    lives as long as its socket. Each is made when first used: a socket that only
    subscribes never uses one, and thousands of such sockets held five each."""

    @cached_property
    def sessions(self) -> DataLoader[int, SessionView]:
        return DataLoader(lookups.sessions_by_pk, cache=False)

    @cached_property
    def events(self) -> DataLoader[EventsKey, list[EventView]]:
        return DataLoader(_events, cache=False)

    @cached_property
    def tasks(self) -> DataLoader[TasksKey, Page[TaskView]]:
        return DataLoader(_tasks, cache=False)

    @cached_property
    def steps(self) -> DataLoader[tuple[int, int], tuple[StepView, ...]]:
        """A task's steps by (row id, seq)."""
        return DataLoader(_steps, cache=False)

    @cached_property
    def session_spend(self) -> DataLoader[int, SpendView]:
        """A session's spend (its row's totals of its tasks') by its row id."""
        return DataLoader(_session_spend, cache=False)

    @cached_property
    def graph_threads(self) -> DataLoader[int, bool]:
        """Whether a task (by row id) is a LangGraph thread."""
        return DataLoader(lookups.graph_threads, cache=False)

    @cached_property
    def tool_states(self) -> DataLoader[tuple[int, str, int], tuple[ToolStateView, ...]]:
        """A task's tool states by (row id, public id, seq)."""
        return DataLoader(_tool_states, cache=False)


class Subscribed(Follower, Protocol):
    """The subscription an operation runs as, lent by its transport
    (``schema.relayed.LiveOperation``): the relay's follower, and where the relay
    handed it back."""

    @property
    def after(self) -> Position | None:
        """Where the relay handed the subscription back (None: its first run, whose
        charges and bounds are paid as it begins)."""


@dataclass
class Context:
    """Per-request context, built by the GraphQL view after authentication."""

    principal: Principal | None
    settings: Settings
    house: House
    """The app's services: its limits, group commit, live streams and publisher."""
    shared: SharedEvents = field(default_factory=SharedEvents)
    """The app's rendered subscription events (``schema.fanout``)."""
    connection_params: dict[str, object] | None = None
    """The graphql-transport-ws ``connection_init`` payload, set by Strawberry."""
    limiter: RateLimiter | None = None
    """The per-user rate limit; None when it is switched off."""
    epoch: str = ""
    """The database's timeline, which every event names (``database.current_epoch``)."""
    spent: Spending = field(default_factory=Spending)
    """What the request's operations took, for ``BearerAuth`` (``ratelimit.Budgets``)."""
    loaders: Loaders = field(default_factory=Loaders)
    replays: Turns = field(default_factory=Turns)
    """The app's turns at replaying stored events (``replaying``)."""
    live: Subscribed | None = None
    """The subscription this operation runs as, on a WebSocket (each operation has
    its own copy of the connection's context, ``transport.websocket``); None for
    any other operation."""

    @property
    def resumed(self) -> bool:
        """Whether this operation runs a subscription again after the relay handed
        it back (its charges and bounds were paid when it began)."""
        return self.live is not None and self.live.after is not None

    async def charge(self, points: float) -> None:
        """Pay ``points`` from the caller's budget; RateLimitedError when it cannot
        (the refusal may cost a point itself, ``ratelimit.refusal_cost``)."""
        if self.limiter is not None:
            await self.spent.charge(self.limiter, self.user_id, points)

    async def owe(self, points: float) -> None:
        """Pay ``points`` for work done (a write's rows, ``door.rows_price``), into
        debt if the budget is short: the caller's next request waits it out."""
        if self.limiter is None:
            return
        await self.limiter.take(self.user_id, points, SPEND)
        self.spent.points += points

    async def pace(self, points: float) -> None:
        """Pay ``points`` for work under way (a replay's next page), waiting while
        the caller's budget is short (``RateLimiter.pace``)."""
        if self.limiter is None:
            return
        await self.limiter.pace(self.user_id, points)
        self.spent.points += points

    @contextlib.asynccontextmanager
    async def replaying(self, events: int) -> AsyncIterator[None]:
        """Pay for the next ``events`` a replay reads (``pace``, a point each), then
        read them in the caller's turn: a user's replays read their pages one at a
        time on a process, however many run (100 of them, each reading its pages
        at once, took the server)."""
        await self.pace(events / REPLAYED_EVENTS_PER_POINT)
        async with self.replays.turn(self.user_id):
            yield

    @property
    def user_id(self) -> str:
        """The caller's user id; a request without a caller never reaches a resolver."""
        if self.principal is None:
            raise PermissionError("no authenticated caller")
        return self.principal.user_id


Info = strawberry.Info[Context, None]
