"""What a graphql-transport-ws client may send, checked once as each message
arrives (``TransportWS.handle_message``), and what a close frame may say.

Strawberry reads a message's fields without checking their types: a message that
is JSON but not an object (``[]``, ``null``, ``5``), an ``id`` that is a list or
``variables`` that are a list each ended in a TypeError and its traceback in the
log, or in "Unexpected error.". The shape is checked here as graphql-ws's own
server checks it (``validateMessage``): anything else closes the socket 4400,
the protocol's code for a malformed message, saying what is wrong. Every close
reason is cut to what a close frame holds (``close_reason``): a longer one (an
unknown ``type`` of 200 characters, echoed) made uvicorn raise, and log, instead
of closing.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.websockets import WebSocketState
from strawberry.asgi import ASGIWebSocketAdapter

MALFORMED = 4400
"""graphql-transport-ws's close code for a message it does not allow."""

MAX_REASON_BYTES = 123
"""The longest close reason, in bytes of UTF-8: a control frame carries at most 125
bytes, two of them the code (RFC 6455, 5.5)."""

NOT_AN_OBJECT = "Invalid message: not a JSON object"

_BARE = frozenset({"connection_init", "ping", "pong"})
"""The message types whose only field besides ``type`` is an optional ``payload``."""


def problem(message: object) -> str | None:
    """What is wrong with a client's message, or None when graphql-transport-ws
    allows it: an object with a string ``type``; a ``payload`` of
    ``connection_init``, ``ping`` and ``pong`` an object or null; a ``subscribe``
    and a ``complete`` with a non-empty string ``id``; a ``subscribe``'s payload an
    object with a string ``query``, ``variables`` and ``extensions`` objects or
    null, and ``operationName`` a string or null. Any other ``type`` is unknown
    (``next``, ``error`` and ``connection_ack`` are the server's to send)."""
    if not isinstance(message, Mapping):
        return NOT_AN_OBJECT
    kind = message.get("type")
    if not isinstance(kind, str):
        return "Invalid message: 'type' must be a string"
    if kind in _BARE:
        return _optional(message, "payload", Mapping, "an object")
    if kind == "complete":
        return _id(message)
    if kind == "subscribe":
        return _id(message) or _subscription(message.get("payload"))
    return f"Unknown message type: {kind}"


def _id(message: Mapping[str, object]) -> str | None:
    operation = message.get("id")
    if not isinstance(operation, str) or not operation:
        return "Invalid message: 'id' must be a non-empty string"
    return None


def _subscription(payload: object) -> str | None:
    if not isinstance(payload, Mapping):
        return "Invalid message: 'payload' must be an object"
    if not isinstance(payload.get("query"), str):
        return "Invalid message: 'payload.query' must be a string"
    return (
        _optional(payload, "variables", Mapping, "an object", "payload.")
        or _optional(payload, "operationName", str, "a string", "payload.")
        or _optional(payload, "extensions", Mapping, "an object", "payload.")
    )


def _optional(
    fields: Mapping[str, object], name: str, kind: type, what: str, within: str = ""
) -> str | None:
    """What is wrong with ``fields[name]`` (named ``within`` its message), which is
    to be of ``kind`` or null, if anything."""
    value = fields.get(name)
    if value is None or isinstance(value, kind):
        return None
    return f"Invalid message: '{within}{name}' must be {what} or null"


def close_reason(reason: str) -> str:
    """``reason`` as a close frame can carry it: at most ``MAX_REASON_BYTES`` of
    UTF-8, cut on a character boundary (what cannot be encoded, as ``?``)."""
    encoded = reason.encode("utf-8", "replace")
    if len(encoded) <= MAX_REASON_BYTES:
        return encoded.decode()
    return encoded[:MAX_REASON_BYTES].decode("utf-8", "ignore")


class Socket(ASGIWebSocketAdapter):
    """Strawberry's ASGI socket, whose every close says a reason a close frame can
    carry, and a close after the first is nothing: two messages a close answers,
    read before it went, would each close it (Starlette raises on the second)."""

    async def close(self, code: int, reason: str) -> None:
        if self.ws.application_state is WebSocketState.DISCONNECTED:
            return
        await super().close(code, close_reason(reason))
