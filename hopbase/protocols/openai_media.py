"""OpenAI Images and Audio transcription streams: observed on the way through, never translated.

Media requests only go to servers that speak OpenAI's HTTP API, so their events
reach the client byte for byte. This module gives the streaming relay what it
needs to watch them:

    image_generation.partial_image   output (an empty `TextDelta` marks it; the image stays raw)
    image_generation.completed       output, usage, finish; the stream is complete
    transcript.text.delta            output (`TextDelta` of the delta)
    transcript.text.segment          output
    transcript.text.done             usage, finish; the stream is complete
    data: [DONE]                     remembered in ``upstream_done``, so HopBase adds no second one
    an ``error`` event or object     `canonical.Error`

The ``image_edit.*`` twins are treated like their ``image_generation.*`` names.
In-stream errors are written like Chat's: ``data: {"error": {...}}`` then ``[DONE]``.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from hopbase import canonical, errors, sse
from hopbase.protocols import openai_chat
from hopbase.protocols.openai_chat.errors import stream_error, stream_error_event

NAME = "openai_media"

_PARTIAL_EVENTS = frozenset({
    "image_generation.partial_image", "image_edit.partial_image", "transcript.text.segment",
})
_TERMINAL_EVENTS = frozenset({
    "image_generation.completed", "image_edit.completed", "transcript.text.done",
})


def render_error(error: errors.GatewayError) -> dict[str, Any]:
    """The OpenAI error body for ``error`` (the same as Chat's)."""
    return openai_chat.render_error(error)


def parse_usage(value: Any) -> canonical.Usage | None:
    """The token usage of an Images or transcription answer; None when it counts no tokens.

    Images report ``input_tokens``/``output_tokens``; transcriptions report the same
    under ``"type": "tokens"``, or audio seconds under ``"type": "duration"`` (no tokens).
    """
    if not isinstance(value, dict):
        return None
    input_tokens, output_tokens = value.get("input_tokens"), value.get("output_tokens")
    if not isinstance(input_tokens, int) or not isinstance(output_tokens, int):
        return None
    return canonical.Usage(input_tokens=input_tokens, output_tokens=output_tokens)


def answer_usage(body: bytes) -> canonical.Usage | None:
    """The usage inside a whole (non-stream) JSON answer, when it has one."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return parse_usage(payload.get("usage")) if isinstance(payload, dict) else None


@attrs.define
class StreamParser:
    """Watches an upstream media stream: which events carry output, usage and the end."""

    complete: bool = False
    upstream_done: bool = False

    def feed(self, event: sse.Event) -> list[canonical.Event]:
        """The canonical events one upstream SSE event stands for."""
        if event.data == b"[DONE]":
            self.upstream_done = True
            return []
        try:
            payload = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        if not isinstance(payload, dict):
            return [canonical.Error("api_error", "unexpected event from upstream")]
        kind = payload.get("type")
        if event.name == "error" or kind == "error" or payload.get("error") is not None:
            return [stream_error(payload.get("error", payload))]
        if kind == "transcript.text.delta":
            return [canonical.TextDelta(str(payload.get("delta") or ""))]
        if kind in _PARTIAL_EVENTS:
            return [canonical.TextDelta("")]
        if kind in _TERMINAL_EVENTS:
            return self._terminal(payload)
        return []

    def _terminal(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        # the final image (or a transcript sent whole) is output in its own right
        events: list[canonical.Event] = [canonical.TextDelta("")]
        usage = parse_usage(payload.get("usage"))
        if usage is not None:
            events.append(canonical.UsageEvent(usage))
        events.append(canonical.Finish(canonical.StopReason.END_TURN))
        return events


@attrs.define
class StreamRenderer:
    """Writes HopBase's own events into a media stream: only errors, since events pass through."""

    model: str
    include_usage: bool = True
    request_id: str = ""
    _ended: bool = False

    def render(self, event: canonical.Event) -> bytes:
        """Nothing: media events are never translated, the upstream's own bytes are sent."""
        return b""

    def render_error(self, error: canonical.Error) -> bytes:
        """The in-stream error event, then ``[DONE]``; ends the stream."""
        if self._ended:
            return b""
        self._ended = True
        return stream_error_event(error)
