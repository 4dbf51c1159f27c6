"""The text frames ``WebSocketProtocol.write_text`` makes itself, read back by
websockets' own client protocol."""

from __future__ import annotations

import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from runstate.transport.wsprotocol import text_header


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536])
def test_a_frame_made_here_reads_as_the_text_sent(size: int) -> None:
    """Guards ``text_header``: a frame of each of RFC 6455's three length forms, at
    both ends of each, is one final text frame of exactly the bytes sent (in
    parts, as the relay writes them) to a client that checks every frame."""
    text = ("é" * (size // 2) + "a" * (size % 2)).encode()
    parts = (text[: size // 2], text[size // 2 :])
    client = ClientProtocol(parse_uri("ws://runstate.test/graphql"), state=State.OPEN)
    client.receive_data(text_header(size) + b"".join(parts))
    assert client.parser_exc is None
    (frame,) = client.events_received()
    assert isinstance(frame, Frame)
    assert (frame.opcode, frame.fin, frame.data) == (Opcode.TEXT, True, text)
