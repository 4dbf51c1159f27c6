"""Several server processes, one database, one Redis: every watcher on every process
sees every event in order, even when Redis goes away in the middle."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_api import new_task, step
from tests.integration.test_metrics import METRICS_TOKEN, samples, value
from tests.integration.test_progress import PROGRESS, completed, drive, seqs
from tests.support import (
    Api,
    RedisServer,
    Server,
    Subscriber,
    create_token,
    database,
    query_value,
    require_service,
    wait_until,
)

SHARED_REDIS = "redis://127.0.0.1:6379/0"


def pair(url: str, tmp_path: Path, **env: str) -> tuple[Server, Server]:
    first = Server(url, tmp_path / "a.log", **env).start()
    second = Server(url, tmp_path / "b.log", **env).start()
    return first, second


@pytest.fixture(params=["sqlite", "postgres"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path) as url:
        yield url


async def test_a_watcher_on_one_process_sees_every_write_made_on_another(
    backend_url: str, tmp_path: Path
) -> None:
    """Catch-up polling is set to two minutes, so these events can only come by Redis."""
    require_service("Redis", "127.0.0.1", 6379)
    token = create_token(backend_url, "alice")
    writer, watcher = pair(
        backend_url, tmp_path, RUNSTATE_REDIS_URL=SHARED_REDIS, RUNSTATE_CATCH_UP_SECONDS="120"
    )
    try:
        api = Api(writer.url, token)
        task = new_task(api, steps=10)
        async with Subscriber(watcher.url, token, PROGRESS, {"id": task["id"]}) as watch:
            assert (await watch.next())["taskProgress"]["kind"] == "SNAPSHOT"
            await asyncio.to_thread(drive, api, task["id"], 10)
            events = await watch.until(completed, within=60)
        assert seqs(events) == list(range(1, 22))
        api.close()
    finally:
        writer.stop()
        watcher.stop()


async def test_control_without_redis_the_other_process_hears_nothing_live(
    tmp_path: Path,
) -> None:
    """Control: with in-process brokers, the same watcher gets nothing but its snapshot."""
    url = f"sqlite://{tmp_path / 'alone.db'}"
    token = create_token(url, "alice")
    writer, watcher = pair(url, tmp_path, RUNSTATE_CATCH_UP_SECONDS="120")
    try:
        api = Api(writer.url, token)
        task = new_task(api, steps=2)
        async with Subscriber(watcher.url, token, PROGRESS, {"id": task["id"]}) as watch:
            assert (await watch.next())["taskProgress"]["kind"] == "SNAPSHOT"
            await asyncio.to_thread(drive, api, task["id"], 2)
            with pytest.raises(TimeoutError):
                await watch.next(3)
        api.close()
    finally:
        writer.stop()
        watcher.stop()


# ---------------------------------------------------------------- Redis goes away

WATCHERS_PER_SERVER = 10
TOGGLES = 497  # 1 create + 1 start + 497 status changes + 1 completion = 500 events
DOWN_AT, UP_AT = 200, 260


class Outage:
    """Drives a task through 500 events on one server, stopping Redis for part of it."""

    def __init__(self, api: Api, redis: RedisServer, task_id: str, channel: str) -> None:
        self.api = api
        self.redis = redis
        self.task_id = task_id
        self.channel = channel
        self.written_while_down: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as error:  # reported by the test, not lost in a thread
            self.error = error

    def _run(self) -> None:
        version = 2
        for i in range(TOGGLES):
            if i == DOWN_AT:
                self.redis.stop()
            if i == UP_AT:
                self.redis.start()
                wait_until(
                    lambda: self.redis.subscribers(self.channel) == 2,
                    30,
                    "both servers to resubscribe",
                )
            status = "WAITING_TOOL" if i % 2 == 0 else "RUNNING"
            result = step(
                self.api,
                "setTaskStatus",
                "SetTaskStatusInput",
                taskId=self.task_id,
                expectedVersion=version,
                status=status,
            )
            assert result["__typename"] == "Task", result
            version = result["version"]
            if DOWN_AT <= i < UP_AT:
                self.written_while_down.append(version)
        done = step(
            self.api,
            "completeStep",
            "CompleteStepInput",
            taskId=self.task_id,
            stepIndex=0,
            expectedVersion=version,
        )
        assert done["status"] == "COMPLETED", done


async def run_outage(
    tmp_path: Path, gap_fill: bool
) -> tuple[list[list[int]], list[int], list[float]]:
    """Every watcher's seq list (the writer's server's watchers first), the seqs
    committed while Redis was down, and the events each server's /metrics counts
    as gap-filled (the writer's server first)."""
    redis = RedisServer(tmp_path / "redis.log").start()
    url = f"sqlite://{tmp_path / 'shared.db'}"
    token = create_token(url, "alice")
    servers = pair(
        url,
        tmp_path,
        RUNSTATE_REDIS_URL=redis.url,
        RUNSTATE_CATCH_UP_SECONDS="1",
        RUNSTATE_GAP_FILL="true" if gap_fill else "false",
        RUNSTATE_METRICS_TOKEN=METRICS_TOKEN,
    )
    try:
        api = Api(servers[0].url, token)
        task = new_task(api, steps=1)
        step(api, "startStep", "StepRefInput", taskId=task["id"], stepIndex=0, expectedVersion=1)
        installation = query_value(url, "SELECT id FROM installation")
        pk = query_value(url, f"SELECT id FROM tasks WHERE public_id = '{task['id']}'")
        channel = f"runstate:{installation}:task:{pk}"
        watchers = [
            Subscriber(server.url, api.token, PROGRESS, {"id": task["id"]})
            for server in servers
            for _ in range(WATCHERS_PER_SERVER)
        ]
        for watcher in watchers:
            await watcher.__aenter__()
            assert (await watcher.next())["taskProgress"]["seq"] == 2
        outage = Outage(api, redis, task["id"], channel)
        driver = threading.Thread(target=outage.run)
        driver.start()
        try:
            results = await asyncio.gather(*(w.until(completed, within=120) for w in watchers))
        finally:
            await asyncio.to_thread(driver.join)
            for watcher in watchers:
                await watcher.__aexit__()
        if outage.error is not None:
            raise outage.error
        filled = [value(samples(server), "runstate_gap_filled_events_total") for server in servers]
        api.close()
        return [seqs(r) for r in results], outage.written_while_down, filled
    finally:
        for server in servers:
            server.stop()
        redis.stop()


async def test_redis_outage_mid_stream_leaves_no_watcher_with_a_gap(tmp_path: Path) -> None:
    """Every watcher on either server sees every event. The writer's server
    delivers its own events through the outage (local first), so only the other
    server's watchers need the gap filled: /metrics counts what was filled in
    there, at least what Redis never carried, per watcher; on the writer's
    server, a tenth of that at most (a watcher handed back as Redis returns reads
    what came while it resumed). Without local delivery the writer's server
    filled as much as the other."""
    streams, written_while_down, filled = await run_outage(tmp_path, gap_fill=True)
    assert len(written_while_down) == UP_AT - DOWN_AT
    assert len(streams) == 2 * WATCHERS_PER_SERVER
    for stream in streams:
        assert stream == list(range(2, 501))
    assert filled[0] <= len(written_while_down)
    assert filled[1] >= WATCHERS_PER_SERVER * len(written_while_down)


async def test_control_without_gap_filling_the_outage_leaves_a_gap(tmp_path: Path) -> None:
    """Control: the same run relaying broker messages only loses, on the other
    server, what Redis never carried; the writer's server's watchers lose nothing."""
    streams, written_while_down, filled = await run_outage(tmp_path, gap_fill=False)
    writers_own, others = streams[:WATCHERS_PER_SERVER], streams[WATCHERS_PER_SERVER:]
    for stream in writers_own:
        assert stream == list(range(2, 501))
    for stream in others:
        assert stream[-1] == 500
        missing = set(range(2, 501)) - set(stream)
        assert set(written_while_down) <= missing
    assert filled == [0, 0]
