"""The per-user WebSocket cap counted across server processes, in Redis.

``RUNSTATE_MAX_CONNECTIONS`` was counted per process: two servers let a user hold
twice as many. With Redis each open connection is a member of its user's sorted
set, scored by when its claim lapses; a process refreshes its members' claims
while they stay open (every third of the lease, whatever the token-check period),
so the claims of a process that died lapse by themselves (after the lease,
``RUNSTATE_SOCKET_LEASE_SECONDS``).

A process that stalls (stopped, swapped out, a debugger) for longer than the
lease finds its claims lapsed, and maybe dropped by another process's claim,
whose places other connections may have taken since. A refresh re-claims: each
of the process's members still in the set is extended, and each no longer there
is added again while the user is under the cap, oldest first; those that find
the cap full are answered back, and their connections are closed (4029, as one
refused), so the user never holds more than the cap for longer than a refresh.
(The refresh used to extend only the members still there: after a stall of 35 s
one user held 100 sockets against a cap of 50.) The same re-claims the
connections opened while Redis did not answer.
Claims are scored by Redis's own clock (``TIME``), never a process's: a process
whose clock ran fast would drop other processes' live claims. Claiming is one
Lua script (drop lapsed claims, count, add when under the cap), atomic on Redis.
While Redis does not answer, each process counts its own connections only: the
cap then holds per process, not at all being worse.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

REFRESHES = 3
"""How many times a lease a process refreshes its claims: a claim survives two
missed rounds. (They were refreshed with the token check, so with
``RUNSTATE_AUTH_CHECK_SECONDS`` at 60 every claim lapsed while its socket was
open: one user held 100 sockets against a cap of 50.)"""

_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
"""

_CLAIM = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000))
return 1
"""
)

_REFRESH = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lapses = now + tonumber(ARGV[2])
local over = {}
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i])
      or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], lapses, ARGV[i])
  else
    over[#over + 1] = ARGV[i]
  end
end
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000))
return over
"""
)


class SharedSockets:
    """Claims of open WebSockets, per user, shared by every process of one
    installation through Redis; each lasts ``lease_seconds`` unless refreshed."""

    def __init__(self, url: str, prefix: str, per_user: int, lease_seconds: float) -> None:
        self.prefix = prefix
        self.per_user = per_user
        self.lease_seconds = lease_seconds
        self.process = uuid.uuid4().hex
        self._client: Redis = Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        self._claim = self._client.register_script(_CLAIM)
        self._refresh = self._client.register_script(_REFRESH)
        self._failing = False

    def _key(self, user_id: str) -> str:
        return f"{self.prefix}sockets:{user_id}"

    def member(self, connection_id: int) -> str:
        """The name of one of this process's connections in its user's set."""
        return f"{self.process}:{connection_id}"

    async def claim(self, user_id: str, member: str) -> bool:
        """Count a connection for its user across processes: False at the cap. True
        while Redis does not answer (the process's own count still applies)."""
        try:
            granted = await self._claim(
                keys=[self._key(user_id)],
                args=[self.per_user, self.lease_seconds, member],
            )
        except (RedisError, OSError) as error:
            self._unreachable(error)
            return True
        self._failing = False
        return bool(granted)

    async def release(self, user_id: str, member: str) -> None:
        """Stop counting a connection that ended."""
        try:
            await self._client.zrem(self._key(user_id), member)
        except (RedisError, OSError) as error:
            self._unreachable(error)  # its claim lapses by itself

    async def refresh(self, members: Iterable[tuple[str, str]]) -> list[str]:
        """Extend the claims of this process's open connections (user, member; each
        user's oldest first), claiming again those that lapsed; the members that
        found their user at the cap (none while Redis does not answer)."""
        by_user: defaultdict[str, list[str]] = defaultdict(list)
        for user_id, member in members:
            by_user[user_id].append(member)
        if not by_user:
            return []
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for user_id, held in by_user.items():
                    await self._refresh(
                        keys=[self._key(user_id)],
                        args=[self.per_user, self.lease_seconds, *held],
                        client=pipe,
                    )
                answers = await pipe.execute()
        except (RedisError, OSError) as error:
            self._unreachable(error)
            return []
        self._failing = False
        return [member.decode() for over in answers for member in over]

    def _unreachable(self, error: Exception) -> None:
        if not self._failing:
            log.warning("the connection cap is per process while Redis is unavailable: %s", error)
            self._failing = True

    async def close(self) -> None:
        """Close the Redis connections."""
        await self._client.aclose()
