"""``/metrics``: Prometheus's text format, behind a token of its own, counting what
the server did (one server on SQLite of its own, so every count starts at zero)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_api import new_task, start_session, step
from tests.integration.test_progress import PROGRESS
from tests.support import Api, Server, Subscriber, create_token, sqlite_server, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(
        tmp_path_factory,
        "metrics",
        RUNSTATE_SWEEP_SECONDS="0.2",
        RUNSTATE_METRICS_TOKEN=METRICS_TOKEN,
    ) as srv:
        yield srv


METRICS_TOKEN = "metrics-token-of-the-tests"
"""The RUNSTATE_METRICS_TOKEN of the servers whose /metrics tests read."""


def samples(server: Server) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics, by name and labels."""
    answer = httpx.get(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def status_with(server: Server, token: str | None) -> int:
    """The status /metrics answers with ``token`` as the bearer token (or none)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{server.url}/metrics", headers=headers).status_code


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_count_operations_subscriptions_and_the_sweep(server: Server) -> None:
    """Guards runstate.observe.metrics and its sources: operations by field and outcome
    (an unknown field counts as "-"), mutation timings, open WebSockets and live
    subscriptions (back to 0 when they close), deliveries through the broker, the
    relay's subscriptions let go by reason, and the sweep's rounds; and that
    /metrics needs its own token: none, and a user's (issue 38, item 8: any user's
    token answered the whole server's figures), answer 401."""
    assert status_with(server, None) == 401
    with Api(server.url, create_token(server.database_url, "meg")) as api:
        assert status_with(server, api.token) == 401
        start_session(api)
        with pytest.raises(AssertionError):
            api("{ nope }")
        task = new_task(api)
        found = samples(server)
        ok = {"type": "mutation", "outcome": "ok"}
        assert value(found, "runstate_operations_total", field="startSession", **ok) == 2
        assert value(found, "runstate_operations_total", field="createTask", **ok) == 1
        assert value(found, "runstate_write_seconds_count", field="startSession") == 2
        error = {"type": "query", "field": "-", "outcome": "error"}
        assert value(found, "runstate_operations_total", **error) == 1
        assert value(found, "runstate_websockets") == 0

        async with Subscriber(server.url, api.token, PROGRESS, {"id": task["id"]}) as watch:
            assert (await watch.next())["taskProgress"]["kind"] == "SNAPSHOT"
            found = samples(server)
            assert value(found, "runstate_websockets") == 1
            assert value(found, "runstate_subscriptions") == 1
            step(
                api, "startStep", "StepRefInput", taskId=task["id"], stepIndex=0, expectedVersion=1
            )
            assert (await watch.next())["taskProgress"]["kind"] == "STEP_STARTED"
            assert value(samples(server), "runstate_delivery_seconds_count") == 1

        def closed() -> bool:
            found = samples(server)
            return (
                value(found, "runstate_websockets") == value(found, "runstate_subscriptions") == 0
            )

        wait_until(closed, 10, "the closed subscription to leave the gauges")
        found = samples(server)
        assert value(found, "runstate_relay_handed_back_total", reason="closed") == 1
        swept = ("runstate_swept_total", frozenset({("what", "sessions_expired")}))
        wait_until(lambda: swept in samples(server), 10, "a sweep round to be counted")


def test_metrics_are_off_without_their_token(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Guards ``RUNSTATE_METRICS_TOKEN``'s default: unset, /metrics answers 404 to a
    user's token too, saying how to turn it on."""
    with sqlite_server(tmp_path_factory, "no-metrics") as srv:
        token = create_token(srv.database_url, "curious")
        answer = httpx.get(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert (answer.status_code, answer.text) == (
            404,
            "metrics are off: set RUNSTATE_METRICS_TOKEN",
        )
