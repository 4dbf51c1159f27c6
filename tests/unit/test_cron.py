"""Cron expressions in time zones: due times across daylight-saving changes, the
six-field form and the shortcuts, the search backwards, and what ``parse`` refuses."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from types import FrameType

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from runstate.services.domain.cron import Cron, parse
from runstate.services.domain.errors import InvalidInputError


def at(text: str) -> datetime:
    """A UTC instant written as ``2025-03-30 01:00:00``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(cron: Cron, start: str, end: str) -> list[str]:
    """The due times in (start, end], in UTC, as text."""
    found = []
    due = cron.next_after(at(start))
    while due <= at(end):
        found.append(due.strftime("%Y-%m-%d %H:%M:%S"))
        due = cron.next_after(due)
    return found


@pytest.mark.parametrize(
    ("expression", "zone", "start", "end", "expected"),
    [
        # 01:00 WET becomes 02:00 WEST on 2025-03-30: 01:30 does not exist.
        (
            "30 1 * * *",
            "Europe/Lisbon",
            "2025-03-29 00:00:00",
            "2025-04-01 00:00:00",
            ["2025-03-29 01:30:00", "2025-03-30 01:00:00", "2025-03-31 00:30:00"],
        ),
        # 02:00 EST becomes 03:00 EDT on 2025-03-09: 02:30 does not exist.
        (
            "30 2 * * *",
            "America/New_York",
            "2025-03-08 00:00:00",
            "2025-03-11 00:00:00",
            ["2025-03-08 07:30:00", "2025-03-09 07:00:00", "2025-03-10 06:30:00"],
        ),
    ],
)
def test_a_daily_time_in_the_spring_forward_gap_fires_once_at_its_end(
    expression: str, zone: str, start: str, end: str, expected: list[str]
) -> None:
    """Guards the spring-forward rule the docs state: a due time that does not exist
    is shifted to the end of the gap (02:00 WEST, 03:00 EDT) and fires once, not
    skipped and not twice."""
    assert fires(parse(expression, zone), start, end) == expected


@pytest.mark.parametrize(
    ("zone", "start", "end", "expected"),
    [
        # 02:00 WEST becomes 01:00 WET on 2025-10-26: 01:30 occurs twice.
        (
            "Europe/Lisbon",
            "2025-10-25 00:00:00",
            "2025-10-28 00:00:00",
            ["2025-10-25 00:30:00", "2025-10-26 00:30:00", "2025-10-27 01:30:00"],
        ),
        # 02:00 EDT becomes 01:00 EST on 2025-11-02: 01:30 occurs twice.
        (
            "America/New_York",
            "2025-11-01 00:00:00",
            "2025-11-04 00:00:00",
            ["2025-11-01 05:30:00", "2025-11-02 05:30:00", "2025-11-03 06:30:00"],
        ),
    ],
)
def test_a_daily_time_in_the_repeated_hour_fires_once_at_its_first(
    zone: str, start: str, end: str, expected: list[str]
) -> None:
    """Guards the fall-back rule: 01:30, which the clock shows twice, fires once, at
    its first occurrence (summer time)."""
    assert fires(parse("30 1 * * *", zone), start, end) == expected


@pytest.mark.parametrize(
    ("zone", "change"),
    [
        ("Europe/Lisbon", "2025-03-30 01:00:00"),
        ("Europe/Lisbon", "2025-10-26 01:00:00"),
        ("America/New_York", "2025-03-09 07:00:00"),
        ("America/New_York", "2025-11-02 06:00:00"),
    ],
)
def test_an_hourly_job_fires_every_hour_once_across_a_change(zone: str, change: str) -> None:
    """Guards the real clock of ``0 * * * *``: across both changes each UTC hour
    fires once, none twice (the repeated hour) and none skipped (the gap)."""
    hours = [at(change) + timedelta(hours=n) for n in range(-3, 4)]
    expected = [hour.strftime("%Y-%m-%d %H:%M:%S") for hour in hours[1:]]
    assert fires(parse("0 * * * *", zone), str(hours[0])[:19], str(hours[-1])[:19]) == expected


def test_nine_in_lisbon_is_nine_utc_in_winter_and_eight_in_summer() -> None:
    """Guards that due times are read on the zone's wall clock, not UTC's."""
    cron = parse("0 9 * * *", "Europe/Lisbon")
    assert cron.next_after(at("2025-01-15 00:00:00")) == at("2025-01-15 09:00:00")
    assert cron.next_after(at("2025-07-15 00:00:00")) == at("2025-07-15 08:00:00")


def test_a_moment_in_the_second_pass_of_the_repeated_hour() -> None:
    """Guards the searches from a moment the wall clock shows a second time (01:15
    WET, after 01:30 WEST fired): ``next_after`` passes over what cronsim finds first
    (01:30 WEST, already past), and ``latest_at_or_before`` finds 01:30 WEST."""
    cron = parse("30 1 * * *", "Europe/Lisbon")
    moment = at("2025-10-26 01:15:00")
    assert cron.next_after(moment) == at("2025-10-27 01:30:00")
    assert cron.latest_at_or_before(moment) == at("2025-10-26 00:30:00")


@pytest.mark.parametrize(
    ("expression", "zone", "moment", "latest"),
    [
        # 02:00 (+10:30) becomes 02:30 (+11): cronsim's backward search, stepping an
        # hour of real time, passes over 01:40 (15:10 UTC) to 01:20.
        ("*/20 1 * * *", "Australia/Lord_Howe", "2025-10-04 16:00:00", "2025-10-04 15:10:00"),
        # 03:45 (+13:45) becomes 02:45 (+12:45): cronsim's backward search from
        # 03:05 never returns.
        ("0 */2 * * *", "Pacific/Chatham", "2025-04-05 13:20:00", "2025-04-05 12:15:00"),
    ],
)
def test_the_latest_due_time_where_cronsim_cannot_search_backwards(
    expression: str, zone: str, moment: str, latest: str
) -> None:
    """Guards ``latest_at_or_before``'s use of the forward search alone: with
    cronsim's backward search one answer is wrong and the other never comes (an
    alarm ends the wait after ten seconds)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("latest_at_or_before did not return")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        assert parse(expression, zone).latest_at_or_before(at(moment)) == at(latest)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_where_the_clocks_change_off_the_hour_cronsim_slips() -> None:
    """Guards the docs' word on cronsim's slips, so that a release that mends them is
    noticed. At Lord Howe Island 02:00 (+11) becomes 01:30 (+10:30): the six-field
    01:45:00 fires at 14:45 UTC, and at 15:15 only for a search started inside the
    repeated span. On the Chatham Islands 02:45 (+12:45) becomes 03:45 (+13:45):
    from 03:45:35, ``0 */2 * * *`` passes over 04:00 (14:15 UTC) to 06:00."""
    lord_howe = parse("0 45 1 * * *", "Australia/Lord_Howe")
    assert lord_howe.next_after(at("2025-04-05 14:45:00")) == at("2025-04-06 15:15:00")
    assert lord_howe.next_after(at("2025-04-05 15:00:00")) == at("2025-04-05 15:15:00")
    chatham = parse("0 */2 * * *", "Pacific/Chatham")
    assert chatham.next_after(at("2024-09-28 14:00:35")) == at("2024-09-28 16:15:00")
    assert chatham.next_after(at("2024-09-28 13:59:00")) == at("2024-09-28 14:15:00")


def test_six_fields_run_on_the_real_clock() -> None:
    """Guards the docs' word on six-field expressions: cronsim keeps Debian's rule to
    five fields, so 01:30:00 in Lisbon does not fire on the spring-forward day and
    fires twice on the fall-back day."""
    cron = parse("0 30 1 * * *", "Europe/Lisbon")
    assert fires(cron, "2025-03-29 00:00:00", "2025-04-01 00:00:00") == [
        "2025-03-29 01:30:00",
        "2025-03-31 00:30:00",
    ]
    assert fires(cron, "2025-10-26 00:00:00", "2025-10-27 00:00:00") == [
        "2025-10-26 00:30:00",
        "2025-10-26 01:30:00",
    ]


def test_the_seconds_field_comes_first() -> None:
    """Guards the six-field form: ``*/2 * * * * *`` fires every two seconds."""
    cron = parse("*/2 * * * * *", "UTC")
    assert fires(cron, "2025-01-01 00:00:00", "2025-01-01 00:00:08") == [
        "2025-01-01 00:00:02",
        "2025-01-01 00:00:04",
        "2025-01-01 00:00:06",
        "2025-01-01 00:00:08",
    ]


@pytest.mark.parametrize(
    ("shortcut", "spelled"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@DAILY", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_a_shortcut_fires_as_its_five_fields(shortcut: str, spelled: str) -> None:
    """Guards ``SHORTCUTS`` (cronsim refuses them): each fires when its spelling does."""
    start, end = "2025-01-01 00:30:00", "2027-01-01 00:00:00"
    cron = parse(shortcut, "Europe/Lisbon")
    assert cron.expression == shortcut
    assert fires(cron, start, end) == fires(parse(spelled, "Europe/Lisbon"), start, end)


@pytest.mark.parametrize(
    ("expression", "zone", "after", "gap"),
    [
        ("*/2 * * * * *", "UTC", "2025-01-01 00:00:00", timedelta(seconds=2)),
        ("0 9 * * 1-5", "Europe/Lisbon", "2025-01-03 12:00:00", timedelta(days=1)),
        # The spring-forward day is 23 hours long and 01:30 moves to 02:00.
        ("30 1 * * *", "Europe/Lisbon", "2025-03-20 00:00:00", timedelta(hours=23, minutes=30)),
        # A yearly one: its next two due times, the second past the year read.
        ("0 0 1 1 *", "UTC", "2025-01-02 00:00:00", timedelta(days=365)),
    ],
)
def test_the_shortest_gap_between_due_times(
    expression: str, zone: str, after: str, gap: timedelta
) -> None:
    """Guards ``shortest_gap``: the least of the intervals between the next due times,
    a daylight-saving day's short one included."""
    assert parse(expression, zone).shortest_gap(at(after)) == gap


def test_the_latest_due_time_of_a_due_time_is_itself() -> None:
    """Guards that ``latest_at_or_before`` includes its moment: a due time is its own
    latest, and a microsecond before it the latest is the one before."""
    cron = parse("0 9 * * 1-5", "America/New_York")
    due = cron.next_after(at("2025-06-01 00:00:00"))
    assert cron.latest_at_or_before(due) == due
    assert cron.latest_at_or_before(due - timedelta(microseconds=1)) == at("2025-05-30 13:00:00")


EXPRESSIONS = [
    "30 1 * * *",
    "30 2 * * *",
    "0,30 1-2 * * *",
    "*/20 1 * * *",
    "0 * * * *",
    "0 9 * * 1-5",
    "@daily",
    "15 30 1 * * *",
    "*/7 * * * * *",
]
ZONES = ["Europe/Lisbon", "America/New_York", "Australia/Lord_Howe", "UTC"]
CHANGES = [
    at(text)
    for text in (
        "2025-03-30 01:00:00",
        "2025-10-26 01:00:00",
        "2025-03-09 07:00:00",
        "2025-11-02 06:00:00",
        "2025-04-05 15:00:00",
        "2025-10-04 15:30:00",
    )
]
"""The 2025 changes of Lisbon, New York and Lord Howe (half an hour), in UTC."""
moments = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
) | st.builds(
    lambda change, offset: change + timedelta(microseconds=offset),
    st.sampled_from(CHANGES),
    st.integers(-3 * 3600 * 10**6, 3 * 3600 * 10**6),
)


@settings(max_examples=400, deadline=None)
@given(expression=st.sampled_from(EXPRESSIONS), zone=st.sampled_from(ZONES), moment=moments)
def test_no_due_time_falls_between_a_moment_and_the_next(
    expression: str, zone: str, moment: datetime
) -> None:
    """Guards that the forward and backward searches agree on one set of due times,
    near daylight-saving changes too: the next is after the moment, none lies between
    them, and the latest at or before the moment leads to the same next."""
    # Where cronsim's answer depends on the search's start: see
    # test_where_the_clocks_change_off_the_hour_cronsim_slips.
    assume(not (zone == "Australia/Lord_Howe" and expression == "15 30 1 * * *"))
    cron = parse(expression, zone)
    following = cron.next_after(moment)
    assert following > moment
    between = cron.latest_at_or_before(following - timedelta(microseconds=1))
    assert between is not None
    assert between <= moment
    assert cron.latest_at_or_before(following) == following
    assert cron.next_after(between) == following


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("0 " * 101, "must be at most 200 characters"),
        ("0\x00 0 * * *", "must hold only printable ASCII characters"),
        ("0\t0 * * *", "must hold only printable ASCII characters"),
        # A long s: upper-cased, as cronsim reads names, it is "SUN".
        ("0 0 * * \u017fun", "must hold only printable ASCII characters"),
        ("@reboot", "the shortcuts are @yearly, @monthly, @weekly, @daily and @hourly"),
        ("@every 5m", "the shortcuts are @yearly, @monthly, @weekly, @daily and @hourly"),
        (
            "* * * *",
            "must have 5 fields (minute hour day month weekday) or 6 (seconds first), not 4",
        ),
        (
            "0 0 1 1 * 2030 *",
            "must have 5 fields (minute hour day month weekday) or 6 (seconds first), not 7",
        ),
        ("60 * * * * *", "bad second field"),
        ("61 * * * *", "bad minute field"),
        ("* 24 * * *", "bad hour field"),
        ("0 0 30 2 *", "bad day-of-month field"),
        ("0 0 * 13 *", "bad month field"),
        ("0 0 * * 8", "bad day-of-week field"),
        # Days 1 and 21 when they are the month's last Monday (day 22 or later).
        ("0 0 */20 * 1L", "never fires: no date matches it"),
    ],
)
def test_parse_refuses_an_expression_saying_why(expression: str, message: str) -> None:
    """Guards each refusal of ``parse`` for the cron field and its words."""
    with pytest.raises(InvalidInputError) as refused:
        parse(expression, "Europe/Lisbon")
    assert (refused.value.field, refused.value.message) == ("cron", f"cron: {message}")


@pytest.mark.parametrize(
    "zone",
    [
        "",
        "../etc/passwd",
        "/etc/localtime",
        "Europe/../Europe/Lisbon",
        "localtime",
        "posixrules",
        "right/UTC",
        "posix/Europe/Lisbon",
        "zone.tab",
        "europe/lisbon",
        "Mars/Olympus_Mons",
        "Europe/Lisbon\x00",
    ],
)
def test_parse_refuses_what_is_not_an_iana_zone(zone: str) -> None:
    """Guards the zone check: paths, the machine's own zone, the leap-second copies
    (``right/``, seconds off) and files of the database that are not zones."""
    with pytest.raises(InvalidInputError) as refused:
        parse("0 9 * * *", zone)
    assert refused.value.field == "timezone"
    assert refused.value.message == (
        f"timezone: unknown time zone {zone!r}; use an IANA name such as Europe/Lisbon"
    )


def test_parse_keeps_what_it_was_given_stripped() -> None:
    """Guards the values a schedule stores: the expression stripped, the zone as given."""
    assert parse("  0 9 * * 1-5 \n", "UTC") == Cron("0 9 * * 1-5", "UTC")


FIELD_CHARACTERS = "0123456789*/,-#?LWMONTUESDAYJFBRPGCVH"
texts = st.lists(
    st.text(alphabet=FIELD_CHARACTERS, min_size=1, max_size=8), min_size=5, max_size=6
).map(" ".join) | st.text(alphabet=FIELD_CHARACTERS + "@ \t\x00é", max_size=30)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_parse_answers_any_text_with_a_cron_or_a_refusal(expression: str) -> None:
    """Guards that every refusal reaches the caller as ``InvalidInputError`` on the
    cron field (anything else would answer a client with an unexpected error), and
    that what ``parse`` takes has a next due time."""
    answer = parsed(expression, "America/New_York")
    if isinstance(answer, InvalidInputError):
        assert answer.field == "cron"
    else:
        assert answer.next_after(at("2025-01-01 00:00:00")) > at("2025-01-01 00:00:00")


def parsed(expression: str, zone: str) -> Cron | InvalidInputError:
    """What ``parse`` answers: a cron or its refusal."""
    try:
        return parse(expression, zone)
    except InvalidInputError as refused:
        return refused
