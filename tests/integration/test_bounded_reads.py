"""No read may take the server: what an operation could answer is estimated from
what is stored before it runs (``schema.cost``), refused past the limits, and paid
for by its estimate (``schema.bounds``).

The hostile task is the one of the report: 15 MB in 250 step outputs of 60,000
characters, written by 17 ``checkpointTask`` calls. Budgets are set so nothing
refills during a test (1,000 points, one more every ten seconds), which makes the
number of reads a budget pays for exact.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api import new_task
from tests.support import (
    Api,
    Server,
    Subscriber,
    SubscriptionError,
    create_token,
    mutate,
    sqlite_server,
)

BURST = 1000
MAX_NODES = 4000
STEPS = 250
OUTPUT = "x" * 60_000
MIB = 1_048_576


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with sqlite_server(
        tmp_path_factory,
        "bounded",
        RUNSTATE_RATE_BURST=str(BURST),
        RUNSTATE_RATE_PER_SECOND="0.1",
        RUNSTATE_MAX_NODES=str(MAX_NODES),
    ) as srv:
        yield srv


def caller(server: Server, user: str) -> Api:
    return Api(server.url, create_token(server.database_url, user))


def fat_task(api: Api, task_id: str = "fat") -> int:
    """The 15 MB task, built in 17 checkpoints; its stored bytes."""
    version = new_task(api, steps=STEPS, id=task_id)["version"]
    stored = 0
    for start in range(0, STEPS, 15):
        patches = [
            {"index": i, "status": "SUCCESS", "output": OUTPUT}
            for i in range(start, min(start + 15, STEPS))
        ]
        task = mutate(
            api,
            "checkpointTask",
            "CheckpointTaskInput",
            "... on Task { version storedBytes }",
            taskId=task_id,
            expectedVersion=version,
            steps=patches,
        )
        version, stored = task["version"], task["storedBytes"]
    assert 15_000_000 < stored < 15_100_000
    return stored


def aliases(times: int, task_id: str = "fat", fields: str = "steps { output }") -> str:
    reads = " ".join(
        f'a{i}: task(id: "{task_id}") {{ ... on Task {{ {fields} }} }}' for i in range(times)
    )
    return "{ " + reads + " }"


def refusal(api: Api, query: str) -> dict[str, Any]:
    """The one error of a refused operation, which answered no data."""
    response = api.post({"query": query})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body.get("data") is None, str(body)[:300]
    [error] = body["errors"]
    return error  # type: ignore[no-any-return]


def peak_rss_mb(server: Server) -> float:
    """The server's peak resident memory so far, from /proc."""
    assert server.process is not None
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_fifteen_aliases_of_a_fat_task_are_refused_before_running(server: Server) -> None:
    """Guards the byte estimate (``cost.Scope.payload``): the report's read (225 MB
    answered on an estimate of 1,515 nodes) is refused, naming the limit, with an
    estimate of at least 15 times the task's stored bytes; the server's memory does
    not move for it. The control: one alias of the same read runs, and answers
    no more than the estimate says one alias may."""
    api = caller(server, "mallory")
    stored = fat_task(api)
    before = peak_rss_mb(server)
    error = refusal(api, aliases(15))
    extensions = error["extensions"]
    assert {k: extensions[k] for k in ("code", "limit", "maximum")} == {
        "code": "RESPONSE_TOO_LARGE",
        "limit": "RUNSTATE_MAX_RESPONSE_BYTES",
        "maximum": 32 * MIB,
    }
    assert 15 * stored <= extensions["estimate"] < 15 * stored + 200_000
    assert error["message"].startswith(
        f"this operation could answer about {extensions['estimate']} bytes, more than"
        f" RUNSTATE_MAX_RESPONSE_BYTES ({32 * MIB})"
    )
    assert peak_rss_mb(server) < before + 20
    one = api.post({"query": aliases(1)})
    assert one.status_code == 200
    assert STEPS * len(OUTPUT) < len(one.content) <= extensions["estimate"] / 15
    api.close()


async def test_a_subscription_is_bounded_by_what_one_message_could_carry(server: Server) -> None:
    """Guards the estimate over a WebSocket: a taskProgress whose SNAPSHOT would carry
    the fat task's outputs three times over (45 MB) is answered the same typed
    error in place of its first message, nothing of it run; the control, the
    outputs once, streams its SNAPSHOT (15 MB) as usual."""
    api = caller(server, "watcher")
    fat_task(api, "fat-watched")
    outputs = " ".join(f"s{i}: steps {{ output }}" for i in range(3))
    thrice = f'subscription {{ taskProgress(taskId: "fat-watched") {{ task {{ {outputs} }} }} }}'
    async with Subscriber(server.url, api.token, thrice) as refused:
        with pytest.raises(SubscriptionError) as error:
            await refused.next()
    [message] = error.value.args[0]
    assert message["extensions"]["code"] == "RESPONSE_TOO_LARGE"
    assert message["extensions"]["limit"] == "RUNSTATE_MAX_RESPONSE_BYTES"
    once = 'subscription { taskProgress(taskId: "fat-watched") { kind task { steps { output } } } }'
    async with Subscriber(server.url, api.token, once) as watching:
        snapshot = await watching.next()
    assert snapshot["taskProgress"]["kind"] == "SNAPSHOT"
    assert len(snapshot["taskProgress"]["task"]["steps"]) == STEPS
    api.close()


def test_lists_count_what_is_stored(server: Server) -> None:
    """Guards the object estimate from stored counts: a task with 300 tool states
    read by 14 aliases answers 14 x 301 objects, past RUNSTATE_MAX_NODES (4,000
    here), and is refused with that exact estimate; the document alone counts it
    14 x 101 (a list without ``first`` as 100), which the limit let through. The
    control: 13 aliases (3,913 objects) run and answer 300 tool states each."""
    api = caller(server, "toolbox")
    task = new_task(api, steps=1, id="tools")
    for i in range(300):
        mutate(
            api,
            "recordToolCall",
            "RecordToolCallInput",
            "__typename",
            taskId=task["id"],
            toolName=f"tool-{i}",
            outcome="SUCCESS",
        )
    error = refusal(api, aliases(14, "tools", "toolStates { toolName }"))
    assert error["extensions"] == {
        "code": "RESPONSE_TOO_LARGE",
        "limit": "RUNSTATE_MAX_NODES",
        "estimate": 14 * 301,
        "maximum": MAX_NODES,
    }
    data = api(aliases(13, "tools", "toolStates { toolName }"))
    assert [len(data[f"a{i}"]["toolStates"]) for i in range(13)] == [300] * 13
    api.close()


def test_heavy_reads_pay_by_their_estimate(server: Server) -> None:
    """Guards the charge by estimate (``bounds.BoundedAnswers``): a read of the fat
    task could answer 15 MB, a point per 128 KiB (115 with the read's own), so a
    budget of 1,000 points pays for eight of them and refuses the ninth
    (RATE_LIMITED, with the wait); at one point a read, as before, it paid for
    1,000. The same budget still pays for a small read: the limit is on bytes, not
    on requests."""
    api = caller(server, "reader")
    fat_task(api, "fat-reader")
    read = aliases(1, "fat-reader")
    for _ in range(8):
        assert api.post({"query": read}).json()["data"]["a0"]["steps"][0] == {"output": OUTPUT}
    refused = refusal(api, read)
    assert refused["extensions"]["code"] == "RATE_LIMITED"
    assert refused["extensions"]["retryAfterSeconds"] > 0
    assert api(aliases(1, "fat-reader", "version")) == {"a0": {"version": 18}}
    api.close()


HOSTILE = 6
"""Aliases in a hostile read: 90 MB of answer."""


def test_eight_hostile_reads_at_once_stay_within_the_budget_and_memory(server: Server) -> None:
    """Guards the limits under concurrency: eight reads of six aliases of the fat
    task (90 MB each) sent at once are all refused before running; then eight of
    the heaviest reads the byte limit lets through (two aliases, 30 MB each) are
    paid in order, so exactly four run (230 points each of 1,000) and four are
    refused. The server's peak memory stays under 400 MB throughout. The control,
    on a server without the limits, is ``test_without_the_limits_the_same_reads_run``."""
    with caller(server, "hostile") as api:  # closed on a failure too: its 8 sockets
        fat_task(api, "fat-hostile")
        assert hostile_reads(api, "fat-hostile", HOSTILE) == ["RESPONSE_TOO_LARGE"] * 8
        assert sorted(hostile_reads(api, "fat-hostile", 2)) == ["RATE_LIMITED"] * 4 + ["ok"] * 4
        assert peak_rss_mb(server) < 400


def hostile_reads(api: Api, task_id: str, times: int) -> list[str]:
    """Eight reads of ``times`` aliases of the task at once: "ok" or the error code
    of each."""

    def read(_: int) -> str:
        body = api.post({"query": aliases(times, task_id)}).json()
        if body.get("errors"):
            return str(body["errors"][0]["extensions"]["code"])
        assert len(body["data"][f"a{times - 1}"]["steps"]) == STEPS
        return "ok"

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(read, range(8)))


def test_without_the_limits_the_same_reads_run(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The control of the test above: with the rate limit off and the response limit
    raised, the eight hostile reads all run at once, and take the server past 400 MB."""
    with (
        sqlite_server(
            tmp_path_factory,
            "unbounded",
            RUNSTATE_RATE_LIMIT="false",
            RUNSTATE_MAX_RESPONSE_BYTES=str(1024 * MIB),
        ) as server,
        caller(server, "hostile") as api,
    ):
        fat_task(api)
        assert hostile_reads(api, "fat", HOSTILE) == ["ok"] * 8
        assert peak_rss_mb(server) > 400
