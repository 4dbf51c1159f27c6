"""The memory of a server process: its collector tuned for serving, and memory
given back to the system after many connections have ended.

Each WebSocket's buffers and objects are freed when it closes, but the C
allocator keeps the freed pages for reuse: 2,000 idle subscriptions took a
server from 83 to 174 MB, and it stayed at 174 MB after they closed. glibc's
``malloc_trim`` returns the free pages at the top and in the middle of the heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, "malloc_trim") else None


SERVING_THRESHOLDS = (700, 100, 10)
"""The collector's thresholds while serving: generation 1 collected after 100 of
generation 0's collections, not Python's 10."""


def tune_for_serving() -> None:
    """Set the cyclic collector up for a process about to serve. What was built to
    start (modules, the schema, the app) is collected once and frozen out of every
    later collection, and generation 1 is collected a tenth as often: on a server
    relaying events, its collections (2-3.5 ms each) fell inside about one event in
    20 and made the watchers' p99 (``docs/performance.md``)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVING_THRESHOLDS)


def collect() -> None:
    """Free the cycles that ended connections left (tasks, frames, sockets): the
    collector runs on allocations, and an idle server makes few."""
    gc.collect()


def trim() -> bool:
    """Return free heap pages to the system; False where the C library cannot
    (not glibc)."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
