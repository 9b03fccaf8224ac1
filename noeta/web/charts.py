"""Throughput charts drawn on the server as SVG (no script, no chart library): a queue's
finished tasks per period as stacked bars, done under failed under cancelled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from noeta.core.ports.queue_settings import FinishedCount
from noeta.web.render import h

WIDTH, HEIGHT = 640, 140
TOP, BOTTOM, LEFT = 12, 22, 44  # room for the scale on the left and the times below
# Stacked from the bottom: (field of FinishedCount, CSS class, the word in a bar's title).
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
    per: str  # "per minute", "per hour"

    def first(self, now: datetime) -> datetime:
        """The first period's start: periods aligned on the epoch, as the store counts."""
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        current = (now - epoch) // timedelta(seconds=self.seconds)
        return epoch + timedelta(seconds=(current - self.periods + 1) * self.seconds)


WINDOWS = {
    "hour": Window("hour", 60, 60, "per minute"),
    "day": Window("day", 3600, 24, "per hour"),
}


def throughput_chart(
    queue: str, counts: Sequence[FinishedCount], window: Window, now: datetime
) -> str:
    """One queue's chart: a bar per period of `window`, empty periods as gaps."""
    first = window.first(now)
    slots: list[FinishedCount | None] = [None] * window.periods
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
    axis = (
        f'<line class="axis" x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH}"'
        f' y2="{HEIGHT - BOTTOM}"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{top}</text>'
        f'<text x="{LEFT - 4}" y="{HEIGHT - BOTTOM}" text-anchor="end">0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 6}">{h(first.strftime("%H:%M"))}</text>'
        f'<text x="{WIDTH}" y="{HEIGHT - 6}" text-anchor="end">'
        f"{h(now.astimezone(UTC).strftime('%H:%M'))}</text>"
    )
    return (
        f'<figure class="chart"><svg xmlns="http://www.w3.org/2000/svg" role="img"'
        f' viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
        f' aria-label="{h(label)}">{axis}{"".join(bars)}</svg>'
        f"<figcaption>{h(label)}</figcaption></figure>"
    )
