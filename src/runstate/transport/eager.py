"""A coroutine run at once, in the caller, as far as it goes without waiting.

The relay (``services.live.relay``) writes one frame to each of many sockets
per event; a task per write would cost more than the write. A socket's send
waits only when the socket cannot take more (uvicorn pauses writing past its
buffer's high-water mark): ``started`` runs the send in the caller and, only if
it does wait, hands the rest of it to a task, which the caller gets back. This
is what Python 3.12's eager tasks do; runstate runs on 3.11 too.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any


def started(coroutine: Coroutine[Any, Any, object]) -> bool | asyncio.Task[object]:
    """Run ``coroutine`` until it finishes (True), fails (False: the exception is
    the answer, as a send to a closed socket fails) or waits: then a task that
    finishes it, started from where it waits."""
    try:
        waiting = coroutine.send(None)
    except StopIteration:
        return True
    except Exception:
        return False
    return asyncio.get_running_loop().create_task(_finish(coroutine, waiting))


async def _finish(coroutine: Coroutine[Any, Any, object], waiting: Any) -> object:
    """Go on with a coroutine stepped by hand until it yielded ``waiting``: the
    future it waits for (None: it only gave the loop a turn), as a task would have
    been handed it. The coroutine takes the future's outcome itself when resumed."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                await _done(waiting)
        except asyncio.CancelledError:
            coroutine.close()
            raise
        try:
            waiting = coroutine.send(None)
        except StopIteration as finished:
            return finished.value


@types.coroutine
def _done(future: asyncio.Future[Any]) -> Generator[Any, None, None]:
    """Wait until ``future`` is done, whatever its outcome, without taking it."""
    while not future.done():
        future._asyncio_future_blocking = True
        yield future
