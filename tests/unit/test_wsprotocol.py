"""The light inbox of runstate's WebSocket protocol (``transport.wsprotocol``):
what uvicorn's protocol relies on of ``asyncio.Queue``."""

from __future__ import annotations

import asyncio

from runstate.transport.wsprotocol import Inbox


async def test_messages_come_out_in_order_and_a_reader_waits_for_the_next() -> None:
    """Guards ``Inbox``: messages put before a read come out first, in order; a read
    of an empty inbox waits until a message is put, and a cancelled read leaves
    the inbox usable."""
    inbox = Inbox()
    assert inbox.empty()
    inbox.put_nowait({"type": "websocket.connect"})
    inbox.put_nowait({"type": "websocket.receive", "text": "1"})
    assert not inbox.empty()
    assert await inbox.get() == {"type": "websocket.connect"}
    assert await inbox.get() == {"type": "websocket.receive", "text": "1"}
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_nowait({"type": "websocket.receive", "text": "2"})
    assert await asyncio.wait_for(waiting, 5) == {"type": "websocket.receive", "text": "2"}
    cancelled = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
    assert await asyncio.wait_for(inbox.get(), 5) == {"type": "websocket.disconnect", "code": 1000}
    assert inbox.empty()
