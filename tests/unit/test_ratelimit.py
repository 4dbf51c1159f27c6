"""The in-process token bucket, on a clock the test controls."""

from __future__ import annotations

import pytest

from runstate.ratelimit import MemoryRateLimiter


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
