"""The in-process broker: the default when no Redis URL is configured."""

from __future__ import annotations

from runstate.pubsub.broker import Broker


class MemoryBroker(Broker):
    """Delivers within this process only; enough for a single server."""

    async def _send(self, channel: str, data: bytes) -> None:
        return None  # no other processes

    async def _listen(self, channel: str) -> None:
        return None

    async def _unlisten(self, channel: str) -> None:
        return None
