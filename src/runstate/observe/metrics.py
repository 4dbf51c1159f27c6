"""What one app is doing, for Prometheus: served at ``/metrics`` (with
``RUNSTATE_METRICS_TOKEN``, never a user's token) in the text format of
``prometheus-client``.

Each app counts its own, in a registry of its own (two apps in one process share
no figure); Prometheus adds server processes up. Labels are bounded: the
``field`` of an operation is a top-level field of the schema (or ``-`` for a
document that did not parse), never a client's name.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCIES = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """One app's instruments, in their own registry (``registry``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.operations = Counter(
            "runstate_operations",
            "GraphQL operations by top-level field and outcome (ok, or error: a refused or"
            " failed request; a Problem answer is ok)",
            ["type", "field", "outcome"],
            registry=registry,
        )
        self.write_seconds = Histogram(
            "runstate_write_seconds",
            "Time a mutation took, from parsing to its answer",
            ["field"],
            buckets=(*_LATENCIES, 10),
            registry=registry,
        )
        self.websockets = Gauge(
            "runstate_websockets", "Open WebSocket connections", registry=registry
        )
        self.subscriptions = Gauge(
            "runstate_subscriptions", "Live subscriptions", registry=registry
        )
        self.delivery_seconds = Histogram(
            "runstate_delivery_seconds",
            "From a write to its event reaching a subscription through the broker (broker lag)",
            buckets=_LATENCIES,
            registry=registry,
        )
        self.handed_back = Counter(
            "runstate_relay_handed_back",
            "Subscriptions the live relay stopped delivering to, by reason: handed back to"
            " their own stream (gap, resync, expiry, unshared, slow) or ended (closed)",
            ["reason"],
            registry=registry,
        )
        self.gap_filled = Counter(
            "runstate_gap_filled_events",
            "Events a subscription read from the database because the broker missed them",
            registry=registry,
        )
        self.swept = Counter(
            "runstate_swept",
            "What the expiry sweep did: sessions expired and deleted, idempotency keys deleted",
            ["what"],
            registry=registry,
        )
