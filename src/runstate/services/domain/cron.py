"""Cron expressions in IANA time zones: when a schedule is due.

An expression has five fields (minute hour day month weekday), or six with
seconds first, or is one of @yearly (@annually), @monthly, @weekly, @daily
(@midnight) and @hourly. Its due times are read on the wall clock of its zone and
answered as UTC instants.

Daylight-saving changes follow Debian's cron, as cronsim does:

- A five-field expression whose minute and hour fields are fixed (``30 1 * * *``,
  ``@daily``) fires once a day even when its time does not exist or occurs twice.
  On the spring-forward day, 01:30 in Europe/Lisbon does not exist: the due time
  is shifted to the end of the gap, 02:00 summer time, not skipped. On the
  fall-back day 01:30 occurs twice: it fires at the first, in summer time.
- An expression whose minute or hour field starts with ``*`` (``0 * * * *``,
  ``*/15 * * * *``) runs on the real clock: across both changes it fires every
  hour once, none twice and none skipped.
- Six-field expressions always run on the real clock (cronsim keeps the rule above
  to cron's own five fields): a fixed time inside the spring-forward gap does not
  fire that day, and one inside the repeated hour fires at both.
- Where the clocks change off the hour (Lord Howe Island by half an hour, the
  Chatham Islands at 02:45), cronsim slips: a six-field fixed time in the repeated
  span fires again only for a search started inside it, and on the Chatham Islands
  a stepped hour field (``0 */2 * * *``) passes over its first due time after the
  spring-forward change.

Why cronsim. Of the two maintained cron libraries on PyPI (compared in December
2026: croniter 7.0.0 and cronsim 2.9, both released in November), cronsim is the
one whose daily jobs fire exactly once on both daylight-saving days: croniter fires
``30 1 * * *`` twice on the fall-back day, in Europe/Lisbon and America/New_York
alike. cronsim takes the seconds field first, as this contract has it (croniter
reads it last unless told otherwise), works with ``zoneinfo``, is typed and has no
dependencies (croniter needs python-dateutil and ships no type hints). Its author
wrote it in 2021 for Healthchecks, a cron monitoring service, and keeps it;
croniter's maintainer declared it abandoned in December 2024 before the Pallets
community took it over. cronsim knows neither the @ shortcuts, spelled out here,
nor how to search backwards reliably, which ``latest_at_or_before`` does with its
forward search. Licence: BSD-3-Clause (croniter: MIT).

Time zones come from the system's database through ``zoneinfo`` (Debian's tzdata,
in the Docker image too); only the names it lists as zones are taken, which
leaves out paths, ``localtime`` and the ``posix/`` and ``right/`` copies.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

from runstate.services.domain.errors import InvalidInputError

MAX_CHARS = 200
SHORTCUTS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
HORIZON = timedelta(days=50 * 365)
"""How far cronsim searches for a due time, and ``latest_at_or_before`` too."""
CHECKED_FROM = datetime(2000, 1, 1, tzinfo=UTC)
"""Where ``parse`` looks for a first due time. cronsim searches fifty years ahead,
and the calendar's days and weekdays repeat every 28 years until 2100: an
expression with no due time in that span has none at all."""


YEAR = timedelta(days=366)
"""The span within which ``shortest_gap`` reads due times."""


@dataclass(frozen=True)
class Cron:
    """A valid cron expression and time zone (made by ``parse``)."""

    expression: str
    timezone: str

    def next_after(self, moment: datetime) -> datetime:
        """The first due time strictly after ``moment`` (aware), in UTC.

        Raises ``ValueError`` if none falls in the fifty years after it: an expression
        that never fires, which ``parse`` refuses."""
        due = next(self._after(moment), None)
        if due is None:
            raise ValueError(
                f"{self.expression!r} has no due time in the fifty years after {moment}"
            )
        return due

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last due time at or before ``moment`` (aware), in UTC; None if there is
        none in the fifty years before it.

        Found with the forward search alone, so that both agree: the span before
        ``moment`` doubles until a due time falls in it, then is halved down to the
        second that holds the last (due times fall on whole seconds). cronsim's own
        backward search misses due times near some changes (Lord Howe Island's half
        hour) and never returns from others (``0 */2 * * *`` on the Chatham Islands)."""
        span = timedelta(seconds=1)
        while not self._due_between(moment - span, moment):
            span *= 2
            if span > HORIZON:
                return None
        early, late = moment - span, moment
        while late - early > timedelta(seconds=1):
            middle = early + (late - early) / 2
            if self._due_between(middle, moment):
                early = middle
            else:
                late = middle
        return self.next_after(early)

    def shortest_gap(self, after: datetime, fires: int = 64) -> timedelta:
        """The shortest interval between consecutive due times among the next ``fires``
        after ``after`` that fall within a year of it (the next two at least): a
        year holds every interval an expression's fields make, and a yearly one
        is read in two steps, not 64 (7 ms a schedule made)."""
        times = list(islice(self._after(after), 2))
        horizon = after + YEAR
        later = islice(self._after(times[-1]), fires - 2)
        times += takewhile(lambda due: due <= horizon, later)
        return min(b - a for a, b in pairwise(times))

    @property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def _due_between(self, start: datetime, end: datetime) -> bool:
        """Whether a due time falls after ``start`` and at or before ``end``."""
        due = next(self._after(start), None)
        return due is not None and due <= end

    def _after(self, moment: datetime) -> Iterator[datetime]:
        """Due times after ``moment``. Started inside the second pass of a repeated hour,
        cronsim's wall clock first finds times at or before it: those are passed over."""
        return (due for due in self._times(moment) if due > moment)

    def _times(self, start: datetime) -> Iterator[datetime]:
        """cronsim's due times from ``start``, on the zone's clock, in UTC."""
        fields = SHORTCUTS.get(self.expression.lower(), self.expression)
        local = start.astimezone(self._zone)
        return (due.astimezone(UTC) for due in CronSim(fields, local))


def parse(expression: str, timezone: str) -> Cron:
    """A cron expression and time zone checked: ``InvalidInputError`` on the field
    ("cron" or "timezone") that cannot be taken, saying why."""
    cron = Cron(_expression(expression), timezone)
    _known_zone(timezone)
    try:
        cron.next_after(CHECKED_FROM)
    except CronSimError as error:
        raise InvalidInputError("cron", f"{str(error).lower()} field") from None
    except ValueError:
        raise InvalidInputError("cron", "never fires: no date matches it") from None
    return cron


def _expression(expression: str) -> str:
    """The expression stripped, if it has the shape of one."""
    text = expression.strip()
    if not text:
        raise InvalidInputError("cron", "must not be empty")
    if len(text) > MAX_CHARS:
        raise InvalidInputError("cron", f"must be at most {MAX_CHARS} characters")
    if not (text.isascii() and text.isprintable()):
        raise InvalidInputError("cron", "must hold only printable ASCII characters")
    if text.startswith("@"):
        if text.lower() not in SHORTCUTS:
            raise InvalidInputError(
                "cron", "the shortcuts are @yearly, @monthly, @weekly, @daily and @hourly"
            )
        return text
    count = len(text.split())
    if count not in (5, 6):
        raise InvalidInputError(
            "cron",
            f"must have 5 fields (minute hour day month weekday) or 6 (seconds first), not {count}",
        )
    return text


def _known_zone(name: str) -> None:
    if name == "localtime" or name not in _zone_names():
        raise InvalidInputError(
            "timezone", f"unknown time zone {name!r}; use an IANA name such as Europe/Lisbon"
        )


@cache
def _zone_names() -> frozenset[str]:
    """The zones of the time zone database, read once."""
    return frozenset(available_timezones())
