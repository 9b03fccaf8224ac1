"""The usage object of each provider's reply, as its real API sends it, read into noeta's
`Usage`: one parser per wire format, shared by the plain and the streaming replies."""

from __future__ import annotations

from noeta.backends.models.wire import MalformedReply, count
from noeta.core.ports.model import Usage


def anthropic_usage(usage: object) -> Usage | None:
    """Anthropic's `usage`: `input_tokens` already leaves out the cache's tokens, which
    come as `cache_creation_input_tokens` and `cache_read_input_tokens`; thinking is
    billed in `output_tokens` and not reported apart. None: the reply had no usage."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise MalformedReply("'usage' is not an object")
    return Usage(
        input_tokens=count(usage, "input_tokens"),
        output_tokens=count(usage, "output_tokens"),
        cache_read_tokens=count(usage, "cache_read_input_tokens"),
        cache_write_tokens=count(usage, "cache_creation_input_tokens"),
    )


def openai_usage(usage: object) -> Usage | None:
    """OpenAI's `usage`: `prompt_tokens` includes the cached ones
    (`prompt_tokens_details.cached_tokens`) and `completion_tokens` the reasoning ones
    (`completion_tokens_details.reasoning_tokens`). noeta's `input_tokens`, like
    Anthropic's, leaves the cached ones out. None: the reply had no usage."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise MalformedReply("'usage' is not an object")
    cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
    return Usage(
        input_tokens=max(0, count(usage, "prompt_tokens") - cached),
        output_tokens=count(usage, "completion_tokens"),
        cache_read_tokens=cached,
        reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
    )


def _detail(usage: dict[str, object], details: str, key: str) -> int:
    """A count inside a details object, which compatible servers omit or send as null."""
    inner = usage.get(details)
    if inner is None:
        return 0
    if not isinstance(inner, dict):
        raise MalformedReply(f"{details!r} is not an object")
    return count(inner, key)
