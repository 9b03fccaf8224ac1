"""ToolSearch: finding, by keyword, tools that are available but not loaded up front.

Deferred tools (large MCP servers, say) would cost context on every model call; the model
sees only their names and descriptions here, ranked, and asks for the ones it needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from noeta.core.ports.model import ToolSpec
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.core.arguments import Arguments

DEFAULT_RESULTS = 5
MAX_RESULTS = 50
MAX_DESCRIPTION_CHARS = 500

# Scores, highest first: the query names the tool; a word of its name; part of its name;
# a word of its description; the start of a word of its description ('issue' ~ 'issues').
EXACT_NAME, NAME_WORD, NAME_PART, DESCRIPTION_WORD, DESCRIPTION_PREFIX = 100, 10, 4, 3, 1

_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Keywords, e.g. 'github issue'."},
        "max_results": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_RESULTS,
            "description": f"How many tools to return at most. Default {DEFAULT_RESULTS}.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

# Split 'mcp__github__createIssue' and 'WebSearch' into their words.
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\d|\b|_)|[A-Z]?[a-z]+|[A-Z]+|\d+")


class ToolSearch:
    name = "ToolSearch"
    input_schema = _SCHEMA
    flags = ToolFlags(retry_safe=True)  # a lookup in a fixed list

    def __init__(self, deferred: Sequence[ToolSpec] = ()) -> None:
        self.deferred = tuple(deferred)
        self.description = (
            "Search, by keywords, the tools that are available but not loaded "
            f"({len(self.deferred)} now). Returns the best-matching tool names with their "
            "descriptions, best first."
        )

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        query = args.string("query")
        limit = args.integer("max_results", DEFAULT_RESULTS, minimum=1, maximum=MAX_RESULTS)
        if not words(query):
            raise ToolError("ToolSearch: the query has no words to search for")
        if not self.deferred:
            return ToolOutput("No deferred tools are available.")
        ranked = rank(self.deferred, query)[:limit]
        if not ranked:
            return ToolOutput(f"No deferred tools match {query!r}.")
        count = "1 tool matches" if len(ranked) == 1 else f"{len(ranked)} tools match"
        lines = [f"{count} {query!r}, best first:"]
        lines += [f"{spec.name}: {_clip(spec.description)}" for spec in ranked]
        return ToolOutput("\n".join(lines))


def words(text: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(text)]


def rank(specs: Sequence[ToolSpec], query: str) -> list[ToolSpec]:
    """The specs that match at all, best first; equal scores keep name order."""
    scored = [(score(spec, query), spec) for spec in specs]
    matching = [(points, spec) for points, spec in scored if points > 0]
    matching.sort(key=lambda pair: (-pair[0], pair[1].name))
    return [spec for _, spec in matching]


def score(spec: ToolSpec, query: str) -> int:
    name = spec.name.lower()
    name_words = set(words(spec.name))
    description_words = set(words(spec.description))
    points = EXACT_NAME if query.strip().lower() == name else 0
    for term in set(words(query)):
        if term in name_words:
            points += NAME_WORD
        elif term in name:
            points += NAME_PART
        if term in description_words:
            points += DESCRIPTION_WORD
        elif any(word.startswith(term) for word in description_words):
            points += DESCRIPTION_PREFIX
    return points


def _clip(description: str) -> str:
    text = " ".join(description.split())
    if len(text) <= MAX_DESCRIPTION_CHARS:
        return text
    return text[:MAX_DESCRIPTION_CHARS] + "…"
