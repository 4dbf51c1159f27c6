"""What the browser tests share: where screenshots go, the two screen sizes, the
dashboard opened and live, a check that nothing sticks out sideways, and a
browser cut off from everything but this machine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from playwright.async_api import Browser, BrowserContext, Page, Request, Route, ViewportSize, expect

from runstate.client.documents import document_id
from runstate.web.dashboard import operations

ARTIFACTS = Path(__file__).parent.parent.parent / "test-artifacts" / "browser"
"""Screenshots of the browser tests, for a person to look at after a run."""

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

DESK: ViewportSize = {"width": 1400, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}


def sends(request: Request, operation: str) -> bool:
    """Whether a request of the page runs ``operation`` (``runstate.web.dashboard``),
    which the page names by id."""
    return document_id(operations()[operation]) in (request.post_data or "")


async def offline_context(
    browser: Browser, blocked: list[str], size: ViewportSize = DESK
) -> BrowserContext:
    """A browser context in which every request to another host fails, as on a
    machine without internet; the refused URLs are appended to ``blocked``."""
    context = await browser.new_context(viewport=size)

    async def only_local(route: Route) -> None:
        url = route.request.url
        if url.startswith("data:") or urlsplit(url).hostname in LOCAL_HOSTS:
            await route.continue_()
        else:
            blocked.append(url)
            await route.abort("internetdisconnected")

    await context.route("**/*", only_local)
    return context


async def open_dashboard(
    browser: Browser,
    url: str,
    size: ViewportSize,
    api_route: Callable[[Route], Awaitable[None]] | None = None,
) -> Page:
    """The dashboard at ``url`` in a new page of ``size``, once it follows a task live;
    its GraphQL requests over HTTP go through ``api_route`` when one is given."""
    page = await browser.new_page(viewport=size)
    if api_route is not None:
        await page.route("**/graphql", api_route)
    await page.goto(url)
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    return page


async def assert_fits_the_screen(page: Page, *test_ids: str) -> None:
    """No sideways scrolling: the document is no wider than the viewport, and each of
    ``test_ids`` is shown inside it, left to right."""
    width = page.viewport_size["width"] if page.viewport_size else 0
    scroll_width = await page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"the page is {scroll_width} px wide on a {width} px screen"
    for test_id in test_ids:
        box = await page.get_by_test_id(test_id).bounding_box()
        assert box is not None, f"{test_id} is not shown"
        assert box["x"] >= 0, f"{test_id} starts left of the screen: {box}"
        assert box["x"] + box["width"] <= width, f"{test_id} ends right of the screen: {box}"
