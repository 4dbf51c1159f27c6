"""The garbage collector's policy of a server process (``runstate.collector``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runstate.app import served
from runstate.settings import Settings


@pytest.fixture
def restored() -> Iterator[None]:
    """The test process's collector as it was, afterwards."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored")
def test_a_served_app_is_frozen_and_young_collections_wait() -> None:
    """Guards ``app.served`` (what ``runstate serve`` and each of its workers run):
    the app built for serving is out of every collection (frozen, so that no full
    collection scans it again), and the thresholds are runstate's, not CPython's
    (700, 10, 10), under which each request's objects reach the oldest generation
    and thousands of subscribers' objects are scanned every few seconds."""
    app = served(Settings(database_url="sqlite://:memory:"))
    assert gc.get_threshold() == (10_000, 50, 50)
    assert not any(o is app for o in gc.get_objects())
    assert gc.get_freeze_count() > 0
