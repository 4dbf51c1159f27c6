"""Who is calling: a bearer token from an HTTP header or a WebSocket init payload.

Looking a token up was a database query on every request (7% of a write's time).
``Tokens`` keeps the live tokens it has looked up for ``ttl`` seconds, so a
request usually costs none. A token revoked in the database stops working within
``ttl`` everywhere (the same bound as open WebSockets, ``RUNSTATE_AUTH_CHECK_SECONDS``);
with Redis, ``runstate token revoke`` also announces the revocation on
``REVOKED_CHANNEL`` and every server drops the token at once (``forget``).
"""

from __future__ import annotations

import time
from collections import OrderedDict

from redis.asyncio import Redis

from runstate.pubsub import Broker
from runstate.pubsub.redis import key_prefix
from runstate.services.actions.tokens import Principal, digest, user_for_token
from runstate.transport.connections import Connections

REVOKED_CHANNEL = "tokens:revoked"
"""Broker channel of revoked token digests."""


class Tokens:
    """Live tokens looked up lately, by digest, for ``ttl`` seconds; at most ``size``
    of them (the least recently used go first). Unknown tokens are never kept."""

    def __init__(self, ttl: float, size: int = 10_000) -> None:
        self.ttl = ttl
        self.size = size
        self._live: OrderedDict[str, tuple[str, float]] = OrderedDict()

    async def principal(self, value: str | None) -> Principal | None:
        """The caller named by an ``Authorization: Bearer <token>`` value, or None."""
        if not value:
            return None
        scheme, _, token = value.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        key = digest(token)
        now = time.monotonic()
        seen = self._live.get(key)
        if seen is not None and now - seen[1] < self.ttl:
            self._live.move_to_end(key)
            return Principal(seen[0], key)
        user_id = await user_for_token(token)
        if user_id is None:
            self._live.pop(key, None)
            return None
        self._live[key] = (user_id, now)
        self._live.move_to_end(key)
        while len(self._live) > self.size:
            self._live.popitem(last=False)
        return Principal(user_id, key)

    def forget(self, token_digest: str) -> None:
        """Stop trusting a token now (it was revoked)."""
        self._live.pop(token_digest, None)


async def forget_revoked(broker: Broker, tokens: Tokens, connections: Connections) -> None:
    """Until cancelled: drop each token announced on ``REVOKED_CHANNEL`` from
    ``tokens`` and close its connections."""
    async with broker.subscription([REVOKED_CHANNEL]) as revoked:
        while True:
            message = await revoked.next(3600)
            if isinstance(message, bytes):
                tokens.forget(message.decode())
                await connections.close_token(message.decode())


async def announce_revoked(redis_url: str, installation: str, token_digest: str) -> None:
    """Tell every server sharing this Redis that a token was revoked."""
    client = Redis.from_url(redis_url)
    try:
        await client.publish(key_prefix(installation) + REVOKED_CHANNEL, token_digest.encode())
    finally:
        await client.aclose()
