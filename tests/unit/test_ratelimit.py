"""The in-process token bucket, on a clock the test controls."""

from __future__ import annotations

import pytest

from runstate.services.domain.errors import RateLimitedError
from runstate.services.domain.ratelimit import PEEK, SPEND, MemoryRateLimiter


def test_a_bucket_pays_up_to_its_burst_then_says_how_long_to_wait() -> None:
    bucket = MemoryRateLimiter(per_second=5, burst=10)
    assert [bucket.take_now("u", 1, now=100.0) for _ in range(10)] == [0.0] * 10
    assert bucket.take_now("u", 1, now=100.0) == pytest.approx(0.2)
    assert bucket.take_now("u", 2, now=100.2) == pytest.approx(0.2)  # one back, two asked
    assert bucket.take_now("u", 2, now=100.4) == 0.0
    assert bucket.take_now("other", 10, now=100.4) == 0.0  # a budget of its own


def test_a_refused_request_takes_nothing() -> None:
    bucket = MemoryRateLimiter(per_second=1, burst=3)
    assert bucket.take_now("u", 3, now=0.0) == 0.0
    assert bucket.take_now("u", 1, now=0.5) == pytest.approx(0.5)
    assert bucket.take_now("u", 1, now=1.0) == 0.0


def test_full_buckets_are_forgotten_past_the_user_bound() -> None:
    """Memory follows active users: once more than MAX_USERS are known, those whose
    buckets have refilled are dropped (they would start full anyway)."""
    bucket = MemoryRateLimiter(per_second=1, burst=2)
    bucket.MAX_USERS = 3
    for user in ("a", "b", "c"):
        bucket.take_now(user, 1, now=0.0)
    bucket.take_now("d", 1, now=10.0)
    assert set(bucket._buckets) == {"d"}


@pytest.mark.parametrize(
    ("wait", "retry_after", "said"),
    [
        (0.00004, 0.001, "0.001"),
        (0.2000001, 0.201, "0.201"),
        (0.25, 0.25, "0.25"),
        (12.0, 12.0, "12"),
    ],
)
def test_the_wait_told_is_never_zero_and_never_short(
    wait: float, retry_after: float, said: str
) -> None:
    """Guards ``RateLimitedError``'s rounding: up to the millisecond, at least one, and
    the message says the same figure (it once said "try again in 0.0 s")."""
    error = RateLimitedError(wait)
    assert error.retry_after == retry_after
    assert error.message == f"rate limited: try again in {said} s"


def test_a_request_retried_after_the_wait_told_passes() -> None:
    """What the figure promises: a bucket a sliver of a point short, tried again after
    ``retry_after``, pays."""
    bucket = MemoryRateLimiter(per_second=10, burst=2)
    assert bucket.take_now("u", 2, now=0.0) == 0.0
    wait = bucket.take_now("u", 2, now=0.1999999)
    told = RateLimitedError(wait).retry_after
    assert told > 0
    assert bucket.take_now("u", 2, now=0.1999999 + told) == 0.0


def test_peek_takes_nothing_and_spend_goes_into_debt() -> None:
    """Guards the modes ``BearerAuth`` uses: PEEK says whether a point is there and
    leaves it; SPEND takes points a served request owes even from an empty bucket
    (at most a burst of debt), and the next request waits for the debt too."""
    bucket = MemoryRateLimiter(per_second=1, burst=2)
    assert bucket.take_now("u", 1, now=0.0, mode=PEEK) == 0.0
    assert bucket.take_now("u", 2, now=0.0) == 0.0, "the peek left both points"
    assert bucket.take_now("u", 1, now=0.0, mode=PEEK) == pytest.approx(1.0)
    for _ in range(5):
        assert bucket.take_now("u", 1, now=0.0, mode=SPEND) == 0.0
    assert bucket.take_now("u", 1, now=0.0, mode=PEEK) == pytest.approx(3.0), "debt of 2"
