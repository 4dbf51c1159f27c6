"""One head check per interval for every quiet live stream of a house.

A taskProgress or sessionActivity stream that hears nothing must still learn of
what the broker lost. Each used to read the database itself every few seconds:
2,000 idle streams took half a core with no writes at all. Here, every
``interval`` seconds, one statement per 500 watched tasks reads their heads
(latest seq, and their session's status and expiry), and one or two per 500
watched sessions find those with tasks changed lately; only the streams that are
behind (by an event already stored one check earlier), or whose session has
expired or gone, are flagged for a resync and read anything themselves. So the
broker losing an event is noticed within two intervals.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runstate.models import Session, Task
from runstate.pubsub.broker import Subscription
from runstate.services.domain.conditions import session_expired
from runstate.storage.clock import utcnow
from runstate.storage.sql import chunks

log = logging.getLogger(__name__)

MARGIN = timedelta(seconds=10)
"""How far back a session's catch-up looks past its last one: clocks of several
server processes may disagree by this much."""


@dataclass(eq=False)
class Watch:
    """One live stream: the inbox to flag, and how far it has got."""

    inbox: Subscription
    task_pk: int | None = None
    """The task of a taskProgress stream."""
    session_pk: int | None = None
    """The session of a sessionActivity stream."""
    last: int = 0
    """taskProgress: the last seq it sent."""
    lasts: dict[int, int] = field(default_factory=dict)
    """sessionActivity: the last seq it sent of each task of the session."""
    since: datetime = field(default_factory=utcnow)
    """sessionActivity: when it last caught up (its catch-up reads the tasks
    changed since, less ``MARGIN``)."""
    checked: datetime | None = None
    """sessionActivity: when the head checks began the last round that read its
    session (None before the first): the next one reads the tasks changed since,
    less ``MARGIN``; ``since`` until then."""
    expires_at: datetime | None = None
    """When its session expires, as last read: no event after it is delivered, and
    the stream checks again then (``streams``), so it ends on time."""

    @property
    def checked_from(self) -> datetime:
        """sessionActivity: the next head check reads the tasks changed since this
        (less ``MARGIN``): it has heard, or caught up with, what was stored before."""
        return self.since if self.checked is None else self.checked

    def behind(self, task_pk: int, seq: int) -> bool:
        """Whether it has not yet sent the task's event ``seq``."""
        if self.task_pk is not None:
            return self.last < seq
        return self.lasts.get(task_pk, 0) < seq


class Heads:
    """The watched tasks and sessions of one house, checked together."""

    def __init__(self) -> None:
        self.interval = 3.0
        self.rounds = 0
        """Checks run so far."""
        self._tasks: defaultdict[int, set[Watch]] = defaultdict(set)
        self._sessions: defaultdict[int, set[Watch]] = defaultdict(set)
        self._runner: asyncio.Task[None] | None = None
        self._previous: dict[int, int] = {}
        """Each watched task's latest seq at the previous check."""
        self._changed: dict[int, dict[int, int]] = {}
        """By watched session, the latest seq of each of its tasks changed lately,
        at the previous check."""

    @contextmanager
    def watching(self, watch: Watch, interval: float) -> Iterator[None]:
        """Check ``watch`` every ``interval`` seconds while the block runs."""
        registry, key = self._entry(watch)
        self.interval = interval
        registry[key].add(watch)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="runstate-heads")
        try:
            yield
        finally:
            held = registry.get(key)
            if held is not None:
                held.discard(watch)
                if not held:
                    del registry[key]

    def _entry(self, watch: Watch) -> tuple[defaultdict[int, set[Watch]], int]:
        if watch.task_pk is not None:
            return self._tasks, watch.task_pk
        if watch.session_pk is not None:
            return self._sessions, watch.session_pk
        raise ValueError("a watch names a task or a session")

    async def _run(self) -> None:
        """Check every interval while anything is watched. The runner ends at the
        first interval with nothing watched, not at once: a stream that leaves the
        checks for a moment (to follow the relay, ``relay``) and the relay that
        takes its place do not restart the interval."""
        while True:
            await asyncio.sleep(self.interval)
            if not self._tasks and not self._sessions:
                self._runner = None
                return
            try:
                await self.check()
            except Exception:  # the next round tries again; the streams keep going
                log.exception("head check of live streams failed")

    async def check(self) -> None:
        """Flag for a resync every stream whose session ended, and every stream still
        short of an event stored by the previous check: one whole interval has
        passed without it. An event committed since is on its way through the
        broker (or queued in the stream's inbox while the process is busy);
        flagging for it would send every watcher of a busy task or session to the
        database at each check, just when the process has the least time to spare."""
        self.rounds += 1
        now = utcnow()
        previous, self._previous = self._previous, {}
        for chunk in chunks(list(self._tasks)):
            rows = await Task.filter(id__in=chunk).values_list(
                "id", "event_seq", "session__status", "session__expires_at"
            )
            heads = {int(r[0]): (int(r[1]), session_expired(r[2], r[3], now)) for r in rows}
            for pk in chunk:
                seq, gone = heads.get(pk, (0, True))
                self._previous[pk] = seq
                for watch in tuple(self._tasks.get(pk, ())):
                    if gone or watch.behind(pk, previous.get(pk, 0)):
                        watch.inbox.request_resync()
        changed, self._changed = self._changed, {}
        for chunk in chunks(list(self._sessions)):
            await self._check_sessions(chunk, now, changed)

    async def _check_sessions(
        self, chunk: list[int], now: datetime, changed: dict[int, dict[int, int]]
    ) -> None:
        """The sessions' part of ``check``: their state, and the heads of their tasks
        changed since each watch's last round (``Watch.checked``)."""
        watches = [w for pk in chunk for w in self._sessions.get(pk, ())]
        if not watches:
            return
        states = await Session.filter(id__in=chunk).values_list("id", "status", "expires_at")
        live = {int(r[0]) for r in states if not session_expired(r[1], r[2], now)}
        since = min(w.checked_from for w in watches) - MARGIN
        rows = await Task.filter(session_id__in=chunk, updated_at__gte=since).values_list(
            "session_id", "id", "event_seq"
        )
        for session_pk, task_pk, seq in rows:
            self._changed.setdefault(int(session_pk), {})[int(task_pk)] = int(seq)
        for pk in chunk:
            stored = changed.get(pk, {})
            for watch in tuple(self._sessions.get(pk, ())):
                watch.checked = now
                if pk not in live or any(watch.behind(t, seq) for t, seq in stored.items()):
                    watch.inbox.request_resync()
