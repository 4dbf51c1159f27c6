"""Which media type a GraphQL-over-HTTP answer takes, from the request's ``Accept``.

The GraphQL-over-HTTP draft defines ``application/graphql-response+json``: a
server must support it, and with it a request error (a document that does not
parse or validate, variables that do not coerce) answers a 4xx status, where
``application/json`` answers 200 for the sake of older clients. runstate answers
400 for every request error under the new type, parse and validation failures
alike: the graphql-http audit (1.23.1) expects 400 for both, and a client gains
nothing from telling a 400 from a 422 when the body says what is wrong.
"""

from __future__ import annotations

GRAPHQL_RESPONSE = "application/graphql-response+json"
JSON = "application/json"
OFFERED = (GRAPHQL_RESPONSE, JSON)
"""What a GraphQL answer can be, the first preferred when a client accepts both alike."""


def negotiate(accept: str | None) -> str | None:
    """The media type to answer with, or None when ``accept`` allows neither.

    No ``Accept`` (or an empty one) means ``application/json``, as the draft says
    of clients that predate it; so do ``*/*`` and ``application/*``, unless it is
    refused by name. Quality values are honoured (``q=0`` refuses a type); among
    ranges of equal quality one that names a type wins over a wildcard, and the
    new type over the old.
    """
    if accept is None or not accept.strip():
        return JSON
    ranges = [_range(part) for part in accept.split(",")]
    refused = {kind for kind, quality in ranges if quality <= 0}
    best: tuple[float, int, int] | None = None
    chosen: str | None = None
    for kind, quality in ranges:
        if quality <= 0:
            continue
        if kind in OFFERED:
            key, offered = (quality, 1, int(kind == GRAPHQL_RESPONSE)), kind
        elif kind in _WILDCARDS and set(OFFERED) - refused:
            offered = JSON if JSON not in refused else GRAPHQL_RESPONSE
            key = (quality, 0, 0)
        else:
            continue
        if best is None or key > best:
            best, chosen = key, offered
    return chosen


_WILDCARDS = frozenset({"*/*", "application/*"})


def _range(part: str) -> tuple[str, float]:
    """One media range of an Accept header and its quality (1 unless ``q`` says;
    0 for a ``q`` that is not a number)."""
    kind, *parameters = (p.strip() for p in part.split(";"))
    quality = 1.0
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            try:
                quality = float(value)
            except ValueError:
                quality = 0.0
    return kind.lower(), quality
