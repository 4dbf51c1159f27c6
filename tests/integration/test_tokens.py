"""Tokens are looked up once per ``RUNSTATE_AUTH_CHECK_SECONDS``, not on every
request, and a revocation announced through Redis takes effect on every server at
once, open WebSockets included."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from runstate.services.actions import tokens
from runstate.transport.callers import Tokens
from tests.integration.test_api import start_session
from tests.integration.test_progress import ACTIVITY
from tests.integration.test_write_cost import Statements
from tests.support import (
    Api,
    Server,
    Subscriber,
    SubscriptionError,
    create_token,
    opened,
    require_service,
    runstate,
    wait_until,
)

REDIS_URL = "redis://127.0.0.1:6379/0"
QUERY = {"query": "{ sessions { edges { cursor } } }"}


async def test_a_token_is_looked_up_once_while_trusted(tmp_path: Path) -> None:
    """Guards the token cache (``callers.Tokens``): ten requests with one token run one
    SELECT of api_tokens (each ran its own); an unknown token is looked up every time
    (never trusted); a forgotten token is looked up again, and refused once revoked."""
    async with opened(f"sqlite://{tmp_path / 'tokens.db'}"):
        token = await tokens.create_token("tia")
        cache = Tokens(ttl=60)
        async with Statements() as statements:
            for _ in range(10):
                found = await cache.principal(f"Bearer {token}")
                assert found is not None
                assert found.user_id == "tia"
            for _ in range(3):
                assert await cache.principal("Bearer rs_unknown") is None
        lookups = [s for s in statements.seen if s.startswith("SELECT") and "api_tokens" in s]
        assert len(lookups) == 1 + 3
        assert await tokens.revoke_token(token)
        assert await cache.principal(f"Bearer {token}") is not None  # trusted for its ttl
        cache.forget(tokens.digest(token))
        assert await cache.principal(f"Bearer {token}") is None


def answers(server: Server, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{server.url}/graphql", json=QUERY, headers=headers).status_code


async def test_a_revocation_through_redis_reaches_every_server_before_the_cache_time(
    tmp_path: Path,
) -> None:
    """Guards the announcement (``runstate token revoke`` publishing on Redis,
    ``callers.forget_revoked`` on every server): with servers trusting a looked-up token
    for 300 s, a token revoked from the command line is refused by both servers and
    its open WebSocket on the second is closed (4403), long before that trust
    lapses. Control: a token revoked without Redis configured in the command line
    still works, for the cache time, on both.

    The waits (60 s each) are a fifth of the 300 s a server trusts the token:
    within them only the announcement can have ended it; the moment it arrives
    (a fraction of a second on an idle machine) is not timed."""
    require_service("Redis", "127.0.0.1", 6379)
    url = f"sqlite://{tmp_path / 'tokens.db'}"
    token, other = create_token(url, "una"), create_token(url, "una")
    env = {"RUNSTATE_REDIS_URL": REDIS_URL, "RUNSTATE_AUTH_CHECK_SECONDS": "300"}
    with (
        Server(url, tmp_path / "a.log", **env) as first,
        Server(url, tmp_path / "b.log", **env) as second,
    ):
        servers = (first, second)
        assert [answers(s, t) for s in servers for t in (token, other)] == [200] * 4

        runstate("token", "revoke", other, database_url=url, RUNSTATE_REDIS_URL="")
        assert [answers(s, other) for s in servers] == [200, 200]

        with Api(first.url, token) as api:
            session = start_session(api)["id"]
        async with Subscriber(second.url, token, ACTIVITY, {"id": session}) as watcher:
            runstate("token", "revoke", token, database_url=url, RUNSTATE_REDIS_URL=REDIS_URL)
            wait_until(
                lambda: [answers(s, token) for s in servers] == [401, 401],
                60,
                "both servers to refuse the revoked token",
            )
            with pytest.raises(SubscriptionError, match=r"4403 .*token revoked"):
                await watcher.next(wait=60)
