"""Connections nobody has vouched for (issue 38, item 1): a request's headers and
body have deadlines, one address holds a bounded share of the connections, a
live token vouches for its connection, running out of file descriptors is
refused quietly, and another user is served meanwhile (``transport.admission``,
``transport.httpprotocol``).

Other users come from other loopback addresses (127.0.0.2, ...): Linux routes all
of 127.0.0.0/8 to the loopback interface, so each is a client address of its own.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack

import httpx
import pytest
from websockets.asyncio.client import connect

from runstate.transport.admission import RESERVE_FDS
from tests.integration.test_limits import ws_url
from tests.integration.test_logs import lines
from tests.support import GRAPHQL_WS, Server, create_token, wait_until

CAP = 20
QUERY = b'{"query": "{ __typename }"}'
HALF_SENT = b"POST /graphql HTTP/1.1\r\nHost: t\r\n"
UPGRADE = (
    b"GET /graphql HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
)
FILES = 1024
"""The open-file limit of the crowded server (``ulimit -n``'s common default)."""
ATTACKERS = [f"127.0.0.{n}" for n in range(2, 7)]
PER_ATTACKER = 300


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


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose header deadline is 600 s, so that nothing here races it: a
    connection it closes within a minute was closed by admission."""
    tmp = tmp_path_factory.mktemp("patient")
    with Server(
        f"sqlite://{tmp / 'patient.db'}",
        tmp / "server.log",
        RUNSTATE_HEADER_SECONDS="600",
        RUNSTATE_MAX_CONNECTIONS_PER_ADDRESS=str(CAP),
        RUNSTATE_RATE_LIMIT="false",
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def patient_token(patient: Server) -> str:
    return create_token(patient.database_url, "patient")


@pytest.fixture
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server limited to ``FILES`` open files, with the default cap per address,
    deadlines of 600 s (nothing is cut off by time), and a user's token."""
    tmp = tmp_path_factory.mktemp("crowded")
    url = f"sqlite://{tmp / 'crowded.db'}"
    token = create_token(url, "bystander")
    srv = Server(
        url,
        tmp / "server.log",
        RUNSTATE_HEADER_SECONDS="600",
        RUNSTATE_CONNECTION_INIT_SECONDS="600",
        RUNSTATE_RATE_LIMIT="false",
    )
    srv.prefix = ("prlimit", f"--nofile={FILES}:{FILES}", "--")
    with srv:
        yield srv, token


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


def answered(server: Server, token: str, source: str, within: float = 10) -> int:
    """The status of a small query sent from ``source`` (0: refused, or no answer
    within ``within`` seconds)."""
    transport = httpx.HTTPTransport(local_address=source)
    try:
        with httpx.Client(transport=transport, timeout=within) as client:
            response = client.post(
                f"{server.url}/graphql",
                content=QUERY,
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
            )
    except httpx.TransportError:
        return 0
    return response.status_code


def exchange(conn: socket.socket, data: bytes) -> bytes:
    """Send ``data`` and read one whole answer (its head and its content-length
    body) off a connection that stays open."""
    conn.sendall(data)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = conn.recv(65536)
        assert chunk, answer
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = conn.recv(65536)
        assert chunk, answer
        body += chunk
    return head + b"\r\n\r\n" + body


def is_open(conn: socket.socket) -> bool:
    """Whether the server still holds ``conn``: nothing waiting to be read, and
    neither an end nor a reset (it never answers a request it has not had)."""
    conn.setblocking(False)
    try:
        return conn.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        conn.settimeout(10)


def crowd(server: Server, held: ExitStack, opening: bytes) -> dict[str, list[socket.socket]]:
    """``PER_ATTACKER`` connections from each of ``ATTACKERS``, each sent
    ``opening``; those the server closed at once are left out."""
    conns: dict[str, list[socket.socket]] = {source: [] for source in ATTACKERS}
    for source in ATTACKERS:
        for _ in range(PER_ATTACKER):
            try:
                conn = held.enter_context(dial(server, source))
                conn.sendall(opening)
            except OSError:
                continue  # closed at once: what admission may do
            conns[source].append(conn)
    return conns


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
    patient: Server, patient_token: str
) -> None:
    """Guards the per-address cap: 20 half-sent requests from one address are held,
    and another address is answered 200; a 21st connection from the address closes
    the oldest of the 20, and only it, and is answered itself (it may carry a
    user's token). (Without the cap, 2,000 from one address were all held, and
    with ``ulimit -n 1024`` other users' requests timed out.)

    On the patient server: with a 1 s header deadline the held requests were cut
    off by it if the machine was slow to get to the last check. Closed within 60 s,
    the oldest was closed by the cap."""
    with ExitStack() as held:
        conns = [held.enter_context(dial(patient, "127.0.0.5")) for _ in range(CAP)]
        for conn in conns:
            conn.sendall(HALF_SENT)
        assert answered(patient, patient_token, "127.0.0.6") == 200
        extra = held.enter_context(dial(patient, "127.0.0.5"))
        assert closed_by_server(conns[0], 60)
        assert [is_open(conn) for conn in conns[1:]] == [True] * (CAP - 1)
        assert exchange(extra, request(patient_token) + QUERY).startswith(b"HTTP/1.1 200 ")


async def test_an_authenticated_websocket_no_longer_counts_against_its_address(
    server: Server, token: str
) -> None:
    """Guards ``vouch``: an address's WebSockets whose ``connection_init`` was
    accepted count against their user's cap, not the address's. With CAP of them
    open, the address makes a request and every one of them still answers a ping.
    Control: with CAP WebSockets that never sent ``connection_init`` open, the
    address's request closes the oldest of them (dropped: 1006), and only it."""
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
    async with AsyncExitStack() as stack:
        acked = []
        for _ in range(CAP):
            ws = await stack.enter_async_context(
                connect(ws_url(server), subprotocols=GRAPHQL_WS, local_addr=("127.0.0.7", 0))
            )
            await ws.send(json.dumps(init))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            acked.append(ws)
        assert answered(server, token, "127.0.0.7") == 200
        for ws in acked:
            await asyncio.wait_for(await ws.ping(), 10)
    async with AsyncExitStack() as stack:
        waiting = [
            await stack.enter_async_context(
                connect(ws_url(server), subprotocols=GRAPHQL_WS, local_addr=("127.0.0.8", 0))
            )
            for _ in range(CAP)
        ]
        assert answered(server, token, "127.0.0.8") == 200
        await asyncio.wait_for(waiting[0].wait_closed(), 10)
        assert [ws.close_code for ws in waiting] == [1006] + [None] * (CAP - 1)


def test_running_out_of_files_is_refused_quietly(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the open-file budget and its quiet log: a server limited to 256 open
    files, sent 600 half-sent requests from 30 addresses (20 each, under the
    per-address cap), keeps serving a user whose connection was open before,
    closes the busiest addresses' oldest requests to make room (its budget is 192
    connections), logs no traceback and at most a few summary lines, and once the
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
    # What the first report tells: the busiest addresses' requests closed for
    # newcomers, or (asyncio accepts a burst of connections before admission sees
    # any) accepts that failed, quietly.
    assert "closed for a newcomer (the process full" in log or "Too many open files" in log


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


def read_head(conn: socket.socket) -> bytes:
    """An answer's head, read off ``conn`` (b"": the server closed it first)."""
    head = b""
    while b"\r\n\r\n" not in head:
        try:
            chunk = conn.recv(65536)
        except OSError:
            return b""
        if not chunk:
            return b""
        head += chunk
    return head


def served_from_a_crowd(server: Server, token: str, conns: dict[str, list[socket.socket]]) -> None:
    """What both crowds are held to: the attackers together hold every place the
    process has (``FILES`` less ``RESERVE_FDS``) and no more, a fifth each; another
    user's ten requests from an address of its own are each answered 200 within
    2 s; and a user behind an attacker's address is answered too."""
    budget = FILES - RESERVE_FDS
    wait_until(
        lambda: sum(is_open(c) for held in conns.values() for c in held) == budget,
        30,
        "the attackers' connections past the budget to be closed",
    )
    assert [sum(map(is_open, conns[source])) for source in ATTACKERS] == [budget // 5] * 5
    statuses = [answered(server, token, "127.0.0.9", within=2) for _ in range(10)]
    assert statuses == [200] * 10
    assert answered(server, token, ATTACKERS[0], within=2) == 200


def test_a_handful_of_addresses_cannot_take_every_connection(
    crowded: tuple[Server, str],
) -> None:
    """Guards the fair share of connections nobody vouched for: under ``ulimit -n
    1024``, five addresses sending 300 half-sent requests each are held to a fifth
    of the process's 960 places each; another user's ten requests are all answered
    (within a 2 s timeout each), and so is a user with a token behind one of the
    five addresses (an office behind one NAT with an attacker).

    Control: under the cap per address alone (256), the five took 1,280 places of
    960; the other user's requests were refused, 10 of 10 (seen failing so, before
    the fair share)."""
    server, token = crowded
    with ExitStack() as held:
        served_from_a_crowd(server, token, crowd(server, held, HALF_SENT))


def test_a_handful_of_addresses_of_idle_websockets_cannot_take_every_connection(
    crowded: tuple[Server, str],
) -> None:
    """Guards the same fair share with WebSockets that never send their
    ``connection_init`` (they count against their address until it is accepted):
    five addresses opening 300 each are held to a fifth of the 960 places each,
    and another user's ten requests, and one behind an attacker's address, are
    answered. Control: under the cap per address alone the other user was refused."""
    server, token = crowded
    with ExitStack() as held:
        conns = crowd(server, held, UPGRADE)
        for source in ATTACKERS:
            upgraded = [c for c in conns[source] if read_head(c).startswith(b"HTTP/1.1 101 ")]
            conns[source] = upgraded
        served_from_a_crowd(server, token, conns)


def test_a_request_with_a_live_token_vouches_for_its_connection(
    patient: Server, patient_token: str
) -> None:
    """Guards HTTP's ``vouch`` (``BearerAuth``): ``CAP`` connections from one address
    whose request carried a live token stop counting against it, so ``CAP``
    half-sent requests from it afterwards close none of them (each answers a second
    request). Control: connections whose request had no token (answered 401, kept
    alive) still count: the half-sent requests that follow close every one of them,
    the oldest first."""
    with ExitStack() as held:
        vouched = [held.enter_context(dial(patient, "127.0.0.11")) for _ in range(CAP)]
        for conn in vouched:
            assert exchange(conn, request(patient_token) + QUERY).startswith(b"HTTP/1.1 200 ")
        for _ in range(CAP):
            held.enter_context(dial(patient, "127.0.0.11")).sendall(HALF_SENT)
        for conn in vouched:
            assert exchange(conn, request(patient_token) + QUERY).startswith(b"HTTP/1.1 200 ")

        anonymous = [held.enter_context(dial(patient, "127.0.0.12")) for _ in range(CAP)]
        for conn in anonymous:
            assert exchange(conn, request("wrong") + QUERY).startswith(b"HTTP/1.1 401 ")
        for n in range(CAP):
            held.enter_context(dial(patient, "127.0.0.12")).sendall(HALF_SENT)
            wait_until(lambda n=n: not is_open(anonymous[n]), 10, "the oldest to be closed")
            assert all(map(is_open, anonymous[n + 1 :]))


def test_a_connection_that_sent_nothing_is_told_below_warning(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the level of the header deadline's report: a connection closed having
    sent no byte (what a browser's speculative, pre-opened connection does) is
    counted at INFO, so that no warning interrupts ``runstate demo``'s terminal
    minutes after a page opened; one whose head began and stalled (a slowloris)
    is still a WARNING."""
    tmp = tmp_path_factory.mktemp("unused")
    with Server(
        f"sqlite://{tmp / 'unused.db'}",
        tmp / "server.log",
        RUNSTATE_HEADER_SECONDS="1",
        RUNSTATE_LOG_FORMAT="json",
    ) as srv:
        with dial(srv) as idle:
            assert read_all(idle) == b""
        wait_until(lambda: "sent nothing" in srv.log(), 10, "the unused connection's line")
        with dial(srv) as stalled:
            stalled.sendall(HALF_SENT)
            assert read_all(stalled).startswith(b"HTTP/1.1 408 ")
        wait_until(lambda: "too slow" in srv.log(), 20, "the stalled request's line")
        told = [
            (line["level"], line["message"].split(" (")[0])
            for line in lines(srv)
            if line.get("logger") == "runstate.transport.admission"
        ]
    assert told == [
        ("INFO", "closed connections: 1 sent nothing before the header deadline"),
        ("WARNING", "refused connections: 1 headers too slow"),
    ]
