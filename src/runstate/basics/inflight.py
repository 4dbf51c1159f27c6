"""One piece of work for several waiters: the caller that starts it registers a
future, the others wait on that future (through ``asyncio.shield``, so one waiter
leaving cancels nothing), and ``shared`` hands them the work's outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def shared(
    future: asyncio.Future[T], work: Awaitable[T], finished: Callable[[], object]
) -> T:
    """The outcome of ``work``, set on ``future`` for its waiters too (an exception
    as well, marked retrieved: each waiter raises it itself); ``finished`` runs as
    the work ends, either way, before the waiters are handed anything."""
    try:
        done = await work
    except BaseException as error:
        future.set_exception(error)
        future.exception()
        raise
    finally:
        finished()
    future.set_result(done)
    return done
