"""Pub/sub: the broker interface, its in-process and Redis backends, and the publisher.

``install`` makes one broker and publisher the process's own (the app does it in
its lifespan); ``current`` returns them, or None when nothing is installed (the
CLI, unit tests), in which case nothing is published.
"""

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
    "current",
    "install",
    "uninstall",
]


@dataclass(frozen=True)
class Hub:
    """The process's broker and the publisher in front of it."""

    broker: Broker
    publisher: Publisher


_hub: Hub | None = None


def install(hub: Hub) -> None:
    """Make ``hub`` the process's own."""
    global _hub
    _hub = hub


def uninstall() -> None:
    """Forget the installed hub."""
    global _hub
    _hub = None


def current() -> Hub | None:
    """The installed hub, if any."""
    return _hub
