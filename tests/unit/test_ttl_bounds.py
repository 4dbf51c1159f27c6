"""The two longest lifetimes a client may ask for, each under its own name: a lease's
(``leases.MAX_LEASE_SECONDS``, a day) and a session's inactivity timeout
(``validation.MAX_SESSION_TTL_SECONDS``, 366 days). semantics.md gives both figures
("`ttlSeconds` is 1 s to 24 h" under Leases, "from 1 s to 366 days" under Limits)."""

from __future__ import annotations

import pytest

from runstate.services.actions import leases
from runstate.services.domain import validation
from runstate.services.domain.errors import InvalidInputError

DAY = 24 * 3600


def test_a_lease_lasts_at_most_a_day() -> None:
    """Guards the lease's bound: a day is granted, a second more is InvalidInput on
    ``ttlSeconds`` naming 86400. Seen failing with ``checked`` reading
    ``validation.MAX_SESSION_TTL_SECONDS`` (the day and a second was let through)
    and with ``MAX_LEASE_SECONDS = 366 * DAY`` (the constant's figure)."""
    assert leases.MAX_LEASE_SECONDS == DAY
    leases.checked("worker-1", DAY)
    leases.checked("worker-1", 1)
    for refused in (0, DAY + 1):
        with pytest.raises(InvalidInputError) as caught:
            leases.checked("worker-1", refused)
        assert caught.value.field == "ttlSeconds"
        assert str(caught.value) == "ttlSeconds: must be between 1 and 86400"


def test_a_session_idles_at_most_366_days() -> None:
    """Guards the session's bound: 366 days is taken as given, a second more is
    InvalidInput on ``ttlSeconds`` naming 31622400. Seen failing with ``ttl_seconds``
    bounded by the lease's figure, a day (366 days was refused), and with
    ``MAX_SESSION_TTL_SECONDS = 24 * 3600`` (the constant's figure)."""
    assert validation.MAX_SESSION_TTL_SECONDS == 366 * DAY
    assert validation.ttl_seconds(366 * DAY, 3600) == 366 * DAY
    assert validation.ttl_seconds(2 * DAY, 3600) == 2 * DAY
    assert validation.ttl_seconds(None, 3600) == 3600
    for refused in (0, 366 * DAY + 1):
        with pytest.raises(InvalidInputError) as caught:
            validation.ttl_seconds(refused, 3600)
        assert caught.value.field == "ttlSeconds"
        assert str(caught.value) == "ttlSeconds: must be between 1 and 31622400"
