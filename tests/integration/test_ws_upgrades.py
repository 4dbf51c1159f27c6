"""A WebSocket upgrade pays for itself as an HTTP request does (``auth.upgrade_wait``):
before its ``connection_init``, from its client address's anonymous budget, or
from its user's when its ``Authorization`` header names a live token. Past the
budget it is answered 429, as a request without a token is, counted into the
admission's summary line, and with ``RUNSTATE_REQUEST_LOG=off`` no line per
connection reaches the log (``logs._WithoutConnectionLines``).

Before: one client opened and closed 1,211 sockets a second without a token,
never refused, each two or three lines of log.

Other clients come from other loopback addresses (127.0.0.2, ...), as in
``test_admission``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from runstate.client import Runstate
from tests.integration.test_limits import ws_url
from tests.support import GRAPHQL_WS, Server, create_token, wait_until

BURST = 5
ANONYMOUS = {
    "RUNSTATE_ANON_RATE_BURST": str(BURST),
    "RUNSTATE_ANON_RATE_PER_SECOND": "0.01",  # a point per 100 s: none regained here
    "RUNSTATE_LOG_FORMAT": "json",
    "RUNSTATE_REQUEST_LOG": "off",
}


def server_on_sqlite(tmp: Path) -> Server:
    return Server(f"sqlite://{tmp / 'upgrades.db'}", tmp / "server.log", **ANONYMOUS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with server_on_sqlite(tmp_path_factory.mktemp("upgrades")) as srv:
        yield srv


async def upgrade(server: Server, source: str, token: str | None = None) -> int:
    """The status an upgrade from ``source`` is answered (101: accepted, then closed
    without a ``connection_init``); with ``token`` in its Authorization header."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with connect(
            ws_url(server),
            subprotocols=GRAPHQL_WS,
            local_addr=(source, 0),
            additional_headers=headers,
        ):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def refusals(server: Server) -> list[str]:
    """The admission's summary lines of refused upgrades."""
    return [
        entry["message"]
        for entry in map(json.loads, server.log().splitlines())
        if "WebSocket upgrades over their rate budget" in entry["message"]
    ]


async def test_upgrades_past_the_anonymous_budget_are_refused_429(server: Server) -> None:
    """Guards ``upgrade_wait`` and ``refuse_upgrade``: an address's first BURST
    upgrades are accepted and the next is answered 429 with Retry-After and the
    RATE_LIMITED error, as an anonymous HTTP request is (the two share the
    address's budget: its next request is 429 too). Another address is accepted;
    from the refused address, an upgrade whose Authorization header names a live
    token is accepted (its user pays) and its connection_init acknowledged, one
    naming a wrong token is refused. Seen failing before the fix: the 6th upgrade
    was accepted (101), as were a thousand more."""
    token = create_token(server.database_url, "upgrader")
    assert [await upgrade(server, "127.0.0.11") for _ in range(BURST)] == [101] * BURST
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url(server), subprotocols=GRAPHQL_WS, local_addr=("127.0.0.11", 0)):
            pass
    response = refused.value.response
    assert response.status_code == 429
    assert int(response.headers["retry-after"]) >= 1
    (error,) = json.loads(response.body)["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.11")
    async with httpx.AsyncClient(transport=transport) as http:
        assert (await http.post(f"{server.url}/graphql", json={})).status_code == 429

    assert await upgrade(server, "127.0.0.12") == 101
    assert await upgrade(server, "127.0.0.11", "rs_not-a-live-token") == 429
    async with connect(
        ws_url(server),
        subprotocols=GRAPHQL_WS,
        local_addr=("127.0.0.11", 0),
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as ws:
        init = {"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await ws.recv())["type"] == "connection_ack"


async def test_the_sdk_watches_from_an_address_past_its_anonymous_budget(server: Server) -> None:
    """Guards the SDK's Authorization header on its upgrade (``client.calls``): with
    127.0.0.1's anonymous budget spent (its next upgrade answered 429), the SDK's
    ``watch`` from it still connects (its user pays) and gets the task's SNAPSHOT.
    Seen failing without the header: the watch retried its refused upgrade until
    the test's deadline."""
    token = create_token(server.database_url, "watcher")
    statuses = [await upgrade(server, "127.0.0.1") for _ in range(BURST + 1)]
    assert statuses[-1] == 429
    async with Runstate(server.url, token) as rs, asyncio.timeout(30):
        session = await rs.start_session()
        task = await rs.create_task(session.id, "watched", [{"action": "a"}])
        async with contextlib.aclosing(aiter(rs.watch(task.id, after_seq=None))) as events:
            first = await anext(events)
    assert (first.kind, first.seq) == ("SNAPSHOT", task.event_seq)


async def test_refused_upgrades_are_counted_not_logged_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Guards the refusals' summary and the per-connection lines under
    ``RUNSTATE_REQUEST_LOG=off``: BURST accepted upgrades and twenty refused ones
    from one address leave no line of their own in the log (neither websockets'
    "connection open" and "connection rejected (429 ...)" nor uvicorn's
    "WebSocket /graphql" line, which were two a connection whatever the request
    log said), only the admission's summary: the first refusal told at once, the
    other nineteen in the next report. On a server of its own, so that no other
    test's refusals are summed in. Seen failing with "connection rejected" still
    written (750 lines for 750 refusals in a churn with the request log off)."""
    with server_on_sqlite(tmp_path_factory.mktemp("refusals")) as server:
        statuses = [await upgrade(server, "127.0.0.13") for _ in range(BURST + 20)]
        assert statuses == [101] * BURST + [429] * 20
        # The report after the first waits REPORT_SECONDS (10 s) from it.
        wait_until(lambda: len(refusals(server)) == 2, 30, "the refusals' second report")
        assert [line.split(" WebSocket")[0] for line in refusals(server)] == [
            "refused connections: 1",
            "refused connections: 19",
        ]
        log = server.log()
    assert "connection open" not in log
    assert "connection rejected" not in log
    assert "WebSocket /graphql" not in log
    assert "runstate.request" not in log
    assert "Traceback" not in log
