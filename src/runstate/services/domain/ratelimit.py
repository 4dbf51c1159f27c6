"""Per-user rate limiting by cost points, shared across server processes through Redis.

Each user has a token bucket of ``burst`` points refilled at ``per_second``. A
read costs ``READ_COST`` per top-level field, a write ``WRITE_COST`` per mutation
(and a point per 16 step rows it stored past 16: ``write.door.rows_price``),
a subscription ``SUBSCRIBE_COST`` when it starts. An operation also pays for what
it could answer (``schema.bounds``): a point per ``ANSWER_BYTES_PER_POINT`` and
per ``ANSWER_OBJECTS_PER_POINT`` of its estimate. A request the bucket cannot pay
for is refused with the seconds until it could (``RateLimitedError``); it never
waits, so a user over budget holds up nobody, not even themselves.

With Redis, the bucket lives there and one Lua script reads and updates it
atomically on Redis's clock, so every process draws from the same budget. While
Redis does not answer, each process falls back to its own bucket: the limit then
holds per process rather than not at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from runstate.services.domain.errors import RateLimitedError

log = logging.getLogger(__name__)

READ_COST = 1
WRITE_COST = 2
SUBSCRIBE_COST = 5
ANSWER_BYTES_PER_POINT = 131_072
ANSWER_OBJECTS_PER_POINT = 1_000
REPLAYED_EVENTS_PER_POINT = 1
"""Stored events a subscription's replay (``afterSeq``) reads and sends for a
point: each costs about what a small read does (bench.hostile)."""
REFUSAL_COST = 1
"""What an operation the budget refused costs all the same (``refusal_cost``)."""


def refusal_cost(points: float) -> float:
    """What a refusal of an operation costing ``points`` costs: ``REFUSAL_COST``
    when it asked for more than a write, whose pay was worked out by reading the
    database (its estimate) or which holds on (a subscription): 4,040 reads
    refused for their estimates were answered in 10 s on a budget of 10 points a
    second, each parsed, validated and estimated. Nothing for a read or a write,
    which the check before the body lets in only while a point is left, and whose
    document is parsed and validated once per server: twenty writers racing for
    the last points spent them on refusals, and some waited out a minute."""
    return REFUSAL_COST if points > WRITE_COST else 0.0


SPENT = "runstate.spent"
"""Where a request's scope keeps its ``Spending``, for ``BearerAuth`` to read after."""

TAKE, PEEK, SPEND = "take", "peek", "spend"
"""How ``RateLimiter.take`` treats the points: take them if the bucket holds them;
only say whether it does; take them even into debt (a request already served)."""


@dataclass
class Spending:
    """What one request's operations took (``Context.charge``): its points, and
    whether the budget refused one of them (a refusal pays what it costs, if
    anything, ``refusal_cost``: nothing more after)."""

    points: float = 0.0
    refused: bool = False

    async def charge(self, limiter: RateLimiter, user_id: str, points: float) -> None:
        """Pay ``points`` from the user's budget and count them; RateLimitedError
        when it cannot (the refusal counted as refused, with what it cost)."""
        try:
            await limiter.charge(user_id, points)
        except RateLimitedError:
            self.refused = True
            self.points += refusal_cost(points)
            raise
        self.points += points


class RateLimiter(ABC):
    """Takes points from a user's bucket, or says how long until it could."""

    def __init__(self, per_second: float, burst: float) -> None:
        self.per_second = per_second
        self.burst = burst

    async def charge(self, user_id: str, points: float) -> None:
        """Take ``points`` from the user's bucket. If it has too few, take
        ``refusal_cost(points)`` instead, into debt if need be, and raise
        RateLimitedError with the wait until it holds ``points`` again, so that a
        retry after the wait told pays."""
        wait = await self.take(user_id, points)
        if wait > 0:
            cost = refusal_cost(points)
            if cost:
                await self.take(user_id, cost, SPEND)
                wait = await self.take(user_id, points, PEEK)
            raise RateLimitedError(wait)

    async def pace(self, user_id: str, points: float) -> None:
        """Pay ``points`` for work under way (a replay's next page), waiting while
        the user's budget is short: the work slows to what the budget pays for,
        shared by all of the user's work, and is never refused half-way. Paid in
        parts of at most ``burst``, so that each part can be paid."""
        left = points
        while left > 0:
            part = min(left, self.burst)
            wait = await self.take(user_id, part)
            if wait > 0:
                await asyncio.sleep(wait)  # the budget refills on a clock: no event to await
                continue
            left -= part

    @abstractmethod
    async def take(self, user_id: str, points: float, mode: str = TAKE) -> float:
        """Take ``points`` and answer 0, or take nothing and answer the seconds until
        the bucket holds them (``mode``: see ``TAKE``, ``PEEK``, ``SPEND``). A bucket
        in debt holds no more than ``burst`` of it."""


class MemoryRateLimiter(RateLimiter):
    """Buckets in this process. Full buckets are forgotten (a new one starts full),
    so memory follows the users active within the last ``burst / per_second`` s."""

    MAX_USERS = 100_000

    def __init__(self, per_second: float, burst: float) -> None:
        super().__init__(per_second, burst)
        self._buckets: dict[str, tuple[float, float]] = {}

    async def take(self, user_id: str, points: float, mode: str = TAKE) -> float:
        return self.take_now(user_id, points, time.monotonic(), mode)

    def take_now(self, user_id: str, points: float, now: float, mode: str = TAKE) -> float:
        """``take`` at the time ``now`` (seconds on a monotonic clock)."""
        tokens, since = self._buckets.get(user_id, (self.burst, now))
        tokens = min(self.burst, tokens + (now - since) * self.per_second)
        if mode == SPEND:
            self._buckets[user_id] = (max(-self.burst, tokens - points), now)
            return 0.0
        if tokens < points or mode == PEEK:
            self._buckets[user_id] = (tokens, now)
            return max(0.0, points - tokens) / self.per_second
        self._buckets[user_id] = (tokens - points, now)
        if len(self._buckets) > self.MAX_USERS:
            self._forget_full(now)
        return 0.0

    def _forget_full(self, now: float) -> None:
        refill = self.burst / self.per_second
        self._buckets = {
            user: (tokens, since)
            for user, (tokens, since) in self._buckets.items()
            if now - since < refill
        }


_TAKE = """
local per_second = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local points = tonumber(ARGV[3])
local mode = ARGV[4]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'since')
local tokens = tonumber(state[1]) or burst
local since = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - since) * per_second)
local wait = 0
if mode == 'spend' then
  tokens = math.max(-burst, tokens - points)
elseif tokens < points or mode == 'peek' then
  wait = math.max(0, points - tokens) / per_second
else
  tokens = tokens - points
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'since', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / per_second * 1000) + 1000)
return tostring(wait)
"""


class RedisRateLimiter(RateLimiter):
    """Buckets in Redis, one hash per user under ``prefix``, shared by every process
    of one installation; this process's own buckets while Redis is down."""

    def __init__(self, url: str, prefix: str, per_second: float, burst: float) -> None:
        super().__init__(per_second, burst)
        self.prefix = prefix
        self._client: Redis = Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
        self._script: Any = self._client.register_script(_TAKE)
        self._fallback = MemoryRateLimiter(per_second, burst)
        self._failing = False

    async def take(self, user_id: str, points: float, mode: str = TAKE) -> float:
        try:
            wait = float(
                await self._script(
                    keys=[f"{self.prefix}rate:{user_id}"],
                    args=[self.per_second, self.burst, points, mode],
                )
            )
        except (RedisError, OSError) as error:
            if not self._failing:
                log.warning("rate limits are per process while Redis is unavailable: %s", error)
                self._failing = True
            return await self._fallback.take(user_id, points, mode)
        if self._failing:
            log.info("rate limits are shared through Redis again")
            self._failing = False
        return wait

    async def close(self) -> None:
        """Close the Redis connections."""
        await self._client.aclose()


@dataclass
class Budgets:
    """The limits applied around GraphQL (``transport.auth.BearerAuth``), filled in when the app
    starts: a request whose user's budget is empty is refused before its body is
    read, and one whose operations took nothing (``{ __typename }``, a document
    that does not parse, a body that is refused) pays one point after, so that no
    request is free; every request without a live token takes one point from its
    client address's budget, so that bad tokens cannot flood the server either."""

    users: RateLimiter | None = None
    addresses: RateLimiter | None = None

    async def close(self) -> None:
        for limiter in (self.users, self.addresses):
            if isinstance(limiter, RedisRateLimiter):
                await limiter.close()
