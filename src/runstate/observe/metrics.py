"""What this process is doing, for Prometheus: served at ``/metrics`` (with
``RUNSTATE_METRICS_TOKEN``, never a user's token) in the text format of
``prometheus-client``.

Each server process counts its own; Prometheus adds them up across processes.
Labels are bounded: the ``field`` of an operation is a top-level field of the
schema (or ``-`` for a document that did not parse), never a client's name.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

OPERATIONS = Counter(
    "runstate_operations",
    "GraphQL operations by top-level field and outcome (ok, or error: a refused or"
    " failed request; a Problem answer is ok)",
    ["type", "field", "outcome"],
    registry=REGISTRY,
)
WRITE_SECONDS = Histogram(
    "runstate_write_seconds",
    "Time a mutation took, from parsing to its answer",
    ["field"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
WEBSOCKETS = Gauge("runstate_websockets", "Open WebSocket connections", registry=REGISTRY)
SUBSCRIPTIONS = Gauge("runstate_subscriptions", "Live subscriptions", registry=REGISTRY)
DELIVERY_SECONDS = Histogram(
    "runstate_delivery_seconds",
    "From a write to its event reaching a subscription through the broker (broker lag)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)
HANDED_BACK = Counter(
    "runstate_relay_handed_back",
    "Subscriptions the live relay stopped delivering to, by reason: handed back to"
    " their own stream (gap, resync, expiry, unshared, slow) or ended (closed)",
    ["reason"],
    registry=REGISTRY,
)
GAP_FILLED = Counter(
    "runstate_gap_filled_events",
    "Events a subscription read from the database because the broker missed them",
    registry=REGISTRY,
)
SWEPT = Counter(
    "runstate_swept",
    "What the expiry sweep did: sessions expired and deleted, idempotency keys deleted",
    ["what"],
    registry=REGISTRY,
)
