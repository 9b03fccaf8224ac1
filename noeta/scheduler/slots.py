"""When a cron schedule fires: its slots, as UTC instants, from the zone's wall-clock time.

The DST rule. A schedule reads the wall clock of its time zone. croniter walks NAIVE wall
times; each is mapped to UTC with `fold=0` (PEP 495):
- a wall time that happens twice when the clocks go back fires once, at its first
  occurrence;
- a wall time that never happens when the clocks go forward fires at that wall time read
  with the offset before the change (02:30 on the spring-forward day in Europe/Berlin is
  01:30 UTC, i.e. 03:30 CEST);
- wall times that map to the same UTC instant are one slot (`0 * * * *` fires once at
  03:00 CEST that day, not twice).
So no double fire when the clocks go back, and no silent skip when they go forward.

Because of those two rules the map from wall time to UTC is not monotonic near a change of
offset, so each walk starts and stops a little beyond its bounds: far enough to cover the
zone's largest offset change near the bound (see `_offsets_near`).
"""

from __future__ import annotations

import functools
import heapq
import os
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from noeta.core.errors import ConfigError

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
FIELDS = ("minute", "hour", "day of month", "month", "day of week")

# No UTC offset has ever been beyond ±16 hours (local mean times included), so a wall time
# maps to an instant within 16 hours of itself read as UTC.
_MAX_OFFSET = timedelta(hours=16)
# Wall times within 2 * _MAX_OFFSET of a slot's wall time map within 3 * _MAX_OFFSET of the
# slot; the offset before a change (used for skipped wall times) is one more back.
_REACH = 5 * _MAX_OFFSET
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")
_NAMES = re.compile(r"jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|sun|mon|tue|wed|thu|fri|sat")
# Hashed (H) and random (R) fields are croniter extensions whose slots are not a function
# of the expression alone; L, W, # and ? are kept (last day, nearest weekday, nth weekday).
_UNSUPPORTED = re.compile(r"[a-km-vx-z]")
_ONE_MINUTE = timedelta(minutes=1)


def expand(cron: str) -> str:
    """The 5-field expression for `cron` (aliases like @daily expanded); ConfigError if it
    is not one croniter can iterate deterministically."""
    expression = ALIASES.get(cron.strip(), cron)
    fields = expression.split()
    if len(fields) != len(FIELDS):
        raise ConfigError(
            f"{cron!r} has {len(fields)} fields; a cron expression has 5 "
            f"({', '.join(FIELDS)}) or is one of {', '.join(ALIASES)}"
        )
    for name, field in zip(FIELDS, fields, strict=True):
        if _UNSUPPORTED.search(_NAMES.sub("", field.lower())):
            raise ConfigError(f"{cron!r}: the {name} field {field!r} is not supported here")
    try:
        croniter(expression)
    except CroniterError as error:
        raise ConfigError(f"{cron!r} is not a valid cron expression: {error}") from None
    return expression


# Zone files that name no zone but whatever the host is set to.
_HOST_DEPENDENT = ("localtime", "local", "posixrules", "factory")


def _host_zone_hint() -> str:
    """`, e.g. Europe/Berlin (this host's)` when /etc/localtime says which zone it is."""
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        return ", e.g. Europe/Berlin"
    _, found, name = target.partition("zoneinfo/")
    return f", e.g. {name} (this host's)" if found and name else ", e.g. Europe/Berlin"


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; ConfigError if there is none (or it looks like a path)."""
    if not _ZONE_NAME.fullmatch(name) or len(name) > 100:
        raise ConfigError(f"{name!r} is not a time zone name (like UTC or Europe/Berlin)")
    if name.lower() in _HOST_DEPENDENT:
        raise ConfigError(
            f"{name!r} is each host's own zone, so schedulers on two hosts would fire at "
            f"different times: name the zone{_host_zone_hint()}"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(
            f"unknown time zone {name!r} (use an IANA name like Europe/Berlin)"
        ) from None


def slots_between(
    cron: str, timezone: str, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """The last `limit` slots s with after < s <= until, ascending, as aware UTC datetimes.

    Walks backwards from `until`, so a long gap costs no more than `limit` slots.
    """
    _check_aware(after, until)
    tz = zone(timezone)
    after, until = after.astimezone(UTC), until.astimezone(UTC)
    if limit < 1 or until <= after:
        return []
    # No wall time later than `until` read with the zone's highest offset nearby can map to
    # `until` or before; a minute on, because croniter's get_prev is strictly before.
    start = _wall(until + _offsets_near(tz, until)[1])
    walk = croniter(expand(cron), start + _ONE_MINUTE)
    latest: list[datetime] = []  # a min-heap of the latest `limit` distinct slots
    while True:
        try:
            wall: datetime = walk.get_prev(datetime)
        except CroniterBadDateError:
            break
        slot = _instant(wall, tz)
        if after < slot <= until and slot not in latest:
            if len(latest) < limit:
                heapq.heappush(latest, slot)
            elif slot > latest[0]:
                heapq.heapreplace(latest, slot)
        floor = latest[0] if len(latest) == limit else after
        # Earlier wall times map before this one minus the lowest offset nearby (and those
        # further back than the reach of any offset map before this slot): once that is at
        # or below the floor, nothing earlier can enter the result.
        if slot <= floor and _utc(wall) - _offsets_near(tz, slot)[0] <= floor:
            break
    return sorted(latest)


def next_slot(cron: str, timezone: str, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, as an aware UTC datetime; None if it never
    fires (croniter finds no date within 50 years)."""
    _check_aware(after)
    tz = zone(timezone)
    after = after.astimezone(UTC)
    # No wall time before `after` read with the zone's lowest offset nearby can map after it.
    start = _wall(after + _offsets_near(tz, after)[0])
    walk = croniter(expand(cron), start - _ONE_MINUTE)
    best: datetime | None = None
    while True:
        try:
            wall: datetime = walk.get_next(datetime)
        except CroniterBadDateError:
            return best
        slot = _instant(wall, tz)
        if slot > after and (best is None or slot < best):
            best = slot
        # Later wall times map after this one minus the highest offset nearby.
        if best is not None and slot >= best and _utc(wall) - _offsets_near(tz, slot)[1] >= best:
            return best


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of a naive wall time in `tz` by the DST rule (fold=0)."""
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


def _wall(instant: datetime) -> datetime:
    """A UTC instant as a naive datetime (to add an offset to, and hand to croniter)."""
    return instant.astimezone(UTC).replace(tzinfo=None)


def _utc(wall: datetime) -> datetime:
    """A naive wall time read as if it were UTC (to compare with instants)."""
    return wall.replace(tzinfo=UTC)


def _offsets_near(tz: ZoneInfo, instant: datetime) -> tuple[timedelta, timedelta]:
    """The lowest and highest UTC offset `tz` has within `_REACH` of `instant`: every
    offset a wall time within two `_MAX_OFFSET` of the instant's wall time can be read with
    (looked at every hour; no offset has ever lasted less than one)."""
    hour = int(instant.timestamp()) // 3600
    reach = int(_REACH.total_seconds()) // 3600
    offsets = [_offset_at(tz, at) for at in range(hour - reach, hour + reach + 1)]
    return min(offsets), max(offsets)


@functools.lru_cache(maxsize=4096)
def _offset_at(tz: ZoneInfo, hour: int) -> timedelta:
    offset = datetime.fromtimestamp(hour * 3600, UTC).astimezone(tz).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset


def _check_aware(*instants: datetime) -> None:
    for instant in instants:
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise ValueError(f"{instant!r} is naive; slots are computed for aware datetimes")
