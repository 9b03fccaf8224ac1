"""Slots in UTC from wall-clock cron schedules: the DST rule on real transition days, the
backwards walk over long gaps, and a brute-force cross-check around offset changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from noeta.core.errors import ConfigError
from noeta.scheduler.slots import expand, next_slot, slots_between, zone


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def hours(cron: str, timezone: str, after: datetime, until: datetime) -> list[str]:
    """The slots as UTC HH:MM, for readable expectations."""
    return [slot.strftime("%H:%M") for slot in slots_between(cron, timezone, after, until, 1000)]


# Europe/Berlin: 2025-03-30 02:00 CET -> 03:00 CEST (01:00 UTC);
#                2025-10-26 03:00 CEST -> 02:00 CET (01:00 UTC).
BERLIN_SPRING = (utc(2025, 3, 29, 22), utc(2025, 3, 30, 4))
BERLIN_FALL = (utc(2025, 10, 25, 21), utc(2025, 10, 26, 4))
# America/New_York: 2025-03-09 02:00 EST -> 03:00 EDT (07:00 UTC);
#                   2025-11-02 02:00 EDT -> 01:00 EST (06:00 UTC).
NEW_YORK_SPRING = (utc(2025, 3, 9, 4), utc(2025, 3, 9, 10))
NEW_YORK_FALL = (utc(2025, 11, 2, 3), utc(2025, 11, 2, 9))


def test_a_skipped_wall_time_fires_at_that_time_read_with_the_old_offset() -> None:
    # 02:30 does not exist in Berlin that day: it fires at 01:30 UTC (03:30 CEST).
    assert hours("30 2 * * *", "Europe/Berlin", *BERLIN_SPRING) == ["01:30"]
    # In New York 02:30 EST would be 07:30 UTC (03:30 EDT).
    assert hours("30 2 * * *", "America/New_York", *NEW_YORK_SPRING) == ["07:30"]


def test_hourly_fires_once_per_utc_hour_across_spring_forward() -> None:
    # 02:00 (skipped) and 03:00 CEST are the same instant: one slot, not two.
    assert hours("0 * * * *", "Europe/Berlin", *BERLIN_SPRING) == [
        "23:00",
        "00:00",
        "01:00",
        "02:00",
        "03:00",
        "04:00",
    ]
    assert hours("0 * * * *", "America/New_York", *NEW_YORK_SPRING) == [
        "05:00",
        "06:00",
        "07:00",
        "08:00",
        "09:00",
        "10:00",
    ]


def test_quarter_hours_have_no_hole_and_no_duplicate_across_spring_forward() -> None:
    slots = slots_between("*/15 * * * *", "Europe/Berlin", *BERLIN_SPRING, limit=1000)
    assert slots == [BERLIN_SPRING[0] + timedelta(minutes=15 * n) for n in range(1, 25)]
    slots = slots_between("*/15 * * * *", "America/New_York", *NEW_YORK_SPRING, limit=1000)
    assert slots == [NEW_YORK_SPRING[0] + timedelta(minutes=15 * n) for n in range(1, 25)]


def test_a_repeated_wall_time_fires_once_at_its_first_occurrence() -> None:
    # Berlin's 02:30 happens at 00:30 UTC (CEST) and again at 01:30 UTC (CET).
    assert hours("30 2 * * *", "Europe/Berlin", *BERLIN_FALL) == ["00:30"]
    # New York's 01:30 happens at 05:30 UTC (EDT) and again at 06:30 UTC (EST).
    assert hours("30 1 * * *", "America/New_York", *NEW_YORK_FALL) == ["05:30"]


def test_hourly_skips_the_repeated_hour_when_clocks_go_back() -> None:
    assert hours("0 * * * *", "Europe/Berlin", *BERLIN_FALL) == [
        "22:00",
        "23:00",
        "00:00",
        "02:00",
        "03:00",
        "04:00",
    ]
    assert hours("0 * * * *", "America/New_York", *NEW_YORK_FALL) == [
        "04:00",
        "05:00",
        "07:00",
        "08:00",
        "09:00",
    ]


def test_quarter_hours_do_not_repeat_when_clocks_go_back() -> None:
    slots = slots_between("*/15 * * * *", "Europe/Berlin", *BERLIN_FALL, limit=1000)
    assert len(slots) == len(set(slots))
    assert utc(2025, 10, 26, 0, 45) in slots and utc(2025, 10, 26, 2) in slots
    assert not [slot for slot in slots if utc(2025, 10, 26, 1) <= slot < utc(2025, 10, 26, 2)]
    # An `until` inside the repeated hour still sees the first pass, walked from later wall
    # times (02:45 CEST is 00:45 UTC, before until = 01:30 UTC = 02:30 CET).
    until = utc(2025, 10, 26, 1, 30)
    assert hours("*/15 * * * *", "Europe/Berlin", utc(2025, 10, 26, 0), until) == [
        "00:15",
        "00:30",
        "00:45",
    ]


def test_wall_order_is_not_utc_order_after_a_half_hour_spring_forward() -> None:
    # Lord Howe Island, 2025-10-05: 02:00 (+10:30) -> 02:30 (+11:00), at 15:30 UTC. The
    # skipped 02:15 is read with +10:30 (15:45 UTC); the later 02:30 is 15:30 UTC.
    after, until = utc(2025, 10, 4, 12), utc(2025, 10, 4, 16)
    cron, lord_howe = "15,30 2 * * *", "Australia/Lord_Howe"
    assert slots_between(cron, lord_howe, after, until, 1) == [utc(2025, 10, 4, 15, 45)]
    assert hours(cron, lord_howe, after, until) == ["15:30", "15:45"]
    assert next_slot(cron, lord_howe, after) == utc(2025, 10, 4, 15, 30)
    assert next_slot(cron, lord_howe, utc(2025, 10, 4, 15, 35)) == utc(2025, 10, 4, 15, 45)


def test_a_year_of_a_per_minute_schedule_returns_only_the_latest_slots() -> None:
    after, until = utc(2024, 6, 1), utc(2025, 6, 1, 0, 0, 30)
    slots = slots_between("* * * * *", "Europe/Berlin", after, until, limit=10)
    assert slots == [utc(2025, 5, 31, 23, 51) + timedelta(minutes=n) for n in range(10)]


def test_the_limit_keeps_the_latest_slots_in_ascending_order() -> None:
    slots = slots_between("0 * * * *", "UTC", utc(2025, 1, 1), utc(2025, 1, 2), limit=3)
    assert slots == [utc(2025, 1, 1, 22), utc(2025, 1, 1, 23), utc(2025, 1, 2)]


def test_bounds_are_after_exclusive_and_until_inclusive_in_utc() -> None:
    slots = slots_between("*/15 * * * *", "UTC", utc(2025, 1, 1, 12), utc(2025, 1, 1, 13), 100)
    assert slots == [utc(2025, 1, 1, 12, 15 * n) for n in (1, 2, 3)] + [utc(2025, 1, 1, 13)]
    assert all(slot.tzinfo is UTC for slot in slots)


def test_bounds_in_other_zones_are_the_same_instants() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    after = utc(2025, 1, 1, 12).astimezone(berlin)
    until = utc(2025, 1, 1, 13).astimezone(berlin)
    assert hours("0 * * * *", "UTC", after, until) == ["13:00"]


def test_nothing_when_the_range_is_empty_or_the_limit_is_zero() -> None:
    assert slots_between("* * * * *", "UTC", utc(2025, 1, 2), utc(2025, 1, 1), 10) == []
    assert slots_between("* * * * *", "UTC", utc(2025, 1, 1), utc(2025, 1, 2), 0) == []


def test_aliases_give_the_same_slots_as_their_expressions() -> None:
    after, until = utc(2025, 1, 1), utc(2025, 3, 1)
    assert slots_between("@daily", "UTC", after, until, 100) == slots_between(
        "0 0 * * *", "UTC", after, until, 100
    )
    assert slots_between("@monthly", "Asia/Tokyo", after, until, 100) == [
        utc(2025, 1, 31, 15),
        utc(2025, 2, 28, 15),
    ]


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        slots_between("* * * * *", "UTC", datetime(2025, 1, 1), utc(2025, 1, 2), 1)
    with pytest.raises(ValueError, match="naive"):
        next_slot("* * * * *", "UTC", datetime(2025, 1, 1))


def test_next_slot_is_strictly_after_and_follows_the_dst_rule() -> None:
    assert next_slot("0 * * * *", "UTC", utc(2025, 1, 1, 12)) == utc(2025, 1, 1, 13)
    assert next_slot("30 2 * * *", "Europe/Berlin", utc(2025, 3, 30)) == utc(2025, 3, 30, 1, 30)
    # From inside Berlin's repeated hour, the next 02:30 is tomorrow's.
    assert next_slot("30 2 * * *", "Europe/Berlin", utc(2025, 10, 26, 1)) == utc(
        2025, 10, 27, 1, 30
    )
    assert next_slot("0 * * * *", "Europe/Berlin", utc(2025, 10, 26, 0, 30)) == utc(2025, 10, 26, 2)


def test_next_slot_is_none_for_a_schedule_that_never_fires() -> None:
    assert next_slot("0 0 31 2 *", "UTC", utc(2025, 1, 1)) is None
    assert slots_between("0 0 30 2 *", "UTC", utc(2024, 1, 1), utc(2025, 1, 1), 5) == []


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("* * * *", "has 4 fields"),
        ("0 * * * * *", "has 6 fields"),
        ("@reboot", "has 1 fields"),
        ("@DAILY", "has 1 fields"),
        ("60 * * * *", "not a valid cron expression"),
        ("0 24 * * *", "not a valid cron expression"),
        ("*/0 * * * *", "not a valid cron expression"),
        ("0 0 * foo *", "not supported"),
        ("H * * * *", "the minute field 'H' is not supported"),
        ("R 0 * * *", "not supported"),
    ],
)
def test_bad_expressions_are_config_errors(cron: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        expand(cron)


def test_aliases_names_and_extensions_expand() -> None:
    assert expand("@hourly") == "0 * * * *"
    assert expand(" @annually ") == "0 0 1 1 *"
    assert expand("0 9 * jan-mar mon-fri") == "0 9 * jan-mar mon-fri"
    assert expand("0 0 L * *") == "0 0 L * *"


@pytest.mark.parametrize(
    "name", ["../../etc/passwd", "/usr/share/zoneinfo/UTC", "Europe/../UTC", "", "Mars/Olympus"]
)
def test_bad_time_zones_are_config_errors(name: str) -> None:
    with pytest.raises(ConfigError, match="time zone"):
        zone(name)


def reference(cron: str, timezone: str, after: datetime, until: datetime) -> list[datetime]:
    """Every slot in (after, until], by a forward walk over two days more on each side."""
    tz = ZoneInfo(timezone)
    walk = croniter(expand(cron), (after - timedelta(days=2)).replace(tzinfo=None))
    end = (until + timedelta(days=2)).replace(tzinfo=None)
    found = set()
    while (wall := walk.get_next(datetime)) <= end:
        slot = wall.replace(tzinfo=tz).astimezone(UTC)
        if after < slot <= until:
            found.add(slot)
    return sorted(found)


TRANSITIONS = [
    ("Europe/Berlin", utc(2025, 3, 30, 1)),
    ("Europe/Berlin", utc(2025, 10, 26, 1)),
    ("America/New_York", utc(2025, 3, 9, 7)),
    ("America/New_York", utc(2025, 11, 2, 6)),
    ("Australia/Lord_Howe", utc(2025, 4, 5, 15)),  # 30-minute changes
    ("Australia/Lord_Howe", utc(2025, 10, 4, 15, 30)),
    ("Pacific/Apia", utc(2011, 12, 30, 10)),  # Samoa skipped 30 December 2011 entirely
    ("UTC", utc(2025, 1, 1)),
]


@settings(max_examples=60, deadline=None)
@given(
    transition=st.sampled_from(TRANSITIONS),
    cron=st.sampled_from(
        [
            "*/5 * * * *",
            "0 * * * *",
            "30 2 * * *",
            "15,30 2 * * *",
            "15,45 0-3 * * *",
            "0 0 * * *",
            "10 */6 * * *",
        ]
    ),
    start=st.integers(min_value=-36 * 60, max_value=12 * 60),
    length=st.integers(min_value=0, max_value=40 * 60),
    limit=st.integers(min_value=1, max_value=40),
)
def test_slots_match_a_brute_force_walk_around_offset_changes(
    transition: tuple[str, datetime], cron: str, start: int, length: int, limit: int
) -> None:
    timezone, instant = transition
    after = instant + timedelta(minutes=start)
    until = after + timedelta(minutes=length)
    expected = reference(cron, timezone, after, until)
    assert slots_between(cron, timezone, after, until, limit) == expected[-limit:]
    first = reference(cron, timezone, after, after + timedelta(days=2))
    assert next_slot(cron, timezone, after) == (first[0] if first else None)
