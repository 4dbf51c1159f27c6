"""The byte- and count-bounded cache behind decoding and rendering events once."""

from __future__ import annotations

from runstate.basics.bounded import BoundedCache


def test_the_least_recently_used_go_first_when_bytes_run_out() -> None:
    evicted: list[str] = []
    cache: BoundedCache[str, int] = BoundedCache(10, 100, on_evict=lambda k, v: evicted.append(k))
    cache.put("a", 1, 40)
    cache.put("b", 2, 40)
    assert cache.get("a") == 1  # now "b" is the oldest
    cache.put("c", 3, 40)
    assert (evicted, cache.get("b"), cache.bytes, len(cache)) == (["b"], None, 80, 2)


def test_a_count_bound_holds_whatever_the_sizes() -> None:
    cache: BoundedCache[int, int] = BoundedCache(3, 10**9)
    for i in range(5):
        cache.put(i, i, 1)
    assert [cache.get(i) for i in range(5)] == [None, None, 2, 3, 4]


def test_a_value_bigger_than_the_whole_bound_is_not_kept() -> None:
    cache: BoundedCache[str, str] = BoundedCache(10, 100)
    cache.put("huge", "x", 101)
    assert (cache.get("huge"), cache.bytes) == (None, 0)
