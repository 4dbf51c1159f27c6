"""Fixtures of the browser tests: a server with a token, and Debian's Chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from tests.browser.pages import ARTIFACTS
from tests.support import IN_CI, Api, Server, create_token

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    """A server on a fresh SQLite file, and a token of user 'watcher'."""
    url = f"sqlite://{tmp_path / 'browser.db'}"
    token = create_token(url, "watcher")
    server = Server(url, tmp_path / "server.log", RUNSTATE_CATCH_UP_SECONDS="1").start()
    try:
        yield server, token
    finally:
        server.stop()


@pytest.fixture
def api(dashboard: tuple[Server, str]) -> Iterator[Api]:
    """A client of the dashboard's server with its token, closed even if a test fails."""
    server, token = dashboard
    client = Api(server.url, token)
    yield client
    client.close()


@pytest.fixture
def chromium_path() -> Path:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing (apt-get install chromium); browser tests need it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(f"SKIPPED LOUDLY: {message}")
    return CHROMIUM


@pytest.fixture
async def browser(chromium_path: Path) -> AsyncIterator[Browser]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=str(chromium_path),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        await chromium.close()
