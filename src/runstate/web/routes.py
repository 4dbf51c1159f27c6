"""Routes of the web page: the start page and a health check."""

from __future__ import annotations

from importlib.resources import files

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

_INDEX = files("runstate.web").joinpath("index.html").read_text(encoding="utf-8")


async def index(_: Request) -> Response:
    """The dashboard: the caller's tasks, one followed live (HTML, CSS and JS in
    ``runstate/web``, no build step)."""
    return HTMLResponse(_INDEX)


async def health(_: Request) -> Response:
    """Liveness for scripts and tests: answers once the database is open."""
    return PlainTextResponse("ok")
