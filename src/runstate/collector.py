"""The garbage collector's policy for a server process.

A server holding thousands of subscriptions holds hundreds of thousands of
objects that live as long as their sockets (about 370 for each subscriber: its
connection's ASGI stack, its operation's coroutines and generators). CPython's
collector, left at its defaults, moves the objects of every request in flight to
the oldest generation (a request allocates far more than the 700 objects that
start a young collection) and then, each time that generation has grown by a
quarter, scans all of it at once: with 2,500 subscribers a server stopped for
0.4 to 0.75 s every few seconds (``bench.fanout``'s many-task round, p99 421 ms
against raw Redis's 2.9 ms). Two changes:

- what the process built before serving (schema, models, app: about 100,000
  objects) is frozen, left out of every collection: it is never garbage;
- a young collection waits for ``YOUNG`` objects, so that a request's objects die
  young, and each older generation is examined only after ``OLDER`` collections
  of the one below it (CPython: 10), so that subscribers' objects are not scanned
  again and again while they live.
  Garbage in cycles is still collected, later.
"""

from __future__ import annotations

import gc

YOUNG = 10_000
"""Allocations (less deallocations) that start a collection of the youngest
generation (CPython's default: 700)."""
OLDER = 50
"""Collections of a generation that start one of the next (CPython's: 10)."""


def tune() -> None:
    """Freeze what exists now and set the thresholds (see the module's docstring).
    Called once a server process has built its app, before it serves."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, OLDER, OLDER)
