"""A scripted fake upstream: one loopback aiohttp server that plays many deployments.

The first path segment names the deployment: deployment ``a`` answers OpenAI at
``{url}/a/v1/chat/completions``, ``/responses``, ``/images/generations`` and
``/audio/transcriptions`` (`tests.fakes.media`) and Anthropic at ``{url}/a/v1/messages``.
Tests queue `Reply` values per deployment with `FakeUpstream.script`; when the queue
is empty `FakeUpstream.default` is used, else a realistic successful answer in the
protocol of the path whose text says which deployment served it ("Hello from a").
Every response carries the header ``x-fake-deployment``.

Each request is recorded (`Recorded`) and so is the life of its connection
(`ConnectionLog`): when the last chunk was written and when the client closed the
connection. That is how tests prove that HopBase closes an upstream at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs
import orjson
from aiohttp import web

import tests.fakes as wire
from hopbase.sim.server import reset_connection
from tests.fakes import golden_events, media

__all__ = ["ConnectionLog", "FakeUpstream", "Recorded", "Reply", "golden_events"]

_THEN = ("end", "reset", "eof", "stall")


def _without_terminal(events: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """``events`` minus a trailing terminal event, so a cut-off stream really is cut off."""
    if events and wire.is_terminal(events[-1]):
        return events[:-1]
    return events


@attrs.frozen
class Reply:
    """One scripted answer of a deployment; build it with the class methods."""

    kind: str
    events: tuple[bytes, ...] = ()
    status_code: int = 200
    body: Any = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    delay_s: float = 0.0
    first_delay_s: float = 0.0
    then: str = "end"
    raw: bytes = b""
    chunk_size: int = 1
    text: str | None = None

    @classmethod
    def stream(
        cls,
        events: Iterable[bytes],
        delay_s: float = 0.0,
        first_delay_s: float = 0.0,
        then: str = "end",
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """A 200 SSE answer writing ``events`` (raw bytes) in order, ``delay_s`` apart.

        ``first_delay_s`` passes between the response headers and the first event.
        ``then`` says how the stream ends: ``end`` cleanly; ``reset`` with a TCP reset;
        ``eof`` with a clean end of body and connection but no terminal event;
        ``stall`` by writing nothing more until the client goes away. For every
        ``then`` except ``end`` a trailing terminal event (``[DONE]``,
        ``message_stop``, ``response.completed``) is dropped from ``events``.
        """
        if then not in _THEN:
            raise ValueError(f"then must be one of {_THEN}, not {then!r}")
        chosen = tuple(events)
        if then != "end":
            chosen = _without_terminal(chosen)
        return cls(
            "stream", chosen, headers=dict(headers or {}), delay_s=delay_s,
            first_delay_s=first_delay_s, then=then,
        )

    @classmethod
    def golden(
        cls,
        filename: str,
        count: int | None = None,
        delay_s: float = 0.0,
        first_delay_s: float = 0.0,
        then: str = "end",
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """`stream` of the events of ``tests/fakes/golden/<filename>`` (the first ``count``)."""
        events = golden_events(filename)[:count]
        return cls.stream(events, delay_s, first_delay_s, then, headers)

    @classmethod
    def answer(
        cls, text: str | None = None, delay_s: float = 0.0, first_delay_s: float = 0.0
    ) -> Reply:
        """The realistic successful answer in the protocol of the path (streaming if asked).

        ``text`` defaults to "Hello from <deployment>"; ``delay_s`` passes between
        stream events (or before a non-stream answer), ``first_delay_s`` before the first.
        """
        return cls("answer", text=text, delay_s=delay_s, first_delay_s=first_delay_s)

    @classmethod
    def status(
        cls,
        code: int,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> Reply:
        """An error answer; ``body`` defaults to the realistic error JSON of the path's protocol."""
        all_headers = dict(headers or {})
        if retry_after is not None:
            all_headers["retry-after"] = f"{retry_after:g}"
        return cls("status", status_code=code, body=body, headers=all_headers)

    @classmethod
    def json(
        cls,
        body: Any,
        status: int = 200,
        delay_s: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """A JSON answer with ``body``, after ``delay_s``."""
        all_headers = dict(headers or {})
        return cls("json", status_code=status, body=body, delay_s=delay_s, headers=all_headers)

    @classmethod
    def stall_before_headers(cls, seconds: float) -> Reply:
        """Send nothing for ``seconds``, then the default successful answer."""
        return cls("stall_before_headers", delay_s=seconds)

    @classmethod
    def headers_then_eof(cls) -> Reply:
        """200 with SSE headers, then the body ends and the connection closes: no event."""
        return cls("headers_then_eof")

    @classmethod
    def chunked(cls, raw: bytes, chunk_size: int = 1, delay_s: float = 0.0) -> Reply:
        """A 200 SSE answer of exactly ``raw``, written ``chunk_size`` bytes per write."""
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        return cls("chunked", raw=raw, chunk_size=chunk_size, delay_s=delay_s)

    @classmethod
    def redirect(cls, location: str) -> Reply:
        """A 307 redirect to ``location`` (HopBase must never follow it)."""
        return cls("redirect", status_code=307, headers={"location": location})


@attrs.frozen
class Recorded:
    """One request as the fake received it; header names are lower case.

    A multipart body is recorded as a dict of its fields: text as ``str``, files as
    `tests.fakes.media.FormFile`.
    """

    deployment: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | bytes
    at: float


@attrs.define
class ConnectionLog:
    """The life of one request's connection, in `time.monotonic` seconds.

    ``last_write_at`` is when the fake last wrote to it (headers or a chunk);
    ``closed_at`` is when the client closed it or the fake saw it gone while writing.
    """

    deployment: str
    path: str
    opened_at: float
    last_write_at: float | None = None
    closed_at: float | None = None
    _closed: asyncio.Event = attrs.field(init=False, factory=asyncio.Event, repr=False, eq=False)

    def mark_closed(self) -> None:
        """Record the close; only the first call counts."""
        if self.closed_at is None:
            self.closed_at = time.monotonic()
            self._closed.set()

    async def wait_closed(self) -> None:
        """Return once the connection is closed."""
        await self._closed.wait()


@attrs.define
class _Exchange:
    """One request being answered: what arrived and the response being written."""

    request: web.BaseRequest
    deployment: str
    path: str
    body: dict[str, Any] | bytes
    log: ConnectionLog
    response: web.StreamResponse | None = None

    @property
    def protocol(self) -> str:
        return wire.protocol_of(self.path)

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers every answer carries, plus ``extra``."""
        id_header = "request-id" if self.protocol == "anthropic_messages" else "x-request-id"
        headers = {"x-fake-deployment": self.deployment, id_header: wire.new_id("req_")}
        return {**headers, **(extra or {})}

    def json(
        self, body: Any, status: int = 200, extra: Mapping[str, str] | None = None
    ) -> web.Response:
        """A whole JSON answer (written once the handler returns it)."""
        self.log.last_write_at = time.monotonic()
        headers = self.headers({"content-type": "application/json", **(extra or {})})
        return web.Response(status=status, body=orjson.dumps(body), headers=headers)

    async def open_stream(
        self, extra: Mapping[str, str], close: bool = False
    ) -> web.StreamResponse:
        """Send 200 SSE headers; with ``close`` the connection closes after the body."""
        headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
        response = web.StreamResponse(status=200, headers=self.headers({**headers, **extra}))
        if close:
            response.force_close()
        self.response = response
        await response.prepare(self.request)
        self.log.last_write_at = time.monotonic()
        return response

    async def write(self, data: bytes) -> None:
        assert self.response is not None
        await self.response.write(data)
        self.log.last_write_at = time.monotonic()

    def reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0), not a clean close."""
        reset_connection(self.request)

    async def finish(self, then: str) -> web.StreamResponse:
        assert self.response is not None
        if then == "reset":
            self.reset()
        elif then == "stall":
            # Never resolves: the handler is cancelled when the client goes away.
            await asyncio.get_running_loop().create_future()
        else:
            await self.response.write_eof()
        return self.response


async def _serve_stream(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    await exchange.open_stream(reply.headers, close=reply.then == "eof")
    for index, event in enumerate(reply.events):
        delay = reply.first_delay_s if index == 0 else reply.delay_s
        if delay > 0:
            await asyncio.sleep(delay)
        await exchange.write(event)
    return await exchange.finish(reply.then)


async def _serve_answer(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    body = exchange.body if isinstance(exchange.body, dict) else {}
    text = reply.text if reply.text is not None else f"Hello from {exchange.deployment}"
    if exchange.path.endswith("/models"):
        return exchange.json(wire.models_list())
    if media.is_media(exchange.path):
        return await _serve_media(exchange, reply, body, text)
    if exchange.protocol == "unknown":
        return exchange.json(wire.error_body("openai_chat", 404, f"no route {exchange.path}"), 404)
    if body.get("stream"):
        events = wire.stream_answer(exchange.protocol, body, text)
        stream = Reply.stream(events, reply.delay_s, reply.first_delay_s, headers=reply.headers)
        return await _serve_stream(exchange, stream)
    await asyncio.sleep(reply.first_delay_s + reply.delay_s)
    return exchange.json(wire.json_answer(exchange.protocol, body, text), extra=reply.headers)


async def _serve_media(
    exchange: _Exchange, reply: Reply, body: dict[str, Any], text: str
) -> web.StreamResponse:
    """The realistic Images or Audio transcription answer, streamed when asked."""
    images = exchange.path.endswith(media.IMAGES_PATH)
    if media.wants_stream(body):
        events = media.image_stream(body) if images else media.transcript_stream(text)
        stream = Reply.stream(events, reply.delay_s, reply.first_delay_s, headers=reply.headers)
        return await _serve_stream(exchange, stream)
    await asyncio.sleep(reply.first_delay_s + reply.delay_s)
    if images:
        return exchange.json(media.image_answer(body, text), extra=reply.headers)
    content, content_type = media.transcript_answer(body, text)
    exchange.log.last_write_at = time.monotonic()
    headers = exchange.headers({"content-type": content_type, **reply.headers})
    return web.Response(body=content, headers=headers)


async def _serve_status(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    body = reply.body
    if body is None:
        message = f"fake status {reply.status_code} from {exchange.deployment}"
        body = wire.error_body(exchange.protocol, reply.status_code, message)
    return exchange.json(body, reply.status_code, reply.headers)


async def _serve_json(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    if reply.delay_s > 0:
        await asyncio.sleep(reply.delay_s)
    return exchange.json(reply.body, reply.status_code, reply.headers)


async def _serve_stall_before_headers(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    await asyncio.sleep(reply.delay_s)
    return await _serve_answer(exchange, Reply.answer())


async def _serve_headers_then_eof(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    await exchange.open_stream(reply.headers, close=True)
    return await exchange.finish("eof")


async def _serve_chunked(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    await exchange.open_stream(reply.headers)
    for start in range(0, len(reply.raw), reply.chunk_size):
        await exchange.write(reply.raw[start : start + reply.chunk_size])
        # Yield (or wait) between writes so each piece leaves as its own segment.
        await asyncio.sleep(reply.delay_s)
    return await exchange.finish("end")


async def _serve_redirect(exchange: _Exchange, reply: Reply) -> web.StreamResponse:
    return web.Response(status=reply.status_code, headers=exchange.headers(reply.headers))


_SERVERS: dict[str, Callable[[_Exchange, Reply], Awaitable[web.StreamResponse]]] = {
    "stream": _serve_stream,
    "answer": _serve_answer,
    "status": _serve_status,
    "json": _serve_json,
    "stall_before_headers": _serve_stall_before_headers,
    "headers_then_eof": _serve_headers_then_eof,
    "chunked": _serve_chunked,
    "redirect": _serve_redirect,
}


class _TrackingServer(web.Server):
    """A low-level aiohttp server that reports every lost connection."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        on_lost: Callable[[object], None],
    ) -> None:
        super().__init__(handler, handler_cancellation=True)
        self._on_lost = on_lost

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        self._on_lost(handler)
        super().connection_lost(handler, exc)


@attrs.define
class FakeUpstream:
    """The fake: ``await start()``, point deployments at `base_url`, ``await close()``."""

    _runner: web.ServerRunner | None = None
    _port: int = 0
    _scripts: dict[str, deque[Reply]] = attrs.field(factory=dict)
    _defaults: dict[str, Reply] = attrs.field(factory=dict)
    _requests: list[Recorded] = attrs.field(factory=list)
    _connections: list[ConnectionLog] = attrs.field(factory=list)
    _open: dict[object, list[ConnectionLog]] = attrs.field(factory=dict)

    async def start(self) -> None:
        """Listen on a free loopback port."""
        server = _TrackingServer(self._handle, self._connection_lost)
        runner = web.ServerRunner(server, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def close(self) -> None:
        """Stop listening and drop every connection (stalled handlers are cancelled)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._port}"

    def base_url(self, name: str, protocol: str = "openai") -> str:
        """The ``base_url`` of deployment ``name`` in each official SDK's convention."""
        if protocol not in ("openai", "anthropic"):
            raise ValueError(f"protocol must be openai or anthropic, not {protocol!r}")
        return f"{self.url}/{name}/v1" if protocol == "openai" else f"{self.url}/{name}"

    def script(self, name: str, *replies: Reply) -> None:
        """Queue ``replies`` for deployment ``name``; they are used once each, in order."""
        self._scripts.setdefault(name, deque()).extend(replies)

    def default(self, name: str, reply: Reply) -> None:
        """What deployment ``name`` answers once its script is used up."""
        self._defaults[name] = reply

    def requests(self, name: str | None = None) -> list[Recorded]:
        """Every request received (by deployment ``name``), oldest first."""
        return [record for record in self._requests if name is None or record.deployment == name]

    def connections(self, name: str | None = None) -> list[ConnectionLog]:
        """One `ConnectionLog` per request received (by ``name``), oldest first."""
        return [log for log in self._connections if name is None or log.deployment == name]

    async def wait_closed(self, name: str, timeout: float = 2.0) -> float:
        """Wait for the connection of ``name``'s last request to close.

        Returns:
            Seconds from the last write to that connection to its close.
        Raises:
            AssertionError: no request reached ``name``.
            TimeoutError: the connection is still open after ``timeout`` seconds.
        """
        logs = self.connections(name)
        assert logs, f"no request reached deployment {name!r}"
        log = logs[-1]
        try:
            await asyncio.wait_for(log.wait_closed(), timeout)
        except TimeoutError:
            raise TimeoutError(f"connection of {name!r} still open after {timeout} s") from None
        assert log.closed_at is not None
        return log.closed_at - (log.last_write_at or log.opened_at)

    def _next_reply(self, name: str) -> Reply:
        queue = self._scripts.get(name)
        if queue:
            return queue.popleft()
        return self._defaults.get(name) or Reply.answer()

    def _connection_lost(self, handler: object) -> None:
        for log in self._open.pop(handler, []):
            log.mark_closed()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        deployment, _, rest = request.path.lstrip("/").partition("/")
        body: dict[str, Any] | bytes
        if request.content_type == "multipart/form-data":
            body = await media.read_form(request)  # request.read() stops at 1 MiB
        else:
            body = wire.parse_body(await request.read())
        now = time.monotonic()
        log = ConnectionLog(deployment, "/" + rest, now)
        self._connections.append(log)
        self._open.setdefault(request.protocol, []).append(log)
        headers = {key.lower(): value for key, value in request.headers.items()}
        self._requests.append(Recorded(deployment, log.path, headers, body, now))
        exchange = _Exchange(request, deployment, log.path, body, log)
        reply = self._next_reply(deployment)
        try:
            return await _SERVERS[reply.kind](exchange, reply)
        except asyncio.CancelledError:
            log.mark_closed()
            raise
        except ConnectionResetError:
            log.mark_closed()
            if exchange.response is None:
                raise
            return exchange.response
