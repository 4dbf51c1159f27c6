"""API tokens: created for a user, stored as SHA-256 digests, checked per request."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from runstate.models import USER_LENGTH, ApiToken
from runstate.services.domain.errors import InvalidInputError
from runstate.storage.clock import utcnow
from runstate.storage.sql import chunks

PREFIX = "rs_"
_USER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]*")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller; it sees only its own sessions and what is below them."""

    user_id: str
    token_digest: str
    """Which token it came with, so a connection can be closed when it is revoked."""


def digest(token: str) -> str:
    """What is stored of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


async def create_token(user_id: str) -> str:
    """A new random token for ``user_id``; only its digest is kept."""
    if len(user_id) > USER_LENGTH or not _USER.fullmatch(user_id):
        raise InvalidInputError(
            "user", f"a user name is 1 to {USER_LENGTH} letters, digits or _.@+-"
        )
    token = PREFIX + secrets.token_urlsafe(32)
    await ApiToken.create(user_id=user_id, token_hash=digest(token), created_at=utcnow())
    return token


async def revoke_token(token: str) -> bool:
    """Stop accepting ``token``; false when it was not a live token."""
    return bool(
        await ApiToken.filter(token_hash=digest(token), revoked_at__isnull=True).update(
            revoked_at=utcnow()
        )
    )


async def live_digests(digests: set[str]) -> set[str]:
    """Which of these token digests belong to live (unrevoked) tokens."""
    live: set[str] = set()
    for chunk in chunks(sorted(digests)):
        live.update(
            str(found)
            for found in await ApiToken.filter(
                token_hash__in=chunk, revoked_at__isnull=True
            ).values_list("token_hash", flat=True)
        )
    return live


async def user_for_token(token: str) -> str | None:
    """The user a live token belongs to, or None."""
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    row = await ApiToken.get_or_none(token_hash=digest(token), revoked_at__isnull=True)
    return None if row is None else row.user_id
