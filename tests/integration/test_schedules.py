"""Schedules over HTTP: refusals that write nothing, and fires that happen once
per due time across two server processes and a restart (SQLite file and
PostgreSQL), with the control that shows the unique key is what holds."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api import start_session
from tests.support import Api, Server, create_token, database, mutate, wait_until

SCHEDULE = """
  __typename
  ... on Schedule { id version cron timezone policy misfire enabled nextFireAt lastFireAt }
  ... on Problem { code message }
  ... on InvalidInput { field }
"""
FIRES = """query($id: ID!) { schedule(id: $id) { ... on Schedule {
  fires(first: 100) { seq status reason scheduledFor createdAt actor taskId } } } }"""
EVERY_2S = "*/2 * * * * *"
GRACE = 5.0
ENV = {
    "RUNSTATE_MAX_SCHEDULES": "4",
    "RUNSTATE_SCHEDULE_MIN_SECONDS": "2",
    "RUNSTATE_SCHEDULE_GRACE_SECONDS": str(GRACE),
    "RUNSTATE_RATE_LIMIT": "false",
}


class Pair:
    """Two server processes on one database, which a test may stop and start again."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url, self.tmp = url, tmp
        self.servers: list[Server] = []
        self.token = ""

    def start(self) -> Api:
        self.servers = [
            Server(self.url, self.tmp / f"{name}.log", **ENV).start() for name in ("one", "two")
        ]
        if not self.token:
            self.token = create_token(self.url, "alice")
        return Api(self.servers[0].url, self.token)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp(f"schedules-{request.param}")
    with database(request.param, tmp) as url:
        both = Pair(url, tmp)
        both.start()
        yield both
        both.stop()


@pytest.fixture
def alice(pair: Pair) -> Iterator[Api]:
    api = Api(pair.servers[0].url, pair.token)
    yield api
    api.close()


def create(api: Api, session_id: str, **input: Any) -> dict[str, Any]:
    fields = {"cron": EVERY_2S, "goal": "tick", "steps": [{"action": "tick"}], **input}
    return mutate(
        api, "createSchedule", "CreateScheduleInput", SCHEDULE, sessionId=session_id, **fields
    )


def fires(api: Api, schedule_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api(FIRES, id=schedule_id)["schedule"]["fires"]
    return sorted(found, key=lambda f: f["scheduledFor"])


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def schedules_of(api: Api, session_id: str) -> list[str]:
    data = api(
        "query($s: ID!) { session(id: $s) { ... on AgentSession { schedules { id } } } }",
        s=session_id,
    )
    return [s["id"] for s in data["session"]["schedules"]]


def test_bad_schedules_are_refused_naming_the_field_and_write_nothing(alice: Api) -> None:
    """Bad input: a cron expression of four fields, one that never fires, a time
    zone nobody has, a period under RUNSTATE_SCHEDULE_MIN_SECONDS, each an
    InvalidInput naming its field; another user's session NotFound; the fifth
    schedule past RUNSTATE_MAX_SCHEDULES refused. None of them leaves a schedule."""
    session = start_session(alice)["id"]
    cases = {
        "cron": [{"cron": "* * * *"}, {"cron": "0 0 30 2 *"}, {"cron": "* * * * * *"}],
        "timezone": [{"timezone": "Nowhere/Else"}, {"timezone": "../../etc/passwd"}],
    }
    for field, inputs in cases.items():
        for given in inputs:
            refused = create(alice, session, **given)
            assert (refused["__typename"], refused["field"]) == ("InvalidInput", field), given
    assert schedules_of(alice, session) == []

    assert create(alice, "someone-elses", cron="@daily")["__typename"] == "NotFound"
    made = [create(alice, session, cron="@yearly")["id"] for _ in range(4)]
    over = create(alice, session, cron="@yearly")
    assert (over["__typename"], over["field"]) == ("InvalidInput", "sessionId")
    assert sorted(schedules_of(alice, session)) == sorted(made)
    for schedule_id in made:
        mutate(alice, "deleteSchedule", "DeleteScheduleInput", "__typename", id=schedule_id)


def consecutive(times: list[datetime]) -> bool:
    return all(b - a == timedelta(seconds=2) for a, b in pairwise(times))


def test_each_due_time_fires_once_on_two_processes_and_a_restart(pair: Pair) -> None:
    """Guards once per due time (the unique (schedule, scheduledFor) key, judged by
    the database's clock) with two processes firing: every 2 s for 12 s, each due
    time fired exactly once and none missing. Both processes then stopped for
    10 s and started again: SKIP makes none of the missed times up (every fire on
    time, within the grace), RUN_ONCE makes them up with exactly one fire."""
    api = Api(pair.servers[1].url, pair.token)
    session = start_session(api)["id"]
    skip = create(api, session, misfire="SKIP")
    once = create(api, session, misfire="RUN_ONCE")
    wait_until(lambda: len(fires(api, skip["id"])) >= 6, 30, "six fires of the schedule")
    for schedule in (skip, once):
        times = [at(f["scheduledFor"]) for f in fires(api, schedule["id"])]
        assert len(times) == len(set(times)), times
        assert consecutive(times), times
        assert all(t.second % 2 == 0 and t.microsecond == 0 for t in times), times

    pair.stop()
    time.sleep(10)  # the downtime itself, which the misfire policies are about
    api.close()
    api = pair.start()
    wait_until(lambda: len(fires(api, once["id"])) >= 12, 40, "fires after the restart")
    late = {
        schedule["id"]: [
            f
            for f in fires(api, schedule["id"])
            if (at(f["createdAt"]) - at(f["scheduledFor"])).total_seconds() > GRACE + 1
        ]
        for schedule in (skip, once)
    }
    assert late[skip["id"]] == []
    assert len(late[once["id"]]) == 1, late[once["id"]]
    assert "missed" in late[once["id"]][0]["reason"]
    for schedule in (skip, once):
        times = [at(f["scheduledFor"]) for f in fires(api, schedule["id"])]
        assert len(times) == len(set(times)), times
        mutate(api, "deleteSchedule", "DeleteScheduleInput", "__typename", id=schedule["id"])
    api.close()


def test_a_fire_that_cannot_run_is_kept_skipped_with_its_reason(alice: Api) -> None:
    """A REJECT schedule firing into a session whose active submission is
    unfinished: the fire is a SKIPPED submission of the ledger (no task) saying
    the session was busy; the ledger's seqs stay gap-free."""
    session = start_session(alice)["id"]
    mutate(
        alice, "submitInput", "SubmitInput", "__typename",
        sessionId=session, goal="long", steps=[{"action": "wait"}],
    )  # fmt: skip
    schedule = create(alice, session, policy="REJECT")
    wait_until(lambda: len(fires(alice, schedule["id"])) >= 2, 20, "two fires")
    skipped = fires(alice, schedule["id"])
    assert {f["status"] for f in skipped} == {"SKIPPED"}
    assert all(f["taskId"] is None and "busy" in f["reason"] for f in skipped), skipped
    assert {f["actor"] for f in skipped} == {f"schedule:{schedule['id']}"}
    ledger = alice(
        "query($s: ID!) { session(id: $s) { ... on AgentSession { submissions { seq } } } }",
        s=session,
    )["session"]["submissions"]
    assert [s["seq"] for s in ledger] == list(range(1, len(ledger) + 1))
    mutate(alice, "deleteSchedule", "DeleteScheduleInput", "__typename", id=schedule["id"])


def test_control_without_the_unique_key_a_due_time_fires_twice(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The control: on PostgreSQL with the (schedule, scheduledFor) unique key
    dropped, two processes firing the same schedule fire some due time twice,
    which is what the key prevents."""
    tmp = tmp_path_factory.mktemp("schedules-control")
    with database("postgres", tmp) as url:
        both = Pair(url, tmp)
        api = both.start()
        try:
            asyncio.run(_drop_unique_key(url))
            session = start_session(api)["id"]
            schedule = create(api, session)
            wait_until(lambda: len(fires(api, schedule["id"])) >= 16, 40, "sixteen fires")
            counted = Counter(f["scheduledFor"] for f in fires(api, schedule["id"]))
            assert max(counted.values()) >= 2, counted
        finally:
            api.close()
            both.stop()


async def _drop_unique_key(url: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(url.replace("postgres://", "postgresql://", 1))
    try:
        names = await conn.fetch(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'submissions'::regclass"
            " AND contype = 'u' AND pg_get_constraintdef(oid) LIKE '%scheduled_for%'"
        )
        assert len(names) == 1, names
        await conn.execute(f'ALTER TABLE submissions DROP CONSTRAINT "{names[0]["conname"]}"')
    finally:
        await conn.close()
