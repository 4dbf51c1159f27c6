"""Events as broker messages: the channels they go to, their encoding, their
decoding (once per message in a house, however many streams hear it), and
publishing a committed write's events."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from runstate.basics.bounded import BoundedCache
from runstate.pubsub import Publisher
from runstate.services.domain.views import EventView, from_json, to_json

log = logging.getLogger(__name__)

DECODED_BYTES = 16 * 1024 * 1024


def task_channel(task_pk: int) -> str:
    """The broker channel of one task's events."""
    return f"task:{task_pk}"


def session_channel(session_pk: int) -> str:
    """The broker channel of the events of every task in one session."""
    return f"session:{session_pk}"


def conversation_channel(session_pk: int) -> str:
    """The broker channel that wakes the streams of one session's conversation: its
    messages carry nothing, each stream reads what changed from the database."""
    return f"items:{session_pk}"


def ledger_channel(session_pk: int) -> str:
    """The broker channel that wakes the streams of one session's ledger
    (``sessionSubmissions``): like a conversation's, its messages carry nothing."""
    return f"ledger:{session_pk}"


WAKE = b"wake"
"""The message of a conversation channel."""


def encode(event: EventView) -> bytes:
    """An event as a broker message."""
    return json.dumps(to_json(event), separators=(",", ":")).encode()


def publish(publisher: Publisher, events: Iterable[EventView], wakes: Iterable[str] = ()) -> None:
    """Queue committed events for their tasks' and their sessions' channels, and a
    wake-up for each channel of ``wakes``."""
    for event in events:
        data = encode(event)
        publisher.publish(task_channel(event.task_pk), data)
        publisher.publish(session_channel(event.session_pk), data)
    for channel in wakes:
        publisher.publish(channel, WAKE)


class Decoded:
    """Broker messages decoded once: every subscriber of a channel is handed the
    same message, and gets the same (immutable) event back."""

    def __init__(self) -> None:
        self.count = 0
        """Messages actually decoded (not found in the cache)."""
        self._cache: BoundedCache[bytes, EventView] = BoundedCache(1024, DECODED_BYTES)

    def __call__(self, data: bytes) -> EventView | None:
        """A broker message as an event; None (and a log line) for anything else."""
        event = self._cache.get(data)
        if event is None:
            self.count += 1
            try:
                event = from_json(EventView, json.loads(data))
            except (ValueError, KeyError, TypeError) as error:
                log.warning("ignored a malformed broker message: %s", error)
                return None
            self._cache.put(data, event, 2 * len(data))
        return event
