"""Open WebSocket connections: how many each user holds, and closing those whose
token has been revoked.

The per-user cap counts this process's connections, and with Redis every
process's (``sockets.SharedSockets``, whose claims ``keep_claims`` refreshes;
a connection whose lapsed claim finds the cap full is closed, 4029).

A token is checked once, in ``connection_init``; after that the connection lives
on its own. ``Connections.watch`` checks the tokens of every open connection of
the process in one query every ``auth_check_seconds`` and closes (4403) those
whose token is no longer live, so a revoked token, revoked from the command line
or another process, stops streaming within that time.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from runstate.services.actions.tokens import live_digests
from runstate.transport import heap
from runstate.transport.sockets import REFRESHES, SharedSockets

log = logging.getLogger(__name__)

TRIM_AFTER = 100
"""Connections that must have ended before the process gives memory back."""

REVOKED = 4403
"""The close code of a connection whose token was revoked (as for a refused one)."""

TOO_MANY_CONNECTIONS = 4029
"""runstate's own close code for a user past ``RUNSTATE_MAX_CONNECTIONS``: refused
at its ``connection_init``, or closed when its lapsed claim finds the cap full.
Not one graphql-transport-ws defines (its 4429 means a second
``connection_init``, which graphql-ws treats as fatal): graphql-ws retries this
one with its backoff, 1.3 s and more between attempts, five times, by which time
a connection may be free."""

Close = Callable[[int, str], Awaitable[None]]


@dataclass(eq=False)
class Connection:
    """One acknowledged WebSocket: whose it is, by which token, and how to close it."""

    user_id: str
    token_digest: str
    close: Close = field(repr=False)


class TooManyConnectionsError(Exception):
    """The user already holds as many connections as are allowed."""


class Connections:
    """The open connections of this process, by user."""

    def __init__(self, per_user: int) -> None:
        self.per_user = per_user
        self.shared: SharedSockets | None = None
        """The count across processes (with Redis), set when the app starts."""
        self._by_user: dict[str, dict[Connection, None]] = defaultdict(dict)
        """Each user's connections, oldest first."""
        self.ended = 0
        """Connections that ended since memory was last given back."""
        self._ended_at_check = 0
        """``ended`` as the previous check saw it."""

    async def add(self, connection: Connection) -> None:
        """Count a new connection; TooManyConnectionsError past ``per_user``, on this
        process or, with Redis, on all of them."""
        held = self._by_user[connection.user_id]
        if len(held) >= self.per_user:
            raise TooManyConnectionsError
        held[connection] = None
        if self.shared is not None and not await self.shared.claim(
            connection.user_id, self._member(connection)
        ):
            await self.remove(connection)
            raise TooManyConnectionsError

    async def remove(self, connection: Connection) -> None:
        """Forget a connection that has ended (idempotent)."""
        held = self._by_user.get(connection.user_id)
        if held is not None and connection in held:
            del held[connection]
            self.ended += 1
            if not held:
                del self._by_user[connection.user_id]
            if self.shared is not None:
                await self.shared.release(connection.user_id, self._member(connection))

    def _member(self, connection: Connection) -> str:
        assert self.shared is not None
        return self.shared.member(id(connection))

    @property
    def too_many(self) -> str:
        """The reason a connection past the cap is given."""
        return f"Too many connections: at most {self.per_user} per user"

    def __len__(self) -> int:
        return sum(len(held) for held in self._by_user.values())

    def all(self) -> Iterable[Connection]:
        """Every open connection (a copy: closing one changes the registry)."""
        return [c for held in self._by_user.values() for c in held]

    async def close_revoked(self) -> int:
        """Close every connection whose token is no longer live; how many were."""
        connections = list(self.all())
        if not connections:
            return 0
        live = await live_digests({c.token_digest for c in connections})
        revoked = [c for c in connections if c.token_digest not in live]
        return await self._close(revoked, REVOKED, "token revoked")

    async def close_token(self, token_digest: str) -> None:
        """Close every connection opened with this token (it was revoked)."""
        revoked = [c for c in self.all() if c.token_digest == token_digest]
        await self._close(revoked, REVOKED, "token revoked")

    async def _close(self, connections: Iterable[Connection], code: int, reason: str) -> int:
        """Forget and close these connections; how many there were."""
        closed = 0
        for connection in connections:
            await self.remove(connection)
            await connection.close(code, reason)
            closed += 1
        return closed

    async def reclaim(self) -> int:
        """Refresh the shared count's claims of this process's open connections,
        claiming again those that lapsed (the process stalled past the lease), and
        close (4029) those that find their user at the cap: each user's newest
        first, as the claims are made oldest first. How many were closed."""
        assert self.shared is not None
        members = {self._member(c): c for c in self.all()}
        over = await self.shared.refresh((c.user_id, m) for m, c in members.items())
        return await self._close([members[m] for m in over], TOO_MANY_CONNECTIONS, self.too_many)

    async def keep_claims(self, every_seconds: float | None = None) -> None:
        """``reclaim`` every ``every_seconds`` (a third of the lease by default) until
        cancelled, so that claims last as long as their sockets (with ``shared``
        set: the app runs it when it counts through Redis)."""
        assert self.shared is not None
        every = every_seconds or self.shared.lease_seconds / REFRESHES
        while True:
            await asyncio.sleep(every)
            try:
                closed = await self.reclaim()
            except Exception:  # the next round tries again; the server keeps serving
                log.exception("re-claiming the places of open connections failed")
                continue
            if closed:
                log.warning("closed %d connections past their users' cap after a stall", closed)

    async def watch(self, every_seconds: float) -> None:
        """``close_revoked`` every ``every_seconds`` until cancelled; after that, give
        memory back when ``TRIM_AFTER`` connections or more have ended since last time
        and none ended since the previous check. A drop of many connections takes more
        than one interval to wind down: given back while it still ran, most of its
        memory was still held, and later ones, fewer than ``TRIM_AFTER``, never
        triggered another."""
        while True:
            await asyncio.sleep(every_seconds)
            try:
                closed = await self.close_revoked()
            except Exception:  # the next round tries again; the server keeps serving
                log.exception("token check of open connections failed")
                continue
            if closed:
                log.info("closed %d connections whose token was revoked", closed)
            settled = self.ended == self._ended_at_check
            self._ended_at_check = self.ended
            if self.ended >= TRIM_AFTER and settled:
                self.ended = self._ended_at_check = 0
                heap.collect()
                await asyncio.to_thread(heap.trim)
