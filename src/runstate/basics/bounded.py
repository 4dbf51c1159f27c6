"""A least-recently-used map bounded in entries and in bytes.

Caches that hold what clients sent or will receive (broker messages, rendered
events) must not grow with the size of what passes through them: each entry is
given its size in bytes when stored, and the oldest entries go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``max_items`` entries and ``max_bytes`` of their given sizes."""

    def __init__(
        self,
        max_items: int,
        max_bytes: int,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.bytes = 0
        self._on_evict = on_evict
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value for ``key``, now the most recently used, or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Store ``value``, then drop the least recently used entries over the bounds.
        A value larger than ``max_bytes`` on its own is not kept."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._entries[key] = (value, size)
        self.bytes += size
        while self._entries and (
            len(self._entries) > self.max_items or self.bytes > self.max_bytes
        ):
            gone, (dropped, dropped_size) = self._entries.popitem(last=False)
            self.bytes -= dropped_size
            if self._on_evict is not None:
                self._on_evict(gone, dropped)
