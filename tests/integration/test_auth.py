"""Auth is the default: without a live token nothing runs, on any route, by any
method, however the request is spelled; and live access ends with its right."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.integration.test_api import create_task, new_task, start_session, update_session
from tests.integration.test_progress import ACTIVITY, PROGRESS
from tests.support import (
    GRAPHQL_WS,
    Api,
    Server,
    Subscriber,
    SubscriptionError,
    create_token,
    mutate,
    runstate,
    sqlite_server,
    wait_until,
)

PATHS = ["/graphql", "/graphql/", "/GraphQL", "/nope", "/graphql%00"]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
QUERIES = [
    "",
    "?query={__typename}",
    "?%71uery={__typename}",  # "query", percent-encoded
    "?QUERY={__typename}",
    "?query=&query={__typename}",
    "?%71uery=%7B__schema%7BqueryType%7Bname%7D%7D%7D",
]
ACCEPTS = ["text/html", "application/json", "*/*"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(
        tmp_path_factory,
        "auth",
        RUNSTATE_AUTH_CHECK_SECONDS="0.2",
        RUNSTATE_CATCH_UP_SECONDS="0.2",
        # These tests send a thousand requests without a live token from one
        # address; test_ratelimit checks that address's budget itself.
        RUNSTATE_ANON_RATE_BURST="100000",
    ) as srv:
        yield srv


def authorizations(server: Server) -> list[str | None]:
    """No header, and headers that name no live token."""
    revoked = create_token(server.database_url, "revoked")
    runstate("token", "revoke", revoked, database_url=server.database_url)
    live = create_token(server.database_url, "mallory")
    return [
        None,
        "",
        "Bearer",
        "Bearer rs_wrong",
        f"Bearer {revoked}",
        f"Basic {live}",
        f"Bearer{live}",
        f"Bearer {live}x",
        f"Bearer {live} {live}",
        f"Token {live}",
    ]


def is_graphiql_page(path: str, method: str, query: str, accept: str) -> bool:
    """The one data-free page of /graphql: a plain GET of it from a browser."""
    return (path, method, query) == ("/graphql", "GET", "") and accept == "text/html"


def test_nothing_runs_without_a_live_token(server: Server) -> None:
    """Guards ``BearerAuth``: every route, method, query-string spelling (percent-encoded
    included) and malformed or revoked header answers 401 with no data, except the
    GraphiQL page itself, which carries none."""
    combinations = itertools.product(PATHS, METHODS, QUERIES, ACCEPTS, authorizations(server))
    seen = 0
    with httpx.Client(base_url=server.url) as client:
        for path, method, query, accept, authorization in combinations:
            headers = {"Accept": accept}
            if authorization is not None:
                headers["Authorization"] = authorization
            body = b'{"query": "{ __typename }"}' if method in ("POST", "PUT", "PATCH") else None
            response = client.request(method, path + query, headers=headers, content=body)
            where = f"{method} {path}{query} Accept: {accept} Authorization: {authorization}"
            if is_graphiql_page(path, method, query, accept):
                assert response.status_code == 200, where
                assert "graphiql" in response.text.lower(), where
            else:
                assert response.status_code == 401, where
                assert "__typename" not in response.text, where
                assert "queryType" not in response.text, where
            seen += 1
    assert seen == len(PATHS) * len(METHODS) * len(QUERIES) * len(ACCEPTS) * 10


def test_the_same_requests_run_with_a_live_token(server: Server) -> None:
    """Control for the sweep: with a live token, the spellings it refuses do run (so
    the sweep's 401s come from auth, not from the requests being malformed)."""
    token = create_token(server.database_url, "trent")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers) as client:
        assert client.get("/graphql?%71uery={__typename}").json() == {
            "data": {"__typename": "Query"}
        }
        assert client.post("/graphql", json={"query": "{ __typename }"}).status_code == 200


def test_public_routes_answer_without_a_token(server: Server) -> None:
    """The routes that hold no one's data: the page, health, readiness, static files."""
    assert httpx.get(f"{server.url}/").status_code == 200
    assert httpx.get(f"{server.url}/healthz").text == "ok"
    ready = httpx.get(f"{server.url}/readyz")
    assert (ready.status_code, ready.json()) == (200, {"database": "ok", "broker": "ok"})
    assert httpx.get(f"{server.url}/static/app.js").status_code == 200
    assert httpx.get(f"{server.url}/static/missing.js").status_code == 404


async def test_a_revoked_or_malformed_token_cannot_open_a_socket(server: Server) -> None:
    """The WebSocket side of the sweep: each header that HTTP refuses is closed 4403."""
    for authorization in authorizations(server):
        payload = {} if authorization is None else {"authorization": authorization}
        async with connect(
            server.url.replace("http://", "ws://") + "/graphql", subprotocols=GRAPHQL_WS
        ) as ws:
            await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
            await asyncio.wait_for(ws.wait_closed(), 10)
            assert (ws.close_code, ws.close_reason) == (
                4403,
                "Forbidden: missing or invalid bearer token",
            ), authorization


async def test_revoking_a_token_closes_its_open_sockets(server: Server) -> None:
    """Guards the token check of open connections: after ``runstate token revoke``,
    the revoked caller's socket is closed 4403 while another caller's goes on and
    gets the next event."""
    with (
        Api(server.url, create_token(server.database_url, "peggy")) as peggy,
        Api(server.url, create_token(server.database_url, "victor")) as victor,
    ):
        await _revoke_while_watching(server, peggy, victor)


async def _revoke_while_watching(server: Server, peggy: Api, victor: Api) -> None:
    mine, theirs = new_task(peggy, steps=1), new_task(victor, steps=1)
    async with (
        Subscriber(server.url, peggy.token, PROGRESS, {"id": mine["id"]}) as revoked,
        Subscriber(server.url, victor.token, PROGRESS, {"id": theirs["id"]}) as kept,
    ):
        await revoked.next()
        await kept.next()
        await asyncio.to_thread(
            runstate, "token", "revoke", peggy.token, database_url=server.database_url
        )
        with pytest.raises(SubscriptionError, match=r"4403 .*token revoked"):
            await revoked.next(wait=10)
        await asyncio.to_thread(
            victor,
            "mutation($id: ID!) { startStep(input: {taskId: $id, expectedVersion: 1,"
            " stepIndex: 0}) { __typename } }",
            id=theirs["id"],
        )
        assert (await kept.next(wait=10))["taskProgress"]["seq"] == 2


async def test_an_expired_session_ends_its_subscriptions(server: Server) -> None:
    """Guards the expiry check of live streams: when the session expires, both its
    taskProgress and its sessionActivity end with SessionExpired."""
    with Api(server.url, create_token(server.database_url, "wendy")) as wendy:
        await _expire_while_watching(server, wendy)


async def _expire_while_watching(server: Server, wendy: Api) -> None:
    session = start_session(wendy, ttlSeconds=2)
    task = create_task(wendy, session["id"], steps=1)
    async with (
        Subscriber(server.url, wendy.token, PROGRESS, {"id": task["id"]}) as progress,
        Subscriber(server.url, wendy.token, ACTIVITY, {"id": session["id"]}) as activity,
    ):
        await progress.next()
        for watcher in (progress, activity):
            with pytest.raises(SubscriptionError, match="has expired"):
                await watcher.next(wait=20)
    assert update_session(wendy, session["id"], 1)["__typename"] == "SessionExpired"


@pytest.fixture(scope="module")
def slow_checks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose streams are checked against the database every 60 s only."""
    with sqlite_server(tmp_path_factory, "expiry", RUNSTATE_CATCH_UP_SECONDS="60") as srv:
        yield srv


async def test_no_event_after_expiry_reaches_a_subscription_and_it_ends_on_time(
    slow_checks: Server,
) -> None:
    """Guards the streams' expiry deadline (``streams._heard``, ``_after_expiry``): a
    lease released after the session's expiresAt (a release works in an expired
    session) is not delivered to the session's subscriptions, which end with
    SessionExpired at the expiry itself, long before the next check of the
    database (60 s here). Before, the release reached them, and they ended with
    the next check."""
    server = slow_checks
    with Api(server.url, create_token(server.database_url, "ella")) as ella:
        session = start_session(ella, ttlSeconds=2)
        task = create_task(ella, session["id"], steps=1)
        lock = mutate(
            ella,
            "acquireTaskLock",
            "AcquireTaskLockInput",
            "... on TaskLock { fencingToken }",
            taskId=task["id"],
            holderId="late",
            ttlSeconds=60,
        )
        assert lock["fencingToken"] == 1
        async with (
            Subscriber(server.url, ella.token, PROGRESS, {"id": task["id"]}) as progress,
            Subscriber(server.url, ella.token, ACTIVITY, {"id": session["id"]}) as activity,
        ):
            assert (await progress.next())["taskProgress"]["kind"] == "SNAPSHOT"
            # Read now: a write a second after the session's start (on a slow
            # machine) moved its expiry past the one start_session answered.
            now_held = ella(
                "query($id: ID!) { session(id: $id) { ... on AgentSession { expiresAt } } }",
                id=session["id"],
            )
            expires_at = datetime.fromisoformat(now_held["session"]["expiresAt"])
            wait_until(lambda: datetime.now(UTC) > expires_at, 10, "the session's expiry")
            released = mutate(
                ella,
                "releaseTaskLock",
                "ReleaseTaskLockInput",
                "__typename",
                taskId=task["id"],
                holderId="late",
            )
            assert released["__typename"] == "Task", "a release works after expiry"
            for watcher in (progress, activity):
                with pytest.raises(SubscriptionError, match="has expired"):
                    await watcher.next(wait=10)
