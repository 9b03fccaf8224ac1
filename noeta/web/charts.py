"""Charts drawn on the server as SVG (no script, no chart library): a queue's finished
tasks per period as stacked bars, done under failed under cancelled, and its unfinished
tasks at each period's end as a line; any figures per period as stacked bars (costs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from noeta.core.ports.queue_settings import QueueActivity
from noeta.web.render import h

WIDTH, HEIGHT = 640, 140
TOP, BOTTOM, LEFT = 12, 22, 44  # room for the scale on the left and the times below
# Stacked from the bottom: (field of QueueActivity, CSS class, the word in a bar's title).
PARTS = (
    ("done", "bar-done", "done"),
    ("failed", "bar-failed", "failed"),
    ("cancelled", "bar-cancelled", "cancelled"),
)


@dataclass(frozen=True, slots=True)
class Window:
    """The periods a chart shows: `periods` of `seconds` each, the last one holding now."""

    name: str  # what the page's range is called: "hour" or "day"
    seconds: int
    periods: int
    unit: str  # what one period is: "minute", "hour"

    @property
    def per(self) -> str:
        return f"per {self.unit}"

    def first(self, now: datetime) -> datetime:
        """The first period's start: periods aligned on the epoch, as the store counts."""
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        current = (now - epoch) // timedelta(seconds=self.seconds)
        return epoch + timedelta(seconds=(current - self.periods + 1) * self.seconds)


WINDOWS = {
    "hour": Window("hour", 60, 60, "minute"),
    "day": Window("day", 3600, 24, "hour"),
}


def throughput_chart(
    queue: str, counts: Sequence[QueueActivity], window: Window, now: datetime
) -> str:
    """One queue's chart: a bar per period of `window`, empty periods as gaps."""
    first = window.first(now)
    slots: list[QueueActivity | None] = [None] * window.periods
    for found in counts:
        index = (found.start - first) // timedelta(seconds=window.seconds)
        if 0 <= index < window.periods:
            slots[index] = found
    totals = [0 if c is None else c.done + c.failed + c.cancelled for c in slots]
    top = max(totals, default=0) or 1
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - TOP - BOTTOM
    step = plot_width / window.periods
    bars = []
    for index, count in enumerate(slots):
        if count is None:
            continue
        x, base = LEFT + index * step, HEIGHT - BOTTOM
        start = (first + timedelta(seconds=index * window.seconds)).strftime("%H:%M")
        said = ", ".join(f"{getattr(count, field)} {word}" for field, _, word in PARTS)
        for field, css, _ in PARTS:
            value = getattr(count, field)
            if not value:
                continue
            tall = plot_height * value / top
            base -= tall
            bars.append(
                f'<rect class="{css}" x="{x:.1f}" y="{base:.1f}" width="{max(step - 1, 1):.1f}"'
                f' height="{tall:.1f}"><title>{h(f"{start} UTC: {said}")}</title></rect>'
            )
    total = sum(totals)
    label = f"{queue}: {total:,} finished in the last {window.name}, {window.per} (UTC)"
    axis = _axis(top, first, now)
    return _figure("chart", label, axis + "".join(bars))


def depth_chart(queue: str, ends: Sequence[int], window: Window, now: datetime) -> str:
    """One queue's unfinished tasks at the end of each period of `window`, as a line."""
    first = window.first(now)
    top = max(ends, default=0) or 1
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - TOP - BOTTOM
    step = plot_width / window.periods
    points, marks = [], []
    for index, value in enumerate(ends):
        x = LEFT + (index + 1) * step
        y = HEIGHT - BOTTOM - plot_height * value / top
        points.append(f"{x:.1f},{y:.1f}")
        end = first + timedelta(seconds=(index + 1) * window.seconds)
        at = "now" if index == len(ends) - 1 else f"{end.strftime('%H:%M')} UTC"
        marks.append(
            f'<circle class="depth" cx="{x:.1f}" cy="{y:.1f}" r="2">'
            f"<title>{h(f'{at}: {value} unfinished')}</title></circle>"
        )
    now_count = ends[-1] if ends else 0
    label = f"{queue}: {now_count:,} unfinished now; at the end of each {window.unit}"
    axis = _axis(top, first, now)
    line = f'<polyline class="depth" points="{" ".join(points)}"/>'
    return _figure("chart depth", label, axis + line + "".join(marks))


@dataclass(frozen=True, slots=True)
class Series:
    """One part of a stacked bar chart: its CSS class, its name, a figure per period."""

    css: str
    name: str
    values: Sequence[float]


def stacked_bars(
    label: str,
    periods: Sequence[str],
    series: Sequence[Series],
    scale: Callable[[float], str],
    notes: Sequence[str] = (),
) -> str:
    """A bar per period (`periods` names each), `series` stacked from the bottom; the
    figures written by `scale`; `notes`, if given, add to each period's title."""
    totals = [sum(part.values[index] for part in series) for index in range(len(periods))]
    top = max(totals, default=0.0) or 1.0
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - TOP - BOTTOM
    step = plot_width / max(len(periods), 1)
    bars = []
    for index, period in enumerate(periods):
        x, base = LEFT + index * step, float(HEIGHT - BOTTOM)
        said = ", ".join(f"{part.name} {scale(part.values[index])}" for part in series)
        note = notes[index] if index < len(notes) else ""
        title = h(f"{period}: {scale(totals[index])} ({said}){note}")
        for part in series:
            value = part.values[index]
            if not value:
                continue
            tall = plot_height * value / top
            base -= tall
            bars.append(
                f'<rect class="{h(part.css)}" x="{x:.1f}" y="{base:.1f}"'
                f' width="{max(step - 1, 1):.1f}" height="{tall:.1f}"><title>{title}</title></rect>'
            )
    axis = (
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH}"'
        f' y2="{HEIGHT - BOTTOM}"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{h(scale(top))}</text>'
        f'<text x="{LEFT - 4}" y="{HEIGHT - BOTTOM}" text-anchor="end">0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 6}">{h(periods[0] if periods else "")}</text>'
        f'<text x="{WIDTH}" y="{HEIGHT - 6}" text-anchor="end">'
        f"{h(periods[-1] if periods else '')}</text>"
    )
    return _figure("chart", label, axis + "".join(bars))


def _axis(top: int, first: datetime, now: datetime) -> str:
    """The baseline, the scale (0 and `top`) and the first and last times."""
    return (
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH}"'
        f' y2="{HEIGHT - BOTTOM}"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{top}</text>'
        f'<text x="{LEFT - 4}" y="{HEIGHT - BOTTOM}" text-anchor="end">0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 6}">{h(first.strftime("%H:%M"))}</text>'
        f'<text x="{WIDTH}" y="{HEIGHT - 6}" text-anchor="end">'
        f"{h(now.astimezone(UTC).strftime('%H:%M'))}</text>"
    )


def _figure(css: str, label: str, drawn: str) -> str:
    return (
        f'<figure class="{css}"><svg xmlns="http://www.w3.org/2000/svg" role="img"'
        f' viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
        f' aria-label="{h(label)}">{drawn}</svg><figcaption>{h(label)}</figcaption></figure>'
    )
