"""The one clock the services judge expiry by."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, in UTC, to the microsecond."""
    return datetime.now(UTC)
