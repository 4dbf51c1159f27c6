"""Pub/sub: the broker interface, its in-process and Redis backends, and the
publisher. An app starts its own in its lifespan and hands them to its services
(``services.write.house.House.hub``); nothing here is the process's."""

from __future__ import annotations

from dataclasses import dataclass

from runstate.pubsub.broker import RESYNC, Broker, Resync, Subscription
from runstate.pubsub.memory import MemoryBroker
from runstate.pubsub.publisher import Publisher

__all__ = [
    "RESYNC",
    "Broker",
    "Hub",
    "MemoryBroker",
    "Publisher",
    "Resync",
    "Subscription",
]


@dataclass(frozen=True)
class Hub:
    """An app's broker and the publisher in front of it."""

    broker: Broker
    publisher: Publisher
