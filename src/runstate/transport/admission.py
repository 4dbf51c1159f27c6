"""Which TCP connections a server process takes, and for how long it waits on them.

Before any token is read, a connection costs the server a file descriptor and a
parser, and uvicorn alone bounds neither: a request whose headers trickle in (or
a connection that sends nothing) was held past 100 s, 2,000 half-sent requests
from one address were all held, and with the common ``ulimit -n 1024`` 1,100 of
them starved every other user and wrote 212,967 "Too many open files"
tracebacks (94.5 MB of log) in 14 s. So, as nginx (``client_header_timeout``,
``limit_conn``) and Apache (``mod_reqtimeout``) do:

- a request's headers must arrive within ``header_seconds`` of its first byte
  (or of the connection's opening), and its body within ``body_seconds`` plus a
  second for every ``BODY_MIN_RATE`` bytes it has sent; past that the connection
  is closed;
- one address holds at most ``per_address`` connections; a WebSocket stops
  counting once its ``connection_init`` is accepted (``vouch``): from then on the
  per-user cap (``connections``) counts it. A trusted proxy's connections are
  not capped by address (the proxy caps its clients);
- the process holds at most its open-file limit less ``RESERVE_FDS`` connections
  (the database, Redis and the log keep theirs), so accepting a connection never
  runs out of descriptors; one over is closed at once.

Refusals are logged as one line per ``REPORT_SECONDS``, with their counts,
never a line (let alone a traceback) per connection, and so is asyncio's "accept
out of system resource" if descriptors run out all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import resource
from collections import Counter
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

BODY_MIN_RATE = 500
"""Bytes a second a body must keep up to earn more time (``mod_reqtimeout``'s
default ``MinRate``): 1 MiB, the largest body, may take 20 s + 35 min."""

RESERVE_FDS = 64
"""Descriptors kept for what is not a client connection: database and Redis
connections, the log, the event loop's own."""

REPORT_SECONDS = 10.0
"""How often refusals are summed up in the log."""

ADMISSION = "runstate.admission"
"""The lifespan state's key for the app's ``Admission`` (the protocols read it)."""

VOUCH = "runstate.vouch"
"""The WebSocket scope extension that stops counting its connection by address."""

OUT_OF_FILES = "socket.accept() out of system resource"
"""asyncio's message when accept fails for want of descriptors (it logs each
with a traceback, and retries the listening socket's whole backlog)."""


def raise_open_file_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit, as Go's
    runtime does at start: the soft limit (often 1024) is a default for old
    programs, not a decision."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 1_048_576 if hard == resource.RLIM_INFINITY else hard
        with contextlib.suppress(ValueError, OSError):  # not allowed: keep the soft one
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def open_file_budget() -> int:
    """The client connections this process can hold: its open-file limit less
    ``RESERVE_FDS`` (at least a few, whatever the limit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(8, soft - RESERVE_FDS)


class Trusted:
    """Addresses and networks named in ``RUNSTATE_TRUSTED_PROXIES``."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.networks = [ipaddress.ip_network(e, strict=False) for e in entries if e != "*"]
        self.everyone = "*" in entries

    def __contains__(self, address: str) -> bool:
        if self.everyone:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)


class Admission:
    """The open connections of one app's server process, by client address."""

    def __init__(
        self,
        *,
        per_address: int,
        header_seconds: float,
        body_seconds: float,
        trusted: Trusted,
    ) -> None:
        self.per_address = per_address
        self.header_seconds = header_seconds
        self.body_seconds = body_seconds
        self.trusted = trusted
        self.budget = open_file_budget()
        self._held: dict[object, str | None] = {}
        """Each connection held (keyed by its transport), with the address it is
        counted against (None: not counted by address)."""
        self._by_address: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._report: asyncio.TimerHandle | None = None
        self.stopping = asyncio.Event()
        """Set when the server begins to stop (``HttpProtocol.shutdown``): answers
        that last as long as their client listens (AG-UI runs) end then, so that
        their clients go on elsewhere instead of being cut at the grace period's end."""

    @property
    def open(self) -> int:
        """Connections held now."""
        return len(self._held)

    def admit(self, transport: object, address: str | None) -> bool:
        """Hold a new connection from ``address``; False (it is to be closed) past
        the process's budget or the address's cap."""
        if self.open >= self.budget:
            self.refused("over the process's open-file budget")
            return False
        if address is not None and address in self.trusted:
            address = None
        if address is not None:
            if self._by_address[address] >= self.per_address:
                self.refused(f"over the cap of {self.per_address} per address")
                return False
            self._by_address[address] += 1
        self._held[transport] = address
        return True

    def vouch(self, transport: object) -> None:
        """Stop counting this connection by address: a user owns it now."""
        address = self._held.get(transport)
        if address is not None:
            self._held[transport] = None
            self._uncount(address)

    def leave(self, transport: object) -> None:
        """Forget a connection that closed (idempotent)."""
        if transport in self._held:
            address = self._held.pop(transport)
            if address is not None:
                self._uncount(address)

    def _uncount(self, address: str) -> None:
        self._by_address[address] -= 1
        if not self._by_address[address]:
            del self._by_address[address]

    def refused(self, reason: str) -> None:
        """Note a refusal: told at once when none was told within ``REPORT_SECONDS``,
        else summed up in the next report."""
        self._refused[reason] += 1
        if self._report is None:
            self._tell()

    def _tell(self) -> None:
        """Log what was refused since the last report, in one line, and hold the
        next report back for ``REPORT_SECONDS``."""
        self._report = None
        if not self._refused:
            return
        counts = ", ".join(f"{n} {reason}" for reason, n in self._refused.most_common())
        log.warning("refused connections: %s (%d open)", counts, self.open)
        self._refused.clear()
        with contextlib.suppress(RuntimeError):  # no loop: each refusal is told
            self._report = asyncio.get_running_loop().call_later(REPORT_SECONDS, self._tell)

    def handle_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's exception handler: asyncio's accept failures for want of file
        descriptors are counted into the report; everything else as asyncio would."""
        if context.get("message") == OUT_OF_FILES:
            error = context.get("exception")
            reason = error.strerror if isinstance(error, OSError) and error.strerror else "error"
            self.refused(f"accept failed: {reason}")
            return
        loop.default_exception_handler(context)

    def stop(self) -> None:
        """The server is stopping: no answer should wait for more (``stopping``)."""
        self.stopping.set()

    def close(self) -> None:
        """Tell what is left to tell, and stop reporting (the app is stopping)."""
        if self._report is not None:
            self._report.cancel()
        self._tell()
        if self._report is not None:
            self._report.cancel()
            self._report = None
