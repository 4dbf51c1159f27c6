"""Connections nobody has vouched for (issue 38, item 1): a request's headers and
body have deadlines, one address holds a bounded number of connections, running
out of file descriptors is refused quietly, and another user is served meanwhile
(``transport.admission``, ``transport.httpprotocol``).

Other users come from other loopback addresses (127.0.0.2, ...): Linux routes all
of 127.0.0.0/8 to the loopback interface, so each is a client address of its own.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.integration.test_limits import ws_url
from tests.support import GRAPHQL_WS, Server, create_token, wait_until

CAP = 20
QUERY = b'{"query": "{ __typename }"}'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("admission")
    with Server(
        f"sqlite://{tmp / 'admission.db'}",
        tmp / "server.log",
        RUNSTATE_HEADER_SECONDS="1",
        RUNSTATE_BODY_SECONDS="1",
        RUNSTATE_MAX_CONNECTIONS_PER_ADDRESS=str(CAP),
        RUNSTATE_RATE_LIMIT="false",  # many connections from one token, on purpose
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def token(server: Server) -> str:
    return create_token(server.database_url, "admitted")


def dial(server: Server, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection to the server from ``source``."""
    conn = socket.create_connection(
        ("127.0.0.1", server.port), timeout=10, source_address=(source, 0)
    )
    conn.settimeout(10)
    return conn


def request(token: str, body: bytes = QUERY, length: int | None = None) -> bytes:
    """A whole POST /graphql request's head (the body is sent by the caller)."""
    return (
        b"POST /graphql HTTP/1.1\r\nHost: t\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {token}\r\ncontent-length: {length or len(body)}\r\n\r\n".encode()
    )


def read_all(conn: socket.socket) -> bytes:
    """What the server sends until it closes the connection (10 s at most)."""
    chunks = []
    while True:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def answered(server: Server, token: str, source: str) -> int:
    """The status of a small query sent from ``source`` (0: refused)."""
    transport = httpx.HTTPTransport(local_address=source)
    try:
        with httpx.Client(transport=transport, timeout=10) as client:
            response = client.post(
                f"{server.url}/graphql",
                content=QUERY,
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
            )
    except httpx.TransportError:
        return 0
    return response.status_code


def closed_by_server(conn: socket.socket, within: float) -> bool:
    """Whether the server closes ``conn`` within ``within`` seconds (it sends
    nothing more; a 408 or an EOF ends the wait)."""
    conn.settimeout(within)
    try:
        return read_all(conn) is not None
    except TimeoutError:
        return False


def test_headers_that_trickle_are_cut_off(server: Server, token: str) -> None:
    """Guards the header deadline: a request whose headers come a byte every 0.2 s
    is answered 408 and closed before its head is whole, about a second after its
    first byte (uvicorn alone held such a request past 100 s). Control: a whole
    request on a connection opened at the same time is answered 200.

    Not timed: the 408 has to come before the last byte of the head, which takes
    half a minute to trickle (0.2 s a byte, at least; 30 times the deadline), and
    the order is what is asserted."""
    head = request(token)
    with dial(server) as slow, dial(server) as whole:
        whole.sendall(head + QUERY)
        assert b" 200 " in whole.recv(65536).split(b"\r\n")[0] + b" "
        slow.settimeout(0.2)
        sent = 0
        answer = b""
        while sent < len(head):
            try:
                slow.sendall(head[sent : sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            try:
                answer = slow.recv(65536)
                break
            except TimeoutError:
                continue
        assert answer.startswith(b"HTTP/1.1 408 "), (sent, answer)
        assert sent < len(head)


def test_a_connection_that_sends_nothing_is_closed(server: Server) -> None:
    """Guards the deadline of a connection's first request: a connection that says
    nothing is closed (without an answer) after the header deadline."""
    with dial(server) as idle:
        assert read_all(idle) == b""


def test_a_body_that_stalls_is_cut_off(server: Server, token: str) -> None:
    """Guards the body deadline: headers announcing 10,000 bytes and then 10 of
    them are answered 408 after the body deadline; the server does not wait for
    the rest."""
    with dial(server) as slow:
        slow.sendall(request(token, length=10_000) + b'{"query": ')
        answer = read_all(slow)
        assert answer.startswith(b"HTTP/1.1 408 "), answer


def test_one_address_holds_at_most_its_cap_and_others_are_served(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the per-address cap: 20 half-sent requests from one address are held,
    the 21st connection from it is closed at once, while another address is
    answered 200. (Without the cap, 2,000 from one address were all held, and with
    ``ulimit -n 1024`` other users' requests timed out.)

    On a server of its own whose header deadline is 600 s, so that nothing here
    races it: with the module's 1 s deadline the held requests were cut off (and
    the address free again) if the machine was slow to get to the last check, and
    the 21st connection, saying nothing, would have been closed by the deadline
    with or without the cap. Closed within 60 s, it was closed by the cap."""
    tmp = tmp_path_factory.mktemp("cap")
    url = f"sqlite://{tmp / 'cap.db'}"
    token = create_token(url, "capped")
    with (
        Server(
            url,
            tmp / "server.log",
            RUNSTATE_HEADER_SECONDS="600",
            RUNSTATE_MAX_CONNECTIONS_PER_ADDRESS=str(CAP),
            RUNSTATE_RATE_LIMIT="false",
        ) as server,
        ExitStack() as held,
    ):
        conns = [held.enter_context(dial(server, "127.0.0.5")) for _ in range(CAP)]
        for conn in conns:
            conn.sendall(b"POST /graphql HTTP/1.1\r\nHost: t\r\n")
        with dial(server, "127.0.0.5") as extra:
            assert closed_by_server(extra, 60)
        assert answered(server, token, "127.0.0.6") == 200
        assert answered(server, token, "127.0.0.5") == 0  # still at its cap


async def test_an_authenticated_websocket_no_longer_counts_against_its_address(
    server: Server, token: str
) -> None:
    """Guards ``vouch``: an address's WebSockets whose ``connection_init`` was
    accepted count against their user's cap, not the address's. With CAP of them
    open, the address still makes a request. Control: CAP WebSockets that never
    sent ``connection_init`` fill the address's cap (its request is refused)."""
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
    async with AsyncExitStack() as stack:
        for _ in range(CAP):
            ws = await stack.enter_async_context(
                connect(ws_url(server), subprotocols=GRAPHQL_WS, local_addr=("127.0.0.7", 0))
            )
            await ws.send(json.dumps(init))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
        assert answered(server, token, "127.0.0.7") == 200
    async with AsyncExitStack() as stack:
        for _ in range(CAP):
            await stack.enter_async_context(
                connect(ws_url(server), subprotocols=GRAPHQL_WS, local_addr=("127.0.0.8", 0))
            )
        assert answered(server, token, "127.0.0.8") == 0


def test_running_out_of_files_is_refused_quietly(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the open-file budget and the quiet accept failures: a server limited
    to 256 open files, sent 600 half-sent requests from 30 addresses (20 each,
    under the per-address cap), keeps serving a user whose connection was open
    before, logs no traceback and at most a few summary lines, and once the
    requests are cut off by their deadline, serves new connections. (Before:
    1,100 such requests under ``ulimit -n 1024`` wrote 212,967 tracebacks in 14 s
    and every other user's requests timed out.)"""
    tmp = tmp_path_factory.mktemp("files")
    url = f"sqlite://{tmp / 'files.db'}"
    token = create_token(url, "steady")
    srv = Server(
        url,
        tmp / "server.log",
        RUNSTATE_HEADER_SECONDS="3",
        RUNSTATE_MAX_CONNECTIONS_PER_ADDRESS=str(CAP),
        RUNSTATE_RATE_LIMIT="false",
    )
    srv.prefix = ("prlimit", "--nofile=256:256", "--")
    with srv:
        headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
        with httpx.Client(base_url=srv.url, headers=headers, timeout=10) as steady:
            assert steady.post("/graphql", content=QUERY).status_code == 200
            with ExitStack() as held:
                for n in range(30):
                    for _ in range(CAP):
                        try:
                            conn = held.enter_context(dial(srv, f"127.0.1.{n + 1}"))
                            conn.sendall(b"POST /graphql HTTP/1.1\r\nHost: t\r\n")
                        except OSError:
                            pass  # refused at once: what a full server does
                for _ in range(5):
                    assert steady.post("/graphql", content=QUERY).status_code == 200
            wait_until(
                lambda: answered(srv, token, "127.0.2.1") == 200, 30, "a new connection served"
            )
        log = srv.log()
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if "refused connections" in line]
    assert 1 <= len(lines) <= 3, lines
    assert "open-file budget" in log or "Too many open files" in log


def test_a_client_that_leaves_mid_body_leaves_one_line_in_the_log(
    server: Server, token: str
) -> None:
    """Guards the view's handling of a body cut short (issue 38, item 8: a client
    could put a traceback in the log): a request that announces 1,000 bytes, sends
    ten and closes its connection, and one cut off by the body deadline, are each
    logged as one 499 line, and the log holds no traceback."""
    before = server.log().count(" 499 ")
    with dial(server) as leaving:
        leaving.sendall(request(token, length=1000) + b'{"query": ')
    with dial(server) as stalled:
        stalled.sendall(request(token, length=1000) + b'{"query": ')
        assert read_all(stalled).startswith(b"HTTP/1.1 408 ")
    wait_until(lambda: server.log().count(" 499 ") >= before + 2, 10, "the requests' 499 lines")
    assert "Traceback" not in server.log()
