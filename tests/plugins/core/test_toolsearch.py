"""ToolSearch ranks deferred tools: name words first, then description words."""

from __future__ import annotations

import pytest

from noeta.core.ports.model import ToolSpec
from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import ToolSearch

DEFERRED = [
    ToolSpec("mcp__github__list_issues", "List the issues of a GitHub repository.", {}),
    ToolSpec("mcp__github__create_issue", "Open a new issue in a GitHub repository.", {}),
    ToolSpec("mcp__slack__send_message", "Send a message to a Slack channel.", {}),
    ToolSpec("NotebookEdit", "Edit a cell of a Jupyter notebook.", {}),
    ToolSpec("mcp__jira__createTicket", "Create a ticket; like an issue, in Jira.", {}),
]


def names(content: str) -> list[str]:
    return [line.split(":", 1)[0] for line in content.splitlines()[1:]]


async def test_best_matches_come_first(ctx: ToolContext) -> None:
    output = await ToolSearch(DEFERRED).run({"query": "create issue"}, ctx)
    assert names(output.content) == [
        "mcp__github__create_issue",  # both words in its name
        "mcp__jira__createTicket",  # 'create' in its name, 'issue' in its description
        "mcp__github__list_issues",  # 'issue' only as part of its name
    ]
    assert output.content.splitlines()[1] == (
        "mcp__github__create_issue: Open a new issue in a GitHub repository."
    )


async def test_exact_name_wins(ctx: ToolContext) -> None:
    output = await ToolSearch(DEFERRED).run({"query": "notebookedit"}, ctx)
    assert names(output.content) == ["NotebookEdit"]
    edit = await ToolSearch(DEFERRED).run({"query": "edit"}, ctx)
    assert names(edit.content)[0] == "NotebookEdit"


async def test_max_results(ctx: ToolContext) -> None:
    output = await ToolSearch(DEFERRED).run({"query": "github", "max_results": 1}, ctx)
    assert output.content.splitlines()[0] == "1 tool matches 'github', best first:"
    assert names(output.content) == ["mcp__github__create_issue"]  # a tie: name order


async def test_no_match_and_no_deferred_tools(ctx: ToolContext) -> None:
    none = await ToolSearch(DEFERRED).run({"query": "kubernetes"}, ctx)
    assert none.content == "No deferred tools match 'kubernetes'."
    empty = await ToolSearch().run({"query": "anything"}, ctx)
    assert empty.content == "No deferred tools are available."


@pytest.mark.parametrize(
    ("query", "reason"),
    [({"query": "!!"}, "no words"), ({"query": "x", "max_results": 0}, "at least 1")],
)
async def test_bad_queries(query: dict[str, str | int], reason: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=reason):
        await ToolSearch(DEFERRED).run(dict(query), ctx)
