"""The links a person is shown, in headless Chromium: a task link printed by the SDK
opens signed in in a new tab of a browser that signed in before, a token link pasted
into a tab signs it in at once, tabs of two users stay apart, and a page that follows
the newest task holds the task a person chose and never moves on to an abandoned one."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Browser, Page, expect

from runstate.client import Runstate
from tests.browser.pages import DESK, PHONE, assert_fits_the_screen, sends
from tests.integration.test_agui import in_doubt
from tests.integration.test_api import checkpoint, create_task, start_session, update_session
from tests.support import Api, Server, create_token


def printed_link(server: Server, token: str, task_id: str) -> str:
    """The link the SDK prints for a task (``dashboard_link``: no token in it)."""
    return Runstate(server.url, token).dashboard_link(task_id)


def finish(api: Api, task: dict[str, Any]) -> None:
    """Completes a one-step task, as its agent would."""
    done = checkpoint(api, task["id"], task["version"], steps=[{"index": 0, "status": "SUCCESS"}])
    assert done["status"] == "COMPLETED", done


async def two_list_reads(page: Page) -> None:
    """Returns once the page sent its session list's read twice more: the second is
    sent only after the first one's answer was drawn and followed (``loadTasks``)."""
    for _ in range(2):
        async with page.expect_request(lambda r: sends(r, "pageSessions"), timeout=10_000):
            pass


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


async def test_a_token_link_naming_no_task_opens_the_task_the_sign_in_page_named(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards the Sign-in page's promise (``onHashChange`` in app.js): a fresh
    browser opens an older task's link, the page says it opens that task once
    signed in; the link ``runstate token link`` prints (``#token=...``, no task)
    pasted into that tab signs in and opens that task, held (not followed away),
    though a newer task is active. Seen failing with the page following the newest
    task instead."""
    server, token = dashboard
    named = create_task(api, start_session(api)["id"], 1, goal="Named trip")
    create_task(api, start_session(api)["id"], 1, goal="Newer trip")
    context = await browser.new_context(viewport=DESK)
    page = await context.new_page()
    await page.goto(f"{server.url}/#task={named['id']}")
    await expect(page.get_by_test_id("signin-then")).to_have_text(
        f"Once you sign in, the page opens task {named['id']}."
    )
    await page.goto(f"{server.url}/#token={token}")
    await expect(page.get_by_test_id("conn")).to_have_attribute("data-state", "live")
    await expect(page.get_by_test_id("goal")).to_have_text("Named trip")
    await expect(page).to_have_url(f"{server.url}/#task={named['id']}")
    await two_list_reads(page)
    await expect(page.get_by_test_id("goal")).to_have_text("Named trip")
    await context.close()


async def test_the_sign_in_page_says_how_in_one_line_on_a_desk_and_fits_a_phone(
    dashboard: tuple[Server, str], browser: Browser
) -> None:
    """Guards the Sign-in page's layout (index.html, style.css): how to sign in, in
    one line on a desk, naming the command as a clone runs it (``.venv/bin/``),
    above a token field wide enough to read what is pasted; on a phone, nothing
    sticks out sideways. Seen failing with three sentences in the session list's
    column (272 px wide, six lines, a field as narrow)."""
    server, _ = dashboard
    page = await browser.new_page(viewport=DESK)
    await page.goto(server.url)
    how = page.get_by_test_id("signin-how")
    await expect(how).to_have_text(
        "Open the link make run printed, or one from .venv/bin/runstate token link USER in"
        " the server's folder; or paste a token:"
    )
    line = await how.evaluate("p => parseFloat(getComputedStyle(p).lineHeight)")
    said = await how.bounding_box()
    field = await page.get_by_test_id("token").bounding_box()
    assert said is not None
    assert field is not None
    assert said["height"] < 1.5 * line, f"{said['height']} px high: more than one line"
    assert field["width"] >= 480, f"the token field is {field['width']} px wide"
    await page.set_viewport_size(PHONE)
    await assert_fits_the_screen(page, "signin-how", "token")
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


async def test_clicking_the_task_followed_pins_it_through_its_end(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards a person's choice holding (``route`` and ``follow`` in app.js): a page
    opened with no task follows the newest active one; a click on that task's own
    entry in the list chooses it, so once it completes the page stays on it (the
    outcome of what the person did) though another task is active. Seen failing
    with the entry's link equal to the address follow wrote (no hashchange): the
    page moved on to the other task after the next read of the list."""
    server, token = dashboard
    chosen = create_task(api, start_session(api)["id"], 1, goal="My trip")
    page = await browser.new_page(viewport=DESK)
    await page.goto(f"{server.url}/#token={token}")
    await expect(page.get_by_test_id("goal")).to_have_text("My trip")
    await page.click(f"#task-list a[data-task='{chosen['id']}']")
    await expect(page).to_have_url(f"{server.url}/#task={chosen['id']}")
    other = create_task(api, start_session(api)["id"], 1, goal="Someone else's trip")
    await expect(page.locator(f"#task-list a[data-task='{other['id']}']")).to_be_visible()
    finish(api, chosen)
    await expect(page.get_by_test_id("status")).to_have_text("completed")
    await two_list_reads(page)
    await expect(page.get_by_test_id("goal")).to_have_text("My trip")
    await expect(page).to_have_url(f"{server.url}/#task={chosen['id']}")
    await page.close()


async def test_following_never_moves_on_to_an_abandoned_task(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards ``follow`` picking only a task someone may still move on (``moving`` in
    app.js): an earlier session, closed, left a PLANNED task that nobody holds and
    no worker may claim. A page following the newest task stays on the one it
    showed once that completes, rather than open the abandoned one; a new task
    then is followed as ever. Seen failing with any unfinished task followed: the
    page opened the abandoned one."""
    server, token = dashboard
    left = start_session(api)
    create_task(api, left["id"], 1, goal="Abandoned trip")
    assert update_session(api, left["id"], left["version"], status="COMPLETED")["status"] == (
        "COMPLETED"
    )
    session = start_session(api)["id"]
    followed = create_task(api, session, 1, goal="Followed trip")
    page = await browser.new_page(viewport=DESK)
    await page.goto(f"{server.url}/#token={token}")
    await expect(page.get_by_test_id("goal")).to_have_text("Followed trip")
    finish(api, followed)
    await expect(page.get_by_test_id("status")).to_have_text("completed")
    await two_list_reads(page)
    await expect(page.get_by_test_id("goal")).to_have_text("Followed trip")
    create_task(api, session, 1, goal="Next trip")
    await expect(page.get_by_test_id("goal")).to_have_text("Next trip", timeout=10_000)
    await page.close()


async def test_deciding_the_task_followed_holds_it_through_its_end(
    dashboard: tuple[Server, str], browser: Browser, api: Api
) -> None:
    """Guards a person's decision as a choice (``chosen`` in app.js): a page following
    the newest task shows one waiting for a decision; the person skips its step on
    the page, the task completes, and the page stays on it (the outcome of their
    decision, the address naming it alone) though another task is active. Seen
    failing with the decision leaving the page following: it moved on to the other
    task at the next read of the list."""
    server, token = dashboard
    decided = in_doubt(api)
    page = await browser.new_page(viewport=DESK)
    await page.goto(f"{server.url}/#token={token}")
    await expect(page.get_by_test_id("skip")).to_be_visible(timeout=10_000)
    await expect(page).to_have_url(f"{server.url}/#follow&task={decided['id']}")
    create_task(api, start_session(api)["id"], 1, goal="Someone else's trip")
    await page.get_by_test_id("skip").click()
    await expect(page.get_by_test_id("status")).to_have_text("completed")
    await two_list_reads(page)
    await expect(page).to_have_url(f"{server.url}/#task={decided['id']}")
    await expect(page.get_by_test_id("goal")).to_have_text(decided["goal"])
    await page.close()
