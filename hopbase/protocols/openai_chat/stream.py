"""Chat streams: ``chat.completion.chunk`` events → canonical events, and back."""

from __future__ import annotations

import secrets
import time
from typing import Any

import attrs
import orjson

from hopbase import canonical, sse
from hopbase.canonical import StopReason
from hopbase.protocols.openai_chat.errors import stream_error, stream_error_event
from hopbase.protocols.openai_chat.response import (
    FINISH_REASONS,
    parse_stop_reason,
    parse_usage,
    render_usage,
)


@attrs.define
class StreamParser:
    """Turns upstream ``chat.completion.chunk`` events into canonical events.

    A ``finish_reason`` is held until the usage chunk (or ``[DONE]``) arrives, so the
    canonical order is ``UsageEvent`` then ``Finish``.
    """

    complete: bool = False
    _started: bool = False
    _tool_indices: dict[int, int] = attrs.field(factory=dict)
    _held_finish: canonical.Finish | None = None
    _finished: bool = False
    _usage: canonical.Usage | None = None
    _refused: bool = False

    def feed(self, event: sse.Event) -> list[canonical.Event]:
        """The canonical events carried by one upstream SSE event."""
        if event.data == b"[DONE]":
            self.complete = True
            return self._release()
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        if not isinstance(chunk, dict):
            return [canonical.Error("api_error", "unexpected chunk from upstream")]
        if chunk.get("error") is not None:
            return [stream_error(chunk["error"])]
        events: list[canonical.Event] = []
        if not self._started:
            self._started = True
            events.append(canonical.Start(str(chunk.get("id") or ""),
                                          str(chunk.get("model") or "")))
        choices = chunk.get("choices")
        if choices and isinstance(choices, list) and isinstance(choices[0], dict):
            self._choice(choices[0], events)
        if isinstance(chunk.get("usage"), dict):
            self._usage = parse_usage(chunk["usage"])
            events.extend(self._release())
        return events

    def _choice(self, choice: dict[str, Any], events: list[canonical.Event]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if reasoning and isinstance(reasoning, str):
                events.append(canonical.ReasoningDelta(reasoning))
            if delta.get("content") and isinstance(delta["content"], str):
                events.append(canonical.TextDelta(delta["content"]))
            if delta.get("refusal") and isinstance(delta["refusal"], str):
                self._refused = True
                events.append(canonical.TextDelta(delta["refusal"]))
            if delta.get("tool_calls") and isinstance(delta["tool_calls"], list):
                for position, call in enumerate(delta["tool_calls"]):
                    if isinstance(call, dict):
                        self._tool_call(call, position, events)
        reason = choice.get("finish_reason")
        if reason and not self._finished:
            self._held_finish = canonical.Finish(
                parse_stop_reason(reason, self._refused) or StopReason.END_TURN)

    def _tool_call(self, call: dict[str, Any], position: int,
                   events: list[canonical.Event]) -> None:
        chat_index = call.get("index")
        if not isinstance(chat_index, int):
            chat_index = position
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        index = self._tool_indices.get(chat_index)
        if index is None:
            # A new call; canonical indices count calls in order of appearance.
            index = self._tool_indices[chat_index] = len(self._tool_indices)
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                call_id = "call_" + secrets.token_hex(12)
            events.append(canonical.ToolCallStart(index, call_id, str(function.get("name") or "")))
        arguments = function.get("arguments")
        if arguments and isinstance(arguments, str):
            events.append(canonical.ToolCallDelta(index, arguments))

    def _release(self) -> list[canonical.Event]:
        if self._held_finish is None:
            return []
        events: list[canonical.Event] = []
        if self._usage is not None:
            events.append(canonical.UsageEvent(self._usage))
        events.append(self._held_finish)
        self._held_finish, self._finished = None, True
        return events


_CHOICE_HEAD = b'{"index":0,"delta":'
_CHOICE_TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'
_ROLE_DELTA = b'{"role":"assistant","content":"","refusal":null}'


@attrs.define
class StreamRenderer:
    """Renders canonical events as ``chat.completion.chunk`` SSE events for the client.

    Chunks share one id (``chatcmpl-<request_id>``, random without one), one ``created``
    time and the client's ``model``. `Finish` writes the finish chunk, the usage chunk
    (with ``include_usage`` and when usage was seen) and ``[DONE]``.
    """

    model: str
    include_usage: bool = True
    request_id: str = ""
    _prefix: bytes = attrs.field(init=False, default=b"")
    _usage: canonical.Usage | None = attrs.field(init=False, default=None)
    _started: bool = attrs.field(init=False, default=False)
    _ended: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        head = orjson.dumps({
            "id": "chatcmpl-" + (self.request_id or secrets.token_hex(12)),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
        })
        # Every chunk is this prefix, the choice (or usage) JSON and a constant tail.
        self._prefix = b"data: " + head[:-1] + b',"choices":['

    def render(self, event: canonical.Event) -> bytes:
        """Zero or more whole SSE events for ``event``."""
        if self._ended:
            return b""
        if isinstance(event, canonical.TextDelta):
            return self._delta(b'{"content":%b}' % orjson.dumps(event.text)) if event.text else b""
        if isinstance(event, canonical.ReasoningDelta):
            return self._delta(b'{"reasoning":%b}' % orjson.dumps(event.text)) if event.text \
                else b""
        if isinstance(event, canonical.ToolCallDelta):
            return self._delta(b'{"tool_calls":[{"index":%d,"function":{"arguments":%b}}]}' % (
                event.index, orjson.dumps(event.arguments)))
        if isinstance(event, canonical.ToolCallStart):
            call = {"index": event.index, "id": event.id, "type": "function",
                    "function": {"name": event.name, "arguments": ""}}
            return self._delta(b'{"tool_calls":[%b]}' % orjson.dumps(call))
        if isinstance(event, canonical.Start):
            return self._role_chunk()
        if isinstance(event, canonical.UsageEvent):
            self._usage = event.usage
        elif isinstance(event, canonical.Finish):
            return self._finish(event.stop_reason)
        elif isinstance(event, canonical.Error):
            return self.render_error(event)
        return b""  # also for BlockStop: Chat has no content blocks to close

    def render_error(self, error: canonical.Error) -> bytes:
        """The Chat in-stream error event, then ``[DONE]``; ends the stream."""
        if self._ended:
            return b""
        self._ended = True
        return stream_error_event(error)

    def _role_chunk(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return self._prefix + _CHOICE_HEAD + _ROLE_DELTA + _CHOICE_TAIL

    def _delta(self, delta: bytes) -> bytes:
        return self._role_chunk() + self._prefix + _CHOICE_HEAD + delta + _CHOICE_TAIL

    def _finish(self, stop_reason: StopReason) -> bytes:
        self._ended = True
        out = [self._role_chunk(), self._prefix, _CHOICE_HEAD,
               b'{},"logprobs":null,"finish_reason":"%b"}]}\n\n'
               % FINISH_REASONS[stop_reason].encode()]
        if self.include_usage and self._usage is not None:
            out += [self._prefix, b'],"usage":', orjson.dumps(render_usage(self._usage)),
                    b"}\n\n"]
        out.append(sse.DONE)
        return b"".join(out)
