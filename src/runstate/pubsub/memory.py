"""The in-process broker: the default when no Redis URL is configured."""

from __future__ import annotations

from runstate.pubsub.broker import Broker


class MemoryBroker(Broker):
    """Delivers within this process only; enough for a single server."""

    async def publish(self, channel: str, data: bytes) -> None:
        self._dispatch(channel, data)

    async def _listen(self, channel: str) -> None:
        return None

    async def _unlisten(self, channel: str) -> None:
        return None
