"""What the browser tests share: where screenshots go, and a browser cut off from
everything but this machine."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from playwright.async_api import Browser, BrowserContext, Route

ARTIFACTS = Path(__file__).parent.parent.parent / "test-artifacts" / "browser"
"""Screenshots of the browser tests, for a person to look at after a run."""

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


async def offline_context(
    browser: Browser, blocked: list[str], width: int = 1400, height: int = 900
) -> BrowserContext:
    """A browser context in which every request to another host fails, as on a
    machine without internet; the refused URLs are appended to ``blocked``."""
    context = await browser.new_context(viewport={"width": width, "height": height})

    async def only_local(route: Route) -> None:
        url = route.request.url
        if url.startswith("data:") or urlsplit(url).hostname in LOCAL_HOSTS:
            await route.continue_()
        else:
            blocked.append(url)
            await route.abort("internetdisconnected")

    await context.route("**/*", only_local)
    return context
