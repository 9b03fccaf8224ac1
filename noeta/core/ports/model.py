"""The model port: a provider-neutral request and reply, and the `Provider` protocol.

A request is assembled from the log alone, and a provider turns it into wire bytes
deterministically (`encode_request`), so the request re-sent after a crash is byte for
byte the one sent before and the provider's prompt cache still hits. One `send` is one
HTTP attempt; retries are noeta's (`noeta.core.retry`), never an SDK's. A reply may be
told as it comes (`ReplyDelta`), but only the whole `ModelReply` counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from noeta.core.errors import NoetaError
from noeta.core.ports.payload import JSONValue


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model asks for a tool: `id` is the provider's call id, unique in the task."""

    id: str
    name: str
    input: dict[str, JSONValue]


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


Block = Text | ToolCall | ToolResult


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["user", "assistant"]
    content: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, JSONValue]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str  # the provider's model name, without the provider prefix
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    # How many replies the task has had: not sent by HTTP providers, but it lets the
    # scripted model answer deterministically from the request alone.
    replies_so_far: int = 0


# Why a reply stopped, in noeta's words: the turn's rules depend on it.
StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "other"]


@dataclass(frozen=True, slots=True)
class Usage:
    """What one reply was billed for, by kind. The kinds do not overlap, except
    `reasoning_tokens`: the part of `output_tokens` the model spent thinking (billed as
    output; OpenAI reports it, Anthropic folds thinking into output)."""

    input_tokens: int = 0  # neither read from nor written to the prompt cache
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def plus(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def all_input_tokens(self) -> int:
        """Every input token, cached or not (the GenAI conventions' input count)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True, slots=True)
class ModelReply:
    content: tuple[Text | ToolCall, ...]
    stop_reason: StopReason
    # None: the provider sent no usage. Unknown, never counted as 0 tokens.
    usage: Usage | None = field(default_factory=Usage)
    provider_stop_reason: str = ""  # as the provider said it, for the log
    response_id: str = ""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More of a reply's text, as it is streamed. `block` tells the reply's blocks apart,
    numbered as the adapter reads them; a block's text is the join of its deltas (the reply
    leaves out a block of blanks only)."""

    block: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    """A piece of a tool call's input as the model writes it: JSON text, whole only once
    the call's pieces are joined, and parsed only in the `ModelReply`."""

    block: int
    call_id: str
    name: str
    fragment: str


ReplyDelta = TextDelta | ToolInputDelta
# Called on the event loop for each delta of one attempt, in order; it must not block. A
# failed attempt's deltas are not taken back: the next attempt's say which one they are of.
OnDelta = Callable[[ReplyDelta], None]


class ProviderError(NoetaError):
    """One attempt failed. `retryable` says whether another attempt may succeed.

    Messages never hold an API key or a request body.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        # What the retry log line says: the status or the kind of failure, never the
        # provider's own words (a compatible server may quote the request back).
        self.reason = reason or (f"HTTP {status}" if status else "failed")


class Provider(Protocol):
    """One LLM API. Chosen by the prefix of a model spec (`anthropic:`, `openai:`, …)."""

    name: str  # the GenAI semantic-convention provider name, e.g. "anthropic", "openai"

    def encode_request(self, request: ModelRequest, *, stream: bool = True) -> bytes:
        """The exact request body; the same request always gives the same bytes.

        `stream=False`: the form that asks for the reply whole, as releases before
        streaming sent every request: a call one of them recorded is re-sent in it, byte
        for byte (`request_sha256` says which form was sent). A provider that cannot
        stream, or that has found its server refuses to, gives that form either way."""
        ...

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        """One attempt. Raises `ProviderError` for anything but a usable reply. `on_delta`
        hears the reply as it streams; without it nothing is told."""
        ...

    async def close(self) -> None: ...
