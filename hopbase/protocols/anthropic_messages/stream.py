"""Messages streams: upstream SSE events → canonical events, and back."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import orjson

from hopbase import canonical, sse
from hopbase.canonical import StopReason
from hopbase.protocols.anthropic_messages.response import (
    STOP_FROM_WIRE,
    STOP_TO_WIRE,
    parse_usage,
    render_usage,
)


def _event_bytes(name: str, payload: dict[str, Any]) -> bytes:
    return sse.encode(orjson.dumps(payload), name)


@attrs.define
class StreamParser:
    """Turns upstream Messages SSE events into canonical events.

    ``complete`` turns True on ``message_stop`` or an ``error`` event, both terminal.
    """

    complete: bool = attrs.field(default=False, init=False)
    _start_usage: dict[str, Any] = attrs.field(factory=dict, init=False)
    _stop_reason: canonical.StopReason = attrs.field(default=StopReason.END_TURN, init=False)
    _tool_count: int = attrs.field(default=0, init=False)
    # wire block index → tool call ordinal, or -1 for text and thinking blocks
    _blocks: dict[int, int] = attrs.field(factory=dict, init=False)

    def feed(self, event: sse.Event) -> list[canonical.Event]:
        """Parse one upstream event; pings and empty deltas give no events."""
        try:
            data = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        try:
            kind = data["type"]
            if kind == "content_block_delta":
                return self._block_delta(data["index"], data["delta"])
            handler = _PARSER_HANDLERS.get(kind)
            return [] if handler is None else handler(self, data)
        except (KeyError, TypeError, AttributeError):
            return [canonical.Error("api_error", "malformed event from upstream")]

    def _block_delta(self, index: int, delta: dict[str, Any]) -> list[canonical.Event]:
        kind = delta["type"]
        if kind == "text_delta":
            text = delta["text"]
            return [canonical.TextDelta(text)] if text else []
        if kind == "input_json_delta":
            ordinal = self._blocks.get(index, -1)
            partial = delta["partial_json"]
            return [canonical.ToolCallDelta(ordinal, partial)] if partial and ordinal >= 0 else []
        if kind == "thinking_delta":
            thinking = delta["thinking"]
            return [canonical.ReasoningDelta(thinking)] if thinking else []
        if kind == "signature_delta":
            signature = delta["signature"]
            return [canonical.ReasoningDelta("", signature)] if signature else []
        return []

    def _message_start(self, data: dict[str, Any]) -> list[canonical.Event]:
        message = data["message"]
        self._start_usage = message.get("usage") or {}
        return [canonical.Start(message["id"], message["model"])]

    def _block_start(self, data: dict[str, Any]) -> list[canonical.Event]:
        block, index = data["content_block"], data["index"]
        kind = block["type"]
        if kind == "tool_use":
            ordinal = self._blocks[index] = self._tool_count
            self._tool_count += 1
            start = canonical.ToolCallStart(ordinal, block["id"], block["name"])
            if not block.get("input"):
                return [start]
            return [start, canonical.ToolCallDelta(ordinal, orjson.dumps(block["input"]).decode())]
        if kind == "text":
            self._blocks[index] = -1
            return [canonical.TextDelta(block["text"])] if block.get("text") else []
        if kind == "thinking":
            self._blocks[index] = -1
            text, signature = block.get("thinking") or "", block.get("signature") or None
            return [canonical.ReasoningDelta(text, signature)] if text or signature else []
        return []

    def _block_stop(self, data: dict[str, Any]) -> list[canonical.Event]:
        return [canonical.BlockStop()] if data["index"] in self._blocks else []

    def _message_delta(self, data: dict[str, Any]) -> list[canonical.Event]:
        reason = data["delta"].get("stop_reason")
        if reason is not None:
            self._stop_reason = STOP_FROM_WIRE.get(reason, StopReason.END_TURN)
        # message_delta counts are cumulative and may leave out what message_start said.
        fields = {**self._start_usage,
                  **{key: value for key, value in (data.get("usage") or {}).items()
                     if value is not None}}
        return [canonical.UsageEvent(parse_usage(fields))]

    def _message_stop(self, data: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        return [canonical.Finish(self._stop_reason)]

    def _error(self, data: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        error = data.get("error") or {}
        return [canonical.Error(str(error.get("type") or "api_error"),
                                str(error.get("message") or "upstream error"))]


_PARSER_HANDLERS: dict[Any, Callable[[StreamParser, dict[str, Any]], list[canonical.Event]]] = {
    "message_start": StreamParser._message_start,
    "content_block_start": StreamParser._block_start,
    "content_block_stop": StreamParser._block_stop,
    "message_delta": StreamParser._message_delta,
    "message_stop": StreamParser._message_stop,
    "error": StreamParser._error,
}

_DELTA_PREFIX = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_TEXT_DELTA = b',"delta":{"type":"text_delta","text":'
_THINKING_DELTA = b',"delta":{"type":"thinking_delta","thinking":'
_SIGNATURE_DELTA = b',"delta":{"type":"signature_delta","signature":'
_JSON_DELTA = b',"delta":{"type":"input_json_delta","partial_json":'
_DELTA_END = b"}}\n\n"
_STOP_PREFIX = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":'
_MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
_TEXT_BLOCK = {"type": "text", "text": ""}
_THINKING_BLOCK = {"type": "thinking", "thinking": "", "signature": ""}


@attrs.define
class StreamRenderer:
    """Renders canonical events as the Messages SSE stream a client SDK expects.

    Blocks are opened and closed as the kind of output changes, with their own
    indices; ``model`` (the client's model group) is named in ``message_start``.
    """

    model: str
    include_usage: bool = True
    request_id: str = ""
    _started: bool = attrs.field(default=False, init=False)
    _finished: bool = attrs.field(default=False, init=False)
    _open: str | None = attrs.field(default=None, init=False)  # text | thinking | tool
    _index: int = attrs.field(default=-1, init=False)
    _index_bytes: bytes = attrs.field(default=b"", init=False)
    _tool_blocks: dict[int, bytes] = attrs.field(factory=dict, init=False)
    _usage: canonical.Usage = attrs.field(factory=canonical.Usage, init=False)

    def render(self, event: canonical.Event) -> bytes:
        """Zero or more whole SSE events for ``event``; nothing once the stream has ended."""
        if self._finished:
            return b""
        return _RENDER_HANDLERS[type(event)](self, event)

    def render_error(self, error: canonical.Error) -> bytes:
        """The Messages in-stream ``error`` event; it ends the stream."""
        self._finished = True
        return _event_bytes("error", {"type": "error",
                                      "error": {"type": error.type, "message": error.message}})

    def _start(self, event: canonical.Start) -> bytes:
        return self._message_start(event.id)

    def _message_start(self, message_id: str) -> bytes:
        if self._started:
            return b""
        self._started = True
        if not message_id:
            message_id = f"msg_{self.request_id or uuid.uuid4().hex}"
        return _event_bytes("message_start", {"type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": render_usage(self._usage)}})

    def _open_block(self, kind: str, content_block: dict[str, Any]) -> bytes:
        head = self._message_start("") + self._close_block()
        self._open = kind
        self._index += 1
        self._index_bytes = b"%d" % self._index
        return head + _event_bytes("content_block_start", {
            "type": "content_block_start", "index": self._index, "content_block": content_block})

    def _close_block(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return _STOP_PREFIX + self._index_bytes + b"}\n\n"

    def _text(self, event: canonical.TextDelta) -> bytes:
        if not event.text:
            return b""
        head = b"" if self._open == "text" else self._open_block("text", _TEXT_BLOCK)
        return (head + _DELTA_PREFIX + self._index_bytes + _TEXT_DELTA
                + orjson.dumps(event.text) + _DELTA_END)

    def _reasoning(self, event: canonical.ReasoningDelta) -> bytes:
        if not event.text and not event.signature:
            return b""
        out = b"" if self._open == "thinking" else self._open_block("thinking", _THINKING_BLOCK)
        prefix = _DELTA_PREFIX + self._index_bytes
        if event.text:
            out += prefix + _THINKING_DELTA + orjson.dumps(event.text) + _DELTA_END
        if event.signature:
            out += prefix + _SIGNATURE_DELTA + orjson.dumps(event.signature) + _DELTA_END
        return out

    def _tool_start(self, event: canonical.ToolCallStart) -> bytes:
        out = self._open_block("tool", {"type": "tool_use", "id": event.id, "name": event.name,
                                        "input": {}})
        self._tool_blocks[event.index] = self._index_bytes
        return out

    def _tool_delta(self, event: canonical.ToolCallDelta) -> bytes:
        # A delta for an earlier tool call goes to that call's block index; the SDKs
        # accumulate by index, so interleaved calls still assemble correctly.
        block = self._tool_blocks.get(event.index)
        if block is None or not event.arguments:
            return b""
        return _DELTA_PREFIX + block + _JSON_DELTA + orjson.dumps(event.arguments) + _DELTA_END

    def _block_stop(self, event: canonical.BlockStop) -> bytes:
        return self._close_block()

    def _usage_event(self, event: canonical.UsageEvent) -> bytes:
        self._usage = event.usage
        return b""

    def _finish(self, event: canonical.Finish) -> bytes:
        out = self._message_start("") + self._close_block()
        self._finished = True
        return out + _event_bytes("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": STOP_TO_WIRE[event.stop_reason], "stop_sequence": None},
            "usage": render_usage(self._usage)}) + _MESSAGE_STOP

    def _error(self, event: canonical.Error) -> bytes:
        return self.render_error(event)


_RENDER_HANDLERS: dict[type, Callable[[StreamRenderer, Any], bytes]] = {
    canonical.TextDelta: StreamRenderer._text,
    canonical.ReasoningDelta: StreamRenderer._reasoning,
    canonical.ToolCallDelta: StreamRenderer._tool_delta,
    canonical.ToolCallStart: StreamRenderer._tool_start,
    canonical.BlockStop: StreamRenderer._block_stop,
    canonical.Start: StreamRenderer._start,
    canonical.UsageEvent: StreamRenderer._usage_event,
    canonical.Finish: StreamRenderer._finish,
    canonical.Error: StreamRenderer._error,
}
