"""The links a person is shown, in headless Chromium: a task link printed by the SDK
opens signed in in a new tab of a browser that signed in before, a token link pasted
into a tab signs it in at once, and tabs of two users stay apart."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from runstate.client import Runstate
from tests.browser.pages import DESK
from tests.integration.test_api import create_task, start_session
from tests.support import Api, Server, create_token


def printed_link(server: Server, token: str, task_id: str) -> str:
    """The link the SDK prints for a task (``dashboard_link``: no token in it)."""
    return Runstate(server.url, token).dashboard_link(task_id)


async def test_a_token_link_pasted_into_a_signed_out_tab_signs_it_in_at_once(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards a token link followed within a tab (``hashchange`` in app.js reads
    ``token=``): a tab on the Sign-in page is given ``#token=...&task=...`` with
    no reload; it signs in at once, drops the token from the address bar as a
    first load does, and opens the task. Seen failing with the hashchange only
    routing: the Sign-in page stayed."""
    server, token = dashboard
    task = create_task(api, start_session(api)["id"], 1, goal="Pasted trip")
    page = await browser.new_page(viewport=DESK)
    await page.goto(server.url)
    await expect(page.locator("#signin")).to_be_visible()
    await page.evaluate("window.loadedOnce = true")  # gone if the page ever reloads
    await page.goto(f"{server.url}/#token={token}&task={task['id']}")
    await expect(page.get_by_test_id("goal")).to_have_text("Pasted trip")
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    await expect(page.locator("#signin")).to_be_hidden()
    assert page.url == f"{server.url}/#task={task['id']}", "the token leaves the address bar"
    assert await page.evaluate("window.loadedOnce") is True, "signed in with no reload"
    await page.close()


async def test_a_printed_task_link_opens_signed_in_in_a_new_tab(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the browser remembering the last token signed in with (localStorage):
    once a tab signed in with a token link, the SDK's line's link (``#task=``, no
    token) opened in a new tab shows its task signed in. Signing out forgets it: a
    new tab asks for a token, names the task it will open and says how to get a
    signed-in link, and signed in, opens that task. Seen failing with the token kept
    for its tab only: the new tab showed the Sign-in page."""
    server, token = dashboard
    task = create_task(api, start_session(api)["id"], 1, goal="Printed trip")
    link = printed_link(server, token, task["id"])
    assert link == f"{server.url}/#task={task['id']}"
    context = await browser.new_context(viewport=DESK)
    first = await context.new_page()
    await first.goto(f"{server.url}/#token={token}")
    await expect(first.get_by_test_id("goal")).to_have_text("Printed trip")
    second = await context.new_page()
    await second.goto(link)
    await expect(second.get_by_test_id("goal")).to_have_text("Printed trip")
    await expect(second.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    await second.click("#signout")
    third = await context.new_page()
    await third.goto(link)
    await expect(third.locator("#signin")).to_be_visible()
    await expect(third.get_by_test_id("signin-then")).to_have_text(
        f"Once you sign in, the page opens task {task['id']}."
    )
    await expect(third.get_by_test_id("signin-how")).to_contain_text("runstate token link USER")
    await third.fill("#token", token)
    await third.click("#signin button")
    await expect(third.get_by_test_id("goal")).to_have_text("Printed trip")
    await context.close()


async def test_tabs_signed_in_as_two_users_stay_so(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards a tab keeping its own token (sessionStorage) beside the browser's last
    one: in one browser, a tab signed in as watcher and one as other each show
    their own user's task after a reload; a new tab from a printed link is signed
    in as the last to sign in (other); and a token link of other's pasted into
    watcher's tab signs that tab in as other at once, watcher's sessions gone from
    its list. Seen failing with the pasted link ignored until a reload."""
    server, token = dashboard
    theirs_token = create_token(server.database_url, "other")
    mine = create_task(api, start_session(api)["id"], 1, goal="Watcher's trip")
    with Api(server.url, theirs_token) as other:
        theirs = create_task(other, start_session(other)["id"], 1, goal="Other's trip")
    context = await browser.new_context(viewport=DESK)
    watcher_tab = await context.new_page()
    await watcher_tab.goto(f"{server.url}/#token={token}&task={mine['id']}")
    other_tab = await context.new_page()
    await other_tab.goto(f"{server.url}/#token={theirs_token}&task={theirs['id']}")
    for tab, goal in ((watcher_tab, "Watcher's trip"), (other_tab, "Other's trip")):
        await tab.reload()
        await expect(tab.get_by_test_id("goal")).to_have_text(goal)
        await expect(tab.locator("#task-list a[data-task]")).to_have_count(1)
    new_tab = await context.new_page()
    await new_tab.goto(printed_link(server, theirs_token, theirs["id"]))
    await expect(new_tab.get_by_test_id("goal")).to_have_text("Other's trip")
    await watcher_tab.goto(f"{server.url}/#token={theirs_token}&task={theirs['id']}")
    await expect(watcher_tab.get_by_test_id("goal")).to_have_text("Other's trip")
    listed = watcher_tab.locator("#task-list a[data-task]")
    await expect(listed).to_have_count(1)
    await expect(listed).to_have_attribute("data-task", theirs["id"])
    await context.close()
