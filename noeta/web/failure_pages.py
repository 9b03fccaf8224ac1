"""The failures page (issue 31, issue 33 item 2: dead letters): every failed task grouped
by error kind, kind (agent or the job's function) and queue, with counts and the first
and last seen, from the search index once it is built (ADR-0112; the newest failures
until then, or when asked for); each group links to its tasks, and to retrying or
pruning them all (the bulk pages: a count to confirm first, then batches)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.core.ports.store_views import AGENT, FAILURES_GROUPED, MAX_FAILURES, FailureGroup
from noeta.web.list_filters import checked
from noeta.web.render import h, link, page, table, url, utc
from noeta.web.site import PageError, Site

GROUPINGS = ("error",)  # what group-by takes: the CLI's --group-by
HEADINGS = ["count", "error", "kind", "queue", "first seen", "last seen", "act on the group"]
BUILDING_NOTE = (
    "the index of failures (the search's) is being built: until it is done, the newest "
    "failures are grouped; every failure once it is"
)
AGENT_NOTE = (
    "An agent task's group is selected by its error kind and queue: a job that ended with "
    "the same kind of error in that queue is counted with it on the confirmation page."
)


async def failures_page(site: Site, request: Request) -> HTMLResponse:
    grouping = request.query_params.get("group-by") or "error"
    if grouping not in GROUPINGS:
        said = ", ".join(GROUPINGS)
        raise PageError(400, f"failures cannot be grouped by {grouping[:40]!r}: only by {said}")
    queue = checked("queue", request.query_params.get("queue") or None)
    asked = request.query_params.get("newest") or None
    newest = _newest(asked)
    # Every failure once the index holds them (it is filled by writing: on the primary).
    indexed = asked is None and await site.search_index.before_search(
        await site.views(primary=True)
    )
    views = await site.views()
    groups = await views.failure_groups(queue=queue, cap=None if indexed else newest)
    where = f" of queue {queue}" if queue else ""
    if not groups:
        body = f'<p class="muted" id="failures">no failed task{h(where)}</p>'
        return HTMLResponse(page("Failures", body))
    total = sum(group.count for group in groups)
    said = f"{total:,} failed tasks{where} by error kind, kind and queue, the largest group first"
    building = ""
    if not indexed and total >= newest:
        said = f"the newest {newest:,} failed tasks{where}, by error kind, kind and queue"
        building = "" if asked else f'<p class="muted notice">{h(BUILDING_NOTE)}</p>'
        wider = url("/failures", queue=queue, newest=min(MAX_FAILURES, newest * 10))
        said_more = (
            f" ({link(wider, 'read more of them')}: slower)" if newest < MAX_FAILURES else ""
        )
    else:
        said_more = ""
    body = (
        f'<p class="muted">{h(said)}{said_more}</p>'
        + table(HEADINGS, [_row(group) for group in groups], css="failures")
        + f'<p class="muted">{h(AGENT_NOTE)}</p>'
        + building
    )
    return HTMLResponse(page("Failures", f'<div id="failures">{body}</div>'))


def _newest(text: str | None) -> int:
    """How many of the newest failures to group (`newest=`), FAILURES_GROUPED unless given."""
    if text is None:
        return FAILURES_GROUPED
    if not text.isdigit() or not 1 <= int(text) <= MAX_FAILURES:
        raise PageError(
            400, f"newest is a number of failures, 1 to {MAX_FAILURES:,}: not {text[:20]!r}"
        )
    return int(text)


def _row(group: FailureGroup) -> list[str]:
    chosen = {
        "status": "failed",
        "queue": group.queue,
        "name": None if group.kind == AGENT else group.kind,
        "error": group.error_kind or None,
    }
    tasks = link(url("/tasks", **chosen), "tasks")
    actions = [tasks]
    if group.error_kind:  # without a kind to select by, the list is wider than the group
        actions.append(link(url("/bulk/retry", **chosen), "retry all", css="button bulk-retry"))
        actions.append(link(url("/bulk/prune", **chosen), "discard all", css="button bulk-prune"))
    return [
        link(url("/tasks", **chosen), f"{group.count:,}"),
        h(group.error_kind or "-"),
        h(group.kind),
        h(group.queue),
        h(utc(group.first_at)),
        h(utc(group.last_at)),
        " ".join(actions),
    ]
