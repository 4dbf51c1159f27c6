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
- a connection nobody has vouched for yet counts against its client address.
  The process's places (below) less those vouched for are shared fairly among
  the addresses that hold such connections: each may hold at most the places
  left divided by the number of addresses (a newcomer counted among them), and
  never more than ``per_address``. An address at its share that opens another
  closes its own oldest unvouched connection (the new one may carry a user's
  token: one behind the same NAT as an attacker still gets in), and a newcomer
  finding the process full closes the oldest unvouched connection of the
  address holding the most. So five or fifty addresses together hold no more
  than the places there are, and an address holding none always has room;
- a live token vouches for its connection (``vouch``): an HTTP request's
  ``Authorization`` as ``BearerAuth`` checks it anyway (no query of its own), a
  WebSocket's in its accepted ``connection_init``. From then on it no longer
  counts against its address, and is never closed to make room (the per-user
  cap, ``connections``, counts WebSockets). A trusted proxy's connections are not
  counted by address either (the proxy caps its clients);
- the process holds at most its open-file limit less ``RESERVE_FDS`` connections
  (the database, Redis and the log keep theirs), so accepting a connection never
  runs out of descriptors; one over, with no unvouched connection to close for
  it, is closed at once.

Refusals and connections closed to make room are logged as one line per
``REPORT_SECONDS``, with their counts, at WARNING; connections closed at the
header deadline having sent no byte at all (``unused``: a browser opens spare
ones it may never use) in a line of their own at INFO;
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
"""The scope extension (HTTP and WebSocket) that stops counting its connection by
address: called once a live token is seen on it."""

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
    """The open connections of one app's server process, and the client addresses
    their places are counted against until a token vouches for them."""

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
        self._held: dict[asyncio.Transport, str | None] = {}
        """Each connection held (keyed by its transport), with the address it is
        counted against (None: vouched for, or a trusted proxy's)."""
        self._unvouched: dict[str, dict[asyncio.Transport, None]] = {}
        """The connections counted against each address, oldest first."""
        self._by_count: dict[int, dict[str, None]] = {}
        """The addresses holding each number of unvouched connections, so that the
        busiest is found at once however many there are."""
        self._most = 0
        """The most unvouched connections an address holds."""
        self._counted = 0
        """How many connections are counted against an address."""
        self._refused: Counter[str] = Counter()
        self._unused = 0
        """Connections closed at the header deadline having sent nothing, since
        the last report."""
        self._report: asyncio.TimerHandle | None = None
        self.stopping = asyncio.Event()
        """Set when the server begins to stop (``HttpProtocol.shutdown``): answers
        that last as long as their client listens (AG-UI runs) end then, so that
        their clients go on elsewhere instead of being cut at the grace period's end."""

    @property
    def open(self) -> int:
        """Connections held now."""
        return len(self._held)

    def share(self, address: str) -> int:
        """The most connections ``address`` may have counted against it now: the
        places not vouched for, divided among the addresses holding some (itself
        among them), at least one and at most ``per_address``."""
        room = self.budget - (self.open - self._counted)
        addresses = len(self._unvouched) + (address not in self._unvouched)
        return max(1, min(self.per_address, room // addresses))

    def admit(self, transport: asyncio.Transport, address: str | None) -> bool:
        """Hold a new connection from ``address``, closing an older unvouched one
        to make room when its address is at its share or the process is full;
        False (it is to be closed) when the process is full of connections that
        cannot be closed for it."""
        if address is not None and address in self.trusted:
            address = None
        own = self._unvouched.get(address) if address is not None else None
        if address is not None and own is not None and len(own) >= self.share(address):
            self._evict(next(iter(own)), "closed for a newer one from their address (at its share)")
        elif self.open >= self.budget:
            if not self._most:
                self.refused("over the process's open-file budget")
                return False
            busiest = self._unvouched[next(iter(self._by_count[self._most]))]
            self._evict(
                next(iter(busiest)),
                "closed for a newcomer (the process full, their address the busiest)",
            )
        self._held[transport] = address
        if address is not None:
            own = self._unvouched.setdefault(address, {})
            own[transport] = None
            self._counted += 1
            self._recount(address, len(own) - 1, len(own))
        return True

    def _evict(self, transport: asyncio.Transport, reason: str) -> None:
        """Close an unvouched connection to make room for a newer one."""
        self.leave(transport)
        transport.abort()
        self.refused(reason)

    def vouch(self, transport: asyncio.Transport) -> None:
        """Stop counting this connection by address: a user owns it now."""
        address = self._held.get(transport)
        if address is not None:
            self._held[transport] = None
            self._uncount(transport, address)

    def leave(self, transport: asyncio.Transport) -> None:
        """Forget a connection that closed (idempotent)."""
        if transport in self._held:
            address = self._held.pop(transport)
            if address is not None:
                self._uncount(transport, address)

    def _uncount(self, transport: asyncio.Transport, address: str) -> None:
        own = self._unvouched[address]
        del own[transport]
        self._counted -= 1
        self._recount(address, len(own) + 1, len(own))
        if not own:
            del self._unvouched[address]

    def _recount(self, address: str, before: int, after: int) -> None:
        """Move ``address`` from the addresses holding ``before`` unvouched
        connections to those holding ``after`` (one more or one fewer)."""
        if before:
            bucket = self._by_count[before]
            del bucket[address]
            if not bucket:
                del self._by_count[before]
                if self._most == before and after < before:
                    self._most = after
        if after:
            self._by_count.setdefault(after, {})[address] = None
        self._most = max(self._most, after)

    def refused(self, reason: str) -> None:
        """Note a refusal: told at once when none was told within ``REPORT_SECONDS``,
        else summed up in the next report."""
        self._refused[reason] += 1
        if self._report is None:
            self._tell()

    def unused(self) -> None:
        """Note a connection closed at the header deadline that sent no byte: a
        browser's speculative connection as often as a client's fault (a
        slowloris sends bytes, slowly: ``refused``), so it is counted at INFO."""
        self._unused += 1
        if self._report is None:
            self._tell()

    def _tell(self) -> None:
        """Log what was refused since the last report, in one line, and hold the
        next report back for ``REPORT_SECONDS``."""
        self._report = None
        if not self._refused and not self._unused:
            return
        if self._refused:
            counts = ", ".join(f"{n} {reason}" for reason, n in self._refused.most_common())
            log.warning("refused connections: %s (%d open)", counts, self.open)
        if self._unused:
            log.info(
                "closed connections: %d sent nothing before the header deadline (%d open)",
                self._unused,
                self.open,
            )
        self._refused.clear()
        self._unused = 0
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
