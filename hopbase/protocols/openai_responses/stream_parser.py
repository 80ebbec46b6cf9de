"""Upstream Responses stream events → canonical events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import orjson

from hopbase import canonical, sse
from hopbase.canonical import (
    StopReason,
)
from hopbase.protocols.openai_responses.errors import stream_error
from hopbase.protocols.openai_responses.wire import (
    get_field,
    parse_stop_reason,
    parse_usage,
    reasoning_part,
)


def _output_index(payload: dict[str, Any]) -> int:
    index = payload.get("output_index")
    return index if isinstance(index, int) else -1


def _text(payload: Any, key: str) -> str:
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else ""


@attrs.define
class StreamParser:
    """Turns upstream Responses stream events into canonical events.

    ``ToolCallStart.index`` counts function calls in this answer; ``complete`` turns True
    on ``response.completed``, ``response.incomplete``, ``response.failed`` and ``error``.
    """

    complete: bool = False
    _tool_indices: dict[int, int] = attrs.field(factory=dict)  # output_index -> tool index
    _arguments_seen: set[int] = attrs.field(factory=set)
    _refused: bool = False

    def feed(self, event: sse.Event) -> list[canonical.Event]:
        """Parse one upstream SSE event."""
        try:
            payload = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            if event.data.strip() == b"[DONE]":
                return []
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        if not isinstance(payload, dict):
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        kind = payload.get("type") or event.name
        handler = _PARSE_HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            return handler(self, payload)
        if "error" in payload:  # an OpenAI-compatible server's Chat-style error
            self.complete = True
            return [stream_error(payload["error"])]
        return []

    def _created(self, payload: dict[str, Any]) -> list[canonical.Event]:
        response = get_field(payload, "response")
        return [canonical.Start(_text(response, "id"), _text(response, "model"))]

    def _text_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        delta = _text(payload, "delta")
        return [canonical.TextDelta(delta)] if delta else []

    def _refusal_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self._refused = True
        return self._text_delta(payload)

    def _reasoning_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        delta = _text(payload, "delta")
        return [canonical.ReasoningDelta(delta)] if delta else []

    def _summary_part_added(self, payload: dict[str, Any]) -> list[canonical.Event]:
        index = payload.get("summary_index")
        # Summary parts are separate paragraphs, as parse_response joins them.
        return [canonical.ReasoningDelta("\n\n")] if isinstance(index, int) and index > 0 else []

    def _item_added(self, payload: dict[str, Any]) -> list[canonical.Event]:
        item = get_field(payload, "item")
        if not isinstance(item, dict) or item.get("type") != "function_call":
            return []
        return [self._start_tool(_output_index(payload), item)]

    def _start_tool(self, output_index: int, item: dict[str, Any]) -> canonical.ToolCallStart:
        index = len(self._tool_indices)
        self._tool_indices[output_index] = index
        return canonical.ToolCallStart(index, _text(item, "call_id"), _text(item, "name"))

    def _arguments_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        index = self._tool_indices.get(_output_index(payload))
        delta = _text(payload, "delta")
        if index is None or not delta:
            return []
        self._arguments_seen.add(index)
        return [canonical.ToolCallDelta(index, delta)]

    def _arguments_done(self, payload: dict[str, Any]) -> list[canonical.Event]:
        index = self._tool_indices.get(_output_index(payload))
        arguments = _text(payload, "arguments")
        if index is None or index in self._arguments_seen or not arguments:
            return []
        self._arguments_seen.add(index)  # a server that sends only the whole arguments
        return [canonical.ToolCallDelta(index, arguments)]

    def _item_done(self, payload: dict[str, Any]) -> list[canonical.Event]:
        item = get_field(payload, "item")
        kind = get_field(item, "type")
        if kind == "message":
            return [canonical.BlockStop()]
        if kind == "reasoning":
            signature = reasoning_part(item).signature
            if signature is None:
                return [canonical.BlockStop()]
            return [canonical.ReasoningDelta("", signature), canonical.BlockStop()]
        if kind == "function_call":
            return [*self._finish_tool(_output_index(payload), item), canonical.BlockStop()]
        return []

    def _finish_tool(self, output_index: int, item: dict[str, Any]) -> list[canonical.Event]:
        events: list[canonical.Event] = []
        index = self._tool_indices.get(output_index)
        if index is None:  # the server skipped output_item.added
            start = self._start_tool(output_index, item)
            index = start.index
            events.append(start)
        arguments = _text(item, "arguments")
        if index not in self._arguments_seen and arguments:
            self._arguments_seen.add(index)
            events.append(canonical.ToolCallDelta(index, arguments))
        return events

    def _finished(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        response = get_field(payload, "response")
        status = "incomplete" if payload.get("type") == "response.incomplete" else "completed"
        stop = parse_stop_reason(status, get_field(response, "incomplete_details"),
                            bool(self._tool_indices), self._refused)
        usage = get_field(response, "usage")
        events: list[canonical.Event] = []
        if isinstance(usage, dict):
            events.append(canonical.UsageEvent(parse_usage(usage)))
        events.append(canonical.Finish(stop or StopReason.END_TURN))
        return events

    def _failed(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        return [stream_error(get_field(get_field(payload, "response"), "error"))]

    def _error(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        nested = payload.get("error")
        return [stream_error(nested if isinstance(nested, dict) else payload)]


_PARSE_HANDLERS: dict[str, Callable[[StreamParser, dict[str, Any]], list[canonical.Event]]] = {
    "response.created": StreamParser._created,
    "response.output_item.added": StreamParser._item_added,
    "response.output_text.delta": StreamParser._text_delta,
    "response.refusal.delta": StreamParser._refusal_delta,
    "response.reasoning_summary_part.added": StreamParser._summary_part_added,
    "response.reasoning_summary_text.delta": StreamParser._reasoning_delta,
    "response.reasoning_text.delta": StreamParser._reasoning_delta,
    "response.function_call_arguments.delta": StreamParser._arguments_delta,
    "response.function_call_arguments.done": StreamParser._arguments_done,
    "response.output_item.done": StreamParser._item_done,
    "response.completed": StreamParser._finished,
    "response.incomplete": StreamParser._finished,
    "response.failed": StreamParser._failed,
    "error": StreamParser._error,
}
