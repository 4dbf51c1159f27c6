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
  fire that day, and one inside the repeated hour fires at both. Where the repeated
  span is half an hour (Lord Howe Island), cronsim finds the second only from a
  moment inside that span, not from the first.

Why cronsim. Of the two maintained cron libraries on PyPI, croniter and cronsim,
cronsim is the one whose daily jobs fire exactly once on both daylight-saving
days: croniter 7.0 fires ``30 1 * * *`` twice on the fall-back day, in
Europe/Lisbon and America/New_York alike. cronsim takes the seconds field first,
as this contract has it (croniter reads it last unless told otherwise), iterates
backwards (``reverse=True``), works with ``zoneinfo``, is typed and has no
dependencies (croniter needs python-dateutil and ships no type hints). It is
written for Healthchecks, a cron monitoring service, and has been maintained by
its author since 2021; croniter's maintainer declared it abandoned in December
2024 before it moved to the Pallets community. cronsim does not know the @
shortcuts, so they are spelled out here. Licence: BSD-3-Clause.

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
CHECKED_FROM = datetime(2000, 1, 1, tzinfo=UTC)
"""Where ``parse`` looks for a first due time. cronsim searches fifty years ahead,
and the calendar's days and weekdays repeat every 28 years until 2100: an
expression with no due time in that span has none at all."""


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

        cronsim's backward search finds a due time before ``moment``, and the forward
        search walks on from it to the last: backwards, cronsim misses the wall clock's
        second pass of a repeated hour, and the due times after a change of half an
        hour (Lord Howe Island), stepping an hour of real time for one of the clock's."""
        found = (due for due in self._times(moment, reverse=True) if due <= moment)
        before = next(found, None)
        if before is None:
            return None
        return max(takewhile(lambda due: due <= moment, self._after(before)), default=before)

    def shortest_gap(self, after: datetime, fires: int = 64) -> timedelta:
        """The shortest interval between consecutive due times among the next ``fires``
        (at least two) after ``after``."""
        times = list(islice(self._after(after), fires))
        return min(later - earlier for earlier, later in pairwise(times))

    @property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def _after(self, moment: datetime) -> Iterator[datetime]:
        """Due times after ``moment``. Started inside the second pass of a repeated hour,
        cronsim's wall clock first finds times at or before it: those are passed over."""
        return (due for due in self._times(moment, reverse=False) if due > moment)

    def _times(self, start: datetime, reverse: bool) -> Iterator[datetime]:
        fields = SHORTCUTS.get(self.expression.lower(), self.expression)
        local = start.astimezone(self._zone)
        return (due.astimezone(UTC) for due in CronSim(fields, local, reverse=reverse))


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
