"""HTML on the server without a template engine (ADR-0070): the page layout (a
`string.Template` shipped beside this module) and the small pieces every page is built
of. Every value that reaches HTML goes through `h`: escaped, and scrubbed of the secrets
this process knows, whatever its source (a task id, a prompt, a tool's output)."""

from __future__ import annotations

import html
from collections.abc import Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from importlib import resources
from string import Template
from urllib.parse import quote, urlencode

from noeta.redaction import Scrubber, ScrubWindow

# A value longer than this is folded (<details>): the page shows its first line.
FOLD_CHARS = 400
# A value longer than this is cut on the page itself; the rest is behind "show raw".
CUT_CHARS = 20_000

_LAYOUT = Template(
    resources.files("noeta.web").joinpath("static", "layout.html").read_text(encoding="utf-8")
)
_scrub = Scrubber()
_scrub.add_environment()
# Said on every page of one request, after its own status line: the read replica's lag.
status_note: ContextVar[str] = ContextVar("status_note", default="")


def forget_secret(secret: str) -> None:
    """Also scrub `secret` (the web token, the store's password) from every page."""
    _scrub.add(secret)


def scrubbed(text: str) -> str:
    """`text` without the secrets this process knows (for raw text, not HTML)."""
    return _scrub(text)


def piece_scrubber() -> ScrubWindow:
    """For text that arrives in pieces (a streamed reply): a secret split across two
    pieces is caught too, with the secrets `scrubbed` knows."""
    return ScrubWindow(_scrub)


def h(value: object) -> str:
    """`value` as HTML text: scrubbed, then escaped (quotes too: safe in attributes)."""
    return html.escape(_scrub(str(value)), quote=True)


def url(path: str, **query: object) -> str:
    """A path with its query, each part percent-encoded; None values are left out."""
    given = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    encoded = quote(path, safe="/")
    return f"{encoded}?{urlencode(given)}" if given else encoded


def page(title: str, body: str, *, status_line: str = "", live: str = "") -> str:
    """A whole page: the layout with its title, navigation and `body` (HTML already)."""
    if note := status_note.get():
        status_line += f' <span class="replica" id="replica">{h(note)}</span>'
    return _LAYOUT.substitute(title=h(title), body=body, status_line=status_line, live=live)


def utc(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def clock_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]


def table(headings: Iterable[str], rows: Iterable[Iterable[str]], *, css: str = "") -> str:
    """A table of cells that are HTML already (escape with `h` where they are text)."""
    head = "".join(f"<th>{h(heading)}</th>" for heading in headings)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{h(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def link(href: str, text: object, *, css: str = "") -> str:
    extra = f' class="{h(css)}"' if css else ""
    return f'<a href="{h(href)}"{extra}>{h(text)}</a>'


def status_badge(status: str) -> str:
    return f'<span class="status status-{h(status)}">{h(status)}</span>'


def folded(text: str, *, raw: str = "", size: int | None = None) -> str:
    """A value, folded when long; cut past CUT_CHARS with a link to all of it (`raw`)."""
    total = len(text) if size is None else size
    shown = text[:CUT_CHARS]
    cut = ""
    if total > len(shown) and raw:
        cut = f'<p class="cut">{h(f"{total:,} characters; the rest is not on this page")} · '
        cut += f"{link(raw, 'show raw')}</p>"
    if total <= FOLD_CHARS and not cut:
        return f"<pre>{h(shown)}</pre>"
    first = shown.split("\n", 1)[0][:120]
    summary = h(f"{first}… ({total:,} characters)")
    return f"<details><summary>{summary}</summary><pre>{h(shown)}</pre>{cut}</details>"


def form(action: str, csrf: str, fields: str, button: str, *, css: str = "") -> str:
    """A POST form carrying its CSRF token (see `security.CsrfTokens`)."""
    return (
        f'<form method="post" action="{h(action)}" class="{h(css)}">'
        f'<input type="hidden" name="csrf" value="{h(csrf)}">{fields}'
        f'<button type="submit">{h(button)}</button></form>'
    )
