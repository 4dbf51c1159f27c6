"""What the relay pays per follower to frame one event, beside websockets' own framing.

Every follower of a task gets the same rendered event in a ``next`` message of its
own operation id. websockets' ``send_text`` encodes and frames the whole message
again for each (the frame's text built around the data, encoded, framed, copied);
``transport.wsprotocol.queue_text`` queues a header made here, the operation's
part made once per subscription and the event's data made once for all. Both on
websockets' sans-I/O server protocol, with a ~3 KB event (a task of 100 steps, as
``bench.fanout`` selects it) and a graphql-ws operation id (a UUID). The socket's
write, the same for both, is not part of it. Run with ``make bench``.
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable

from websockets.protocol import State
from websockets.server import ServerProtocol

from runstate.schema.fanout import NEXT_TAIL, next_frame, next_head
from runstate.transport.wsprotocol import queue_text

OPERATION = "3f1c7b9e-5d2a-4c1e-9b7a-2e4f6a8c0d13"
ROUNDS = 200_000


def microseconds(frame: Callable[[], object]) -> float:
    """Microseconds a frame costs, the best of three runs of ``ROUNDS``."""
    return min(timeit.repeat(frame, number=ROUNDS, repeat=3)) / ROUNDS * 1e6


def main() -> None:
    steps = [{"index": i, "status": "SUCCEEDED"} for i in range(100)]
    event = {"taskProgress": {"seq": 201, "kind": "STEP_SUCCEEDED", "steps": steps}}
    text = json.dumps(event, separators=(",", ":"))
    data, head, tail = text.encode(), next_head(OPERATION).encode(), NEXT_TAIL.encode()
    conn = ServerProtocol(state=State.OPEN)

    def websockets_framing() -> None:
        conn.send_text(next_frame(OPERATION, text).encode())

    def runstate_framing() -> None:
        queue_text(conn, (head, data, tail))

    def sent(frame: Callable[[], None]) -> bytes:
        frame()
        return b"".join(conn.data_to_send())

    assert sent(runstate_framing) == sent(websockets_framing)  # the same bytes on the wire
    theirs = microseconds(lambda: sent(websockets_framing))
    ours = microseconds(lambda: sent(runstate_framing))
    print(
        f"framing a {len(text):,}-byte next message per follower: websockets' send_text"
        f" {theirs:.2f} us, queue_text {ours:.2f} us: {ours / theirs:.2f}x"
    )


if __name__ == "__main__":
    main()
