"""The per-user WebSocket cap counted across server processes, in Redis.

``RUNSTATE_MAX_CONNECTIONS`` was counted per process: two servers let a user hold
twice as many. With Redis each open connection is a member of its user's sorted
set, scored by when its claim lapses; a process refreshes its members' claims
while they stay open, so the claims of a process that died lapse by themselves
(``LEASE_SECONDS``). Claiming is one Lua script (drop lapsed claims, count, add
when under the cap), atomic on Redis. While Redis does not answer, each process
counts its own connections only: the cap then holds per process, not at all
being worse.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
"""How long a claim lasts unless its process refreshes it (it does every
``RUNSTATE_AUTH_CHECK_SECONDS``, with its check of the tokens)."""

_CLAIM = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3]) * 1000))
return 1
"""


class SharedSockets:
    """Claims of open WebSockets, per user, shared by every process of one
    installation through Redis."""

    def __init__(self, url: str, prefix: str, per_user: int) -> None:
        self.prefix = prefix
        self.per_user = per_user
        self.process = uuid.uuid4().hex
        self._client: Redis = Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        self._claim = self._client.register_script(_CLAIM)
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
                args=[time.time(), self.per_user, LEASE_SECONDS, member],
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

    async def refresh(self, members: Iterable[tuple[str, str]]) -> None:
        """Extend the claims of this process's open connections (user, member)."""
        by_user: defaultdict[str, dict[str, float]] = defaultdict(dict)
        until = time.time() + LEASE_SECONDS
        for user_id, member in members:
            by_user[user_id][member] = until
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for user_id, scores in by_user.items():
                    pipe.zadd(self._key(user_id), scores, xx=True)
                    pipe.expire(self._key(user_id), int(LEASE_SECONDS) + 1)
                await pipe.execute()
        except (RedisError, OSError) as error:
            self._unreachable(error)

    def _unreachable(self, error: Exception) -> None:
        if not self._failing:
            log.warning("the connection cap is per process while Redis is unavailable: %s", error)
            self._failing = True

    async def close(self) -> None:
        """Close the Redis connections."""
        await self._client.aclose()
