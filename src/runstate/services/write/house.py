"""One app's services: what they share with each other and with nothing else.

``create_app(settings)`` builds a house and hands it to the resolvers through the
request context; a test that calls the services builds its own
(``tests.support.opened``). Two houses in one process share nothing of runstate's:
neither limits, nor the group commit's queue, nor the head checks of live
streams, nor the broker, nor the metrics. The database connections are the
app's own too (``storage.database.Database``, beside the house); two apps on one
database are as two server processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from runstate.observe.metrics import Metrics
from runstate.pubsub import Broker, Hub
from runstate.services.domain.validation import ContentLimits
from runstate.services.domain.views import EventView
from runstate.services.live.catch_up import Heads
from runstate.services.live.messages import Decoded, publish
from runstate.services.live.relay import Relay
from runstate.services.write.group_commit import Group


@dataclass(eq=False)
class House:
    """The limits and currency, the group commit, the live streams' head checks, decoded
    messages and relay, and (once started) the broker with its publisher."""

    limits: ContentLimits = field(default_factory=ContentLimits)
    currency: str = "USD"
    """The currency spend is counted in (``Settings.currency``), which refusals name."""
    group: Group = field(default_factory=Group)
    heads: Heads = field(default_factory=Heads)
    decoded: Decoded = field(default_factory=Decoded)
    metrics: Metrics = field(default_factory=Metrics)
    """The app's instruments, in a registry of its own."""
    hub: Hub | None = None
    """The broker and its publisher, from the app's start to its stop; None (the
    CLI, tests of the write path alone): nothing is published and no stream runs."""
    relay: Relay = field(init=False)
    """Live events relayed to the caught-up taskProgress streams of each task."""

    def __post_init__(self) -> None:
        self.relay = Relay(self)

    def publish(self, events: Iterable[EventView], wakes: Iterable[str] = ()) -> None:
        """Queue committed events for their channels, and a wake-up for each of
        ``wakes`` (nothing without a broker)."""
        if self.hub is not None:
            publish(self.hub.publisher, events, wakes)

    @property
    def broker(self) -> Broker:
        """The broker live streams subscribe to; RuntimeError before the app starts."""
        if self.hub is None:
            raise RuntimeError("no broker: live progress needs the server's broker")
        return self.hub.broker
