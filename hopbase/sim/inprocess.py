"""The simulated provider without a socket: what ``provider: simulated`` answers.

`simulated_request` returns a `SimulatedResponse` that looks like an upstream HTTP
answer (status, headers, body chunks) so the proxy has one path for every
deployment. The body is rendered up front by the protocol modules from a
`SimulatedAnswer`; only the waiting happens as the chunks are read, each chunk
released at its scheduled offset from the request's start (asyncio.sleep).

Scripted failures (`planned_failure`): an error status answers at once with the
protocol's error body (and ``Retry-After`` when ``retry_after_s`` is set); a reset
raises `ConnectionResetError` after ``after_chunks`` chunks; a stall waits forever
after them. Non-stream answers fail at the time their last kept chunk would have
been due.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Mapping
from types import ModuleType
from typing import Any

import orjson

from hopbase import errors, sse
from hopbase.config import SimulatedConfig
from hopbase.protocols import BY_NAME
from hopbase.sim.generator import (
    Failure,
    RequestCounter,
    SimulatedAnswer,
    SimulatedSettings,
    planned_failure,
)

JSON_HEADERS = {"content-type": "application/json"}
STREAM_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}

# Answer ids in each provider's style.
_ID_PREFIXES = {
    "openai_chat": "chatcmpl-", "openai_responses": "resp_", "anthropic_messages": "msg_",
}

# status -> (error type in Anthropic's words, OpenAI error code)
_ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("not_found_error", "model_not_found"),
    413: ("request_too_large", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    503: ("overloaded_error", None),
    529: ("overloaded_error", None),
}


class SimulatedResponse:
    """A simulated upstream answer, read like an HTTP one (`hopbase.upstream.UpstreamResponse`)."""

    __slots__ = ("status", "headers", "stream", "_chunks", "_failure", "_started_at", "_closed")

    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        chunks: list[tuple[float, bytes]],
        stream: bool,
        failure: Failure | None = None,
    ) -> None:
        self.status = status
        self.headers: Mapping[str, str] = headers
        self.stream = stream
        self._chunks = chunks
        self._failure = failure
        self._started_at = asyncio.get_running_loop().time()
        self._closed = False

    async def iter_chunks(self) -> AsyncGenerator[bytes, None]:
        """The body, chunk by chunk, each at its scheduled time."""
        kept = self._kept_chunks()
        loop = asyncio.get_running_loop()
        for at_s, chunk in kept:
            delay = self._started_at + at_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._closed:
                return
            yield chunk
        await self._fail()

    async def read(self) -> bytes:
        """The whole body, once all of it is due."""
        return b"".join([chunk async for chunk in self.iter_chunks()])

    def close(self) -> None:
        """Stop the answer; a reader gets no more chunks."""
        self._closed = True

    def _kept_chunks(self) -> list[tuple[float, bytes]]:
        if self._failure is None or self._failure.kind == "status":
            return self._chunks
        if self.stream:
            return self._chunks[: self._failure.after_chunks]
        return []

    async def _fail(self) -> None:
        if self._failure is None or self._failure.kind == "status" or self._closed:
            return
        if not self.stream and self._chunks:
            # The whole body was due at its one chunk's time; fail no earlier than that.
            delay = self._started_at + self._chunks[0][0] - asyncio.get_running_loop().time()
            await asyncio.sleep(max(0.0, delay))
        if self._failure.kind == "reset":
            raise ConnectionResetError("simulated connection reset")
        await asyncio.Event().wait()


def _new_id() -> str:
    return os.urandom(12).hex()


def error_body(protocol: str, status: int, message: str) -> bytes:
    """The error body a real provider of ``protocol`` sends with ``status``."""
    error_type, code = _ERROR_TYPES.get(
        status, ("api_error" if status >= 500 else "invalid_request_error", None)
    )
    error = errors.GatewayError(message, status=status, code=code)
    error.type = error_type
    return orjson.dumps(BY_NAME[protocol].render_error(error))


def _id_header(protocol: str, request_id: str) -> dict[str, str]:
    name = "request-id" if protocol == "anthropic_messages" else "x-request-id"
    return {name: "req_" + request_id}


def _status_response(
    protocol: str, failure: Failure, request_id: str
) -> SimulatedResponse:
    headers = {**JSON_HEADERS, **_id_header(protocol, request_id)}
    if failure.retry_after_s is not None:
        headers["retry-after"] = f"{failure.retry_after_s:g}"
    body = error_body(protocol, failure.status, f"simulated failure ({failure.status})")
    return SimulatedResponse(failure.status, headers, [(0.0, body)], stream=False)


def _stream_chunks(
    module: ModuleType, answer: SimulatedAnswer, model: str, include_usage: bool, request_id: str
) -> list[tuple[float, bytes]]:
    renderer = module.StreamRenderer(model, include_usage=include_usage, request_id=request_id)
    chunks = []
    for step in answer.steps:
        chunk = b"".join([renderer.render(event) for event in step.events])
        if module.NAME == "openai_responses" and chunk.endswith(sse.DONE):
            # A real Responses upstream ends at response.completed, without [DONE].
            chunk = chunk[: -len(sse.DONE)]
        if chunk:
            chunks.append((step.at_s, chunk))
    return chunks


def _include_usage(protocol: str, body: Mapping[str, Any]) -> bool:
    """Chat sends its usage chunk only when asked; the other protocols always carry usage."""
    if protocol != "openai_chat":
        return True
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


async def simulated_request(
    protocol: str,
    body: Mapping[str, Any],
    settings: SimulatedSettings | None,
    counter_state: RequestCounter,
) -> SimulatedResponse:
    """Answer wire request ``body`` of ``protocol`` as a simulated deployment would.

    Args:
        protocol: openai_chat | openai_responses | anthropic_messages.
        body: the upstream wire JSON (its ``model`` is echoed back).
        settings: timing, text and scripted failures (`hopbase.config.SimulatedConfig`);
            None means the defaults.
        counter_state: this deployment's `RequestCounter` (keep one per deployment).
    """
    module = BY_NAME[protocol]
    settings = settings if settings is not None else SimulatedConfig()
    request_id = _new_id()
    failure = planned_failure(settings, counter_state.next())
    if failure is not None and failure.kind == "status":
        return _status_response(protocol, failure, request_id)
    model = str(body.get("model") or "simulated")
    answer_id = _ID_PREFIXES[protocol] + request_id
    answer = SimulatedAnswer.create(settings, body, model, answer_id)
    id_header = _id_header(protocol, request_id)
    if body.get("stream") is True:
        chunks = _stream_chunks(module, answer, model, _include_usage(protocol, body), request_id)
        return SimulatedResponse(200, {**STREAM_HEADERS, **id_header}, chunks, True, failure)
    whole = orjson.dumps(module.render_response(answer.response, model))
    chunks = [(answer.duration_s, whole)]
    return SimulatedResponse(200, {**JSON_HEADERS, **id_header}, chunks, False, failure)
