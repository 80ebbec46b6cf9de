"""Canonical events → a Responses event stream the official SDKs accept."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import orjson

from hopbase import canonical, sse
from hopbase.canonical import (
    ToolCall,
)
from hopbase.protocols.openai_responses.wire import (
    MINTED_REASONING,
    finished_status,
    function_call_item,
    message_item,
    mint,
    reasoning_item,
    render_usage,
    response_object,
)


def _delta_head(kind: str) -> bytes:
    return f'event: {kind}\ndata: {{"type":"{kind}","sequence_number":'.encode()


_TEXT_DELTA_HEAD = _delta_head("response.output_text.delta")
_REASONING_DELTA_HEAD = _delta_head("response.reasoning_summary_text.delta")
_ARGUMENTS_DELTA_HEAD = _delta_head("response.function_call_arguments.delta")
_TEXT_DELTA_TAIL = b',"logprobs":[]}\n\n'
_DELTA_TAIL = b"}\n\n"


@attrs.define
class _Item:
    """One output item the renderer has opened: a message, reasoning or a function call."""

    kind: str
    id: str
    output_index: int
    delta_middle: bytes  # the constant JSON between sequence_number and the delta text
    call_id: str = ""
    name: str = ""
    texts: list[str] = attrs.field(factory=list)
    signature: str | None = None
    summary_started: bool = False
    done: bool = False

    def snapshot(self, status: str) -> dict[str, Any]:
        """This item as a whole output item with ``status``."""
        text = "".join(self.texts)
        if self.kind == "message":
            return message_item(self.id, text, status)
        if self.kind == "function_call":
            return function_call_item(self.id, ToolCall(self.call_id, self.name, text), status)
        return reasoning_item(self.id, text, self.signature, status)


def _middle(item_id: str, output_index: int, index_field: str | None) -> bytes:
    index = f',"{index_field}":0' if index_field else ""
    return f',"item_id":"{item_id}","output_index":{output_index}{index},"delta":'.encode()


@attrs.define
class StreamRenderer:
    """Renders canonical events as a Responses event stream the official SDKs accept.

    Usage is native to Responses, so ``include_usage`` changes nothing: the final
    response object carries usage whenever the upstream reported it.
    """

    model: str
    include_usage: bool = True
    request_id: str = ""
    response_id: str = attrs.field(init=False, default="")
    created_at: int = attrs.field(init=False, factory=lambda: int(time.time()))
    _sequence: int = attrs.field(init=False, default=0)
    _items: list[_Item] = attrs.field(init=False, factory=list)
    _open: _Item | None = attrs.field(init=False, default=None)
    _tools: dict[int, _Item] = attrs.field(init=False, factory=dict)
    _usage: canonical.Usage | None = attrs.field(init=False, default=None)
    _started: bool = attrs.field(init=False, default=False)
    _finished: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        suffix = self.request_id.removeprefix("req_")
        self.response_id = f"resp_{suffix}" if suffix else mint("resp")

    def render(self, event: canonical.Event) -> bytes:
        """Zero or more whole SSE events for ``event``."""
        if self._finished:
            return b""
        if isinstance(event, canonical.Error):
            return self.render_error(event)
        chunks: list[bytes] = []
        if not self._started:
            self._start(chunks, event if isinstance(event, canonical.Start) else None)
        handler = _RENDER_HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, chunks)
        return b"".join(chunks)

    def render_error(self, error: canonical.Error) -> bytes:
        """``event: response.failed`` (status failed, ``error {code, message}``), ending it."""
        if self._finished:
            return b""
        chunks: list[bytes] = []
        if not self._started:
            self._start(chunks, None)
        self._finished = True
        code = "rate_limit_exceeded" if error.type == "rate_limit_error" else "server_error"
        output = [item.snapshot("completed" if item.done else "incomplete") for item in self._items]
        response = self._response("failed", output, {"code": code, "message": error.message})
        chunks.append(self._event("response.failed", {"response": response}))
        return b"".join(chunks)

    def _next(self) -> int:
        sequence = self._sequence
        self._sequence += 1
        return sequence

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self._next(), **fields}
        return sse.encode(orjson.dumps(payload), kind)

    def _response(self, status: str, output: list[dict[str, Any]],
                  error: dict[str, str] | None = None,
                  incomplete: dict[str, str] | None = None) -> dict[str, Any]:
        usage = render_usage(self._usage) if self._usage is not None else None
        return response_object(self.response_id, self.created_at, self.model, status, output,
                                usage, error, incomplete)

    def _start(self, chunks: list[bytes], start: canonical.Start | None) -> None:
        self._started = True
        if start is not None and start.id.startswith("resp_"):
            self.response_id = start.id
        response = self._response("in_progress", [])
        chunks.append(self._event("response.created", {"response": response}))
        chunks.append(self._event("response.in_progress", {"response": response}))

    def _open_item(self, kind: str, chunks: list[bytes], call: ToolCall | None = None) -> _Item:
        """Close the open item and open a new one of ``kind``."""
        self._close(chunks)
        prefix, index_field = {"message": ("msg", "content_index"),
                               "reasoning": (MINTED_REASONING, "summary_index"),
                               "function_call": ("fc", None)}[kind]
        item_id, output_index = mint(prefix), len(self._items)
        item = _Item(kind, item_id, output_index, _middle(item_id, output_index, index_field),
                     call.id if call else "", call.name if call else "")
        self._items.append(item)
        self._open = item
        added = item.snapshot("in_progress")
        if kind == "message":
            added["content"] = []  # the part arrives in content_part.added
        chunks.append(self._event("response.output_item.added", {
            "output_index": output_index, "item": added}))
        if kind == "message":
            chunks.append(self._event("response.content_part.added", {
                "item_id": item_id, "output_index": output_index, "content_index": 0,
                "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}))
        return item

    def _current(self, kind: str, chunks: list[bytes]) -> _Item:
        if self._open is not None and self._open.kind == kind:
            return self._open
        return self._open_item(kind, chunks)

    def _on_text(self, event: canonical.TextDelta, chunks: list[bytes]) -> None:
        if not event.text:
            return
        item = self._current("message", chunks)
        item.texts.append(event.text)
        chunks.append(b"".join((_TEXT_DELTA_HEAD, b"%d" % self._next(), item.delta_middle,
                                orjson.dumps(event.text), _TEXT_DELTA_TAIL)))

    def _on_reasoning(self, event: canonical.ReasoningDelta, chunks: list[bytes]) -> None:
        if not event.text and not event.signature:
            return
        item = self._current("reasoning", chunks)
        if event.signature:
            item.signature = event.signature
        if not event.text:
            return
        if not item.summary_started:
            item.summary_started = True
            chunks.append(self._event("response.reasoning_summary_part.added", {
                "item_id": item.id, "output_index": item.output_index, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""}}))
        item.texts.append(event.text)
        chunks.append(b"".join((_REASONING_DELTA_HEAD, b"%d" % self._next(), item.delta_middle,
                                orjson.dumps(event.text), _DELTA_TAIL)))

    def _on_tool_start(self, event: canonical.ToolCallStart, chunks: list[bytes]) -> None:
        call = ToolCall(event.id, event.name, "")
        self._tools[event.index] = self._open_item("function_call", chunks, call)

    def _on_tool_delta(self, event: canonical.ToolCallDelta, chunks: list[bytes]) -> None:
        item = self._tools.get(event.index)
        if item is None or not event.arguments:
            return
        item.texts.append(event.arguments)
        chunks.append(b"".join((_ARGUMENTS_DELTA_HEAD, b"%d" % self._next(), item.delta_middle,
                                orjson.dumps(event.arguments), _DELTA_TAIL)))

    def _on_block_stop(self, event: canonical.BlockStop, chunks: list[bytes]) -> None:
        self._close(chunks)

    def _on_usage(self, event: canonical.UsageEvent, chunks: list[bytes]) -> None:
        self._usage = event.usage

    def _on_finish(self, event: canonical.Finish, chunks: list[bytes]) -> None:
        self._close(chunks)
        self._finished = True
        status, incomplete = finished_status(event.stop_reason)
        output = [item.snapshot("completed") for item in self._items]
        response = self._response(status, output, incomplete=incomplete)
        chunks.append(self._event(f"response.{status}", {"response": response}))

    def _close(self, chunks: list[bytes]) -> None:
        item = self._open
        if item is None:
            return
        self._open, item.done = None, True
        text, where = "".join(item.texts), {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "message":
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
            chunks.append(self._event("response.output_text.done", {
                **where, "content_index": 0, "text": text, "logprobs": []}))
            chunks.append(self._event("response.content_part.done", {
                **where, "content_index": 0, "part": part}))
        elif item.kind == "function_call":
            chunks.append(self._event("response.function_call_arguments.done", {
                **where, "arguments": text}))
        elif item.summary_started:
            chunks.append(self._event("response.reasoning_summary_text.done", {
                **where, "summary_index": 0, "text": text}))
            chunks.append(self._event("response.reasoning_summary_part.done", {
                **where, "summary_index": 0, "part": {"type": "summary_text", "text": text}}))
        chunks.append(self._event("response.output_item.done", {
            "output_index": item.output_index, "item": item.snapshot("completed")}))


_RENDER_HANDLERS: dict[type, Callable[[StreamRenderer, Any, list[bytes]], None]] = {
    canonical.TextDelta: StreamRenderer._on_text,
    canonical.ReasoningDelta: StreamRenderer._on_reasoning,
    canonical.ToolCallStart: StreamRenderer._on_tool_start,
    canonical.ToolCallDelta: StreamRenderer._on_tool_delta,
    canonical.BlockStop: StreamRenderer._on_block_stop,
    canonical.UsageEvent: StreamRenderer._on_usage,
    canonical.Finish: StreamRenderer._on_finish,
}
