"""The one internal model every wire protocol is parsed into and rendered from.

A client protocol module parses its wire request into a `Request`; an upstream
protocol module renders that `Request` to its own wire JSON. Answers flow back as
a stream of `Event` values (or, non-streaming, one `Response`), so three protocol
modules cover all nine client/upstream pairs.

Parts of a message:

    TextPart       text, in any role
    ImagePart      an image given by URL (``https://…`` or a ``data:`` URL)
    ReasoningPart  the model's reasoning (Anthropic thinking, Chat reasoning)
    ToolCall       assistant asks for a tool; arguments are JSON text
    ToolResult     user side answer to a ToolCall

Stream events, in the order an answer produces them:

    Start → (TextDelta | ReasoningDelta | ToolCallStart ToolCallDelta* | BlockStop)*
          → Usage? → Finish | Error
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs


class StopReason(enum.Enum):
    """Why the model stopped, in protocol-neutral words."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    TOOL_USE = "tool_use"
    STOP_SEQUENCE = "stop_sequence"
    CONTENT_FILTER = "content_filter"
    REFUSAL = "refusal"


@attrs.frozen
class TextPart:
    text: str


@attrs.frozen
class ImagePart:
    """An image: ``url`` is either a web address or ``data:<media type>;base64,<data>``."""

    url: str
    detail: str | None = None


@attrs.frozen
class ReasoningPart:
    text: str
    signature: str | None = None


@attrs.frozen
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as the model produced it


@attrs.frozen
class ToolResult:
    tool_call_id: str
    content: str
    is_error: bool = False


Part: TypeAlias = TextPart | ImagePart | ReasoningPart | ToolCall | ToolResult


@attrs.frozen
class Message:
    role: Literal["user", "assistant"]
    parts: tuple[Part, ...]


@attrs.frozen
class Tool:
    name: str
    description: str | None = None
    parameters: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ToolChoice:
    """``mode`` is auto, none, required (any tool) or tool (the one named)."""

    mode: Literal["auto", "none", "required", "tool"]
    name: str | None = None


@attrs.frozen
class Reasoning:
    """What the client asked of reasoning: an OpenAI effort or an Anthropic budget."""

    effort: str | None = None
    budget_tokens: int | None = None
    summary: str | None = None


@attrs.frozen
class Request:
    """One chat request, whatever protocol it arrived in.

    ``extra`` holds top-level fields this model has no place for; they are carried
    to an upstream of the same protocol as ``source_protocol`` and dropped elsewhere.
    """

    model: str
    messages: tuple[Message, ...]
    system: str | None = None
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    reasoning: Reasoning | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    metadata: Mapping[str, str] | None = None
    source_protocol: str = ""
    extra: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@attrs.frozen
class Response:
    """A whole non-streaming answer."""

    id: str
    model: str
    parts: tuple[Part, ...]
    stop_reason: StopReason | None
    usage: Usage


@attrs.frozen
class Start:
    id: str
    model: str


@attrs.frozen
class TextDelta:
    text: str


@attrs.frozen
class ReasoningDelta:
    text: str
    signature: str | None = None


@attrs.frozen
class ToolCallStart:
    """A tool call begins; ``index`` counts tool calls in this answer from 0."""

    index: int
    id: str
    name: str


@attrs.frozen
class ToolCallDelta:
    index: int
    arguments: str


@attrs.frozen
class BlockStop:
    """The upstream closed a content block; renderers may close theirs."""


@attrs.frozen
class UsageEvent:
    usage: Usage


@attrs.frozen
class Finish:
    stop_reason: StopReason


@attrs.frozen
class Error:
    """An error inside a stream; ``type`` uses Anthropic's error type words."""

    type: str
    message: str


Event: TypeAlias = (
    Start
    | TextDelta
    | ReasoningDelta
    | ToolCallStart
    | ToolCallDelta
    | BlockStop
    | UsageEvent
    | Finish
    | Error
)

# the events that start output (SPEC section 5): text, reasoning, tool calls
OUTPUT_EVENTS = (TextDelta, ReasoningDelta, ToolCallStart, ToolCallDelta)


@attrs.define
class ResponseBuilder:
    """Folds a canonical event stream into one `Response` (for non-stream answers)."""

    id: str = ""
    model: str = ""
    _parts: list[Part] = attrs.field(factory=list)
    _text: list[str] = attrs.field(factory=list)
    _reasoning: list[str] = attrs.field(factory=list)
    _reasoning_signature: str | None = None
    _tool_calls: dict[int, list[str]] = attrs.field(factory=dict)
    _current: str | None = None
    stop_reason: StopReason | None = None
    usage: Usage = attrs.field(factory=Usage)
    error: Error | None = None

    def add(self, event: Event) -> None:
        """Take one event in stream order."""
        if isinstance(event, TextDelta):
            self._switch("text")
            self._text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._switch("reasoning")
            self._reasoning.append(event.text)
            if event.signature:
                self._reasoning_signature = event.signature
        elif isinstance(event, ToolCallStart):
            self._switch(f"tool:{event.index}")
            self._tool_calls[event.index] = [event.id, event.name, ""]
        elif isinstance(event, ToolCallDelta):
            call = self._tool_calls.get(event.index)
            if call is not None:
                call[2] += event.arguments
        elif isinstance(event, Start):
            self.id, self.model = event.id, event.model
        elif isinstance(event, UsageEvent):
            self.usage = event.usage
        elif isinstance(event, Finish):
            self.stop_reason = event.stop_reason
        elif isinstance(event, Error):
            self.error = event

    def _switch(self, block: str) -> None:
        if self._current != block:
            self._flush()
            self._current = block

    def _flush(self) -> None:
        if self._current == "text" and self._text:
            self._parts.append(TextPart("".join(self._text)))
        elif self._current == "reasoning" and (self._reasoning or self._reasoning_signature):
            self._parts.append(ReasoningPart("".join(self._reasoning), self._reasoning_signature))
        elif self._current is not None and self._current.startswith("tool:"):
            call = self._tool_calls.get(int(self._current[5:]))
            if call is not None:
                self._parts.append(ToolCall(call[0], call[1], call[2] or "{}"))
        self._text, self._reasoning, self._reasoning_signature = [], [], None
        self._current = None

    def build(self) -> Response:
        """The answer so far, as one `Response`."""
        self._flush()
        return Response(self.id, self.model, tuple(self._parts), self.stop_reason, self.usage)
