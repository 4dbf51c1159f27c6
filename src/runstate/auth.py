"""Who is calling: a bearer token from an HTTP header or a WebSocket init payload."""

from __future__ import annotations

from dataclasses import dataclass

from runstate.services.tokens import digest, user_for_token


@dataclass(frozen=True)
class Principal:
    """The authenticated caller; it sees only its own sessions and what is below them."""

    user_id: str
    token_digest: str
    """Which token it came with, so a connection can be closed when it is revoked."""


async def principal_from_header(value: str | None) -> Principal | None:
    """The caller named by an ``Authorization: Bearer <token>`` value, or None."""
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    user_id = await user_for_token(token.strip())
    return None if user_id is None else Principal(user_id, digest(token.strip()))
