"""RunstateSaver judged by LangGraph's own conformance suite
(``langgraph-checkpoint-conformance``), against a real ``runstate serve`` on SQLite
and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability

from runstate.integrations.langgraph import RunstateSaver
from tests.support import Server, create_token, database

USER = "graph-builder"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, str]]:
    """A server, and a token of ``USER``."""
    tmp = tmp_path_factory.mktemp(f"langgraph-{request.param}")
    with database(request.param, tmp) as url:
        token = create_token(url, USER)
        server = Server(url, tmp / "server.log", RUNSTATE_RATE_LIMIT="false").start()
        try:
            yield server, token
        finally:
            server.stop()


def report_of(failures: dict[str, list[str]]) -> str:
    return "\n".join(f"{cap}: {message}" for cap, found in failures.items() for message in found)


async def test_every_capability_passes_langgraphs_conformance_suite(
    served: tuple[Server, str], tmp_path: Path
) -> None:
    """Guards the saver and the server's checkpoint storage together: every test of
    every capability of the suite passes (level FULL), none skipped: the base ones
    (put, put_writes, get_tuple, list, delete_thread) and the extended ones
    (delete_for_runs, copy_thread, prune). Seen failing with a checkpoint read back with any stored
    version of its channels instead of the versions it names
    (``test_put_incremental_channel_update``), and with KEEP_LATEST keeping every
    checkpoint (``test_prune_keep_latest_single_thread``)."""
    server, token = served

    @checkpointer_test(name="RunstateSaver")
    async def saver() -> AsyncGenerator[RunstateSaver, None]:
        async with RunstateSaver.from_url(server.url, token) as opened:
            yield opened

    report = await validate(saver)
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert failures == {}, report_of(failures)
    assert report.conformance_level() == "FULL"
    skipped = {name: r.tests_skipped for name, r in report.results.items()}
    assert skipped == {c.value: 0 for c in Capability}
