"""A lean HTTP/1.1 load generator on asyncio protocols: closed loops, streams, open streams.

It shares a core with the mock, so it parses only what it must: the status line,
``Content-Length`` or the chunked framing, and (for streams) where the first
output arrives. Time to first token is the time from writing the request to the
first received bytes that carry output text (``"content":"x…"``), so a role
chunk or keepalive comment sent earlier does not count.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import cast

import attrs

_OUTPUT_MARKER = b'"content":"'
_CONNECT_ERRORS = (OSError, asyncio.IncompleteReadError, ConnectionError)


@attrs.frozen
class Target:
    """Where requests go: host, port, path and the client key (empty for none)."""

    host: str
    port: int
    path: str
    key: str = ""

    def request(self, body: bytes) -> bytes:
        """The whole HTTP/1.1 POST request carrying ``body``."""
        auth = f"Authorization: Bearer {self.key}\r\n" if self.key else ""
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body


@attrs.frozen
class Exchange:
    """One answered request: status, and `time.perf_counter` times of send, first output and end.

    Not the event loop's clock: uvloop's ``loop.time()`` moves in whole milliseconds.
    """

    status: int
    sent_at: float
    first_output_at: float | None
    finished_at: float

    @property
    def latency_s(self) -> float:
        """Seconds from writing the request to the end of the answer."""
        return self.finished_at - self.sent_at

    @property
    def first_output_s(self) -> float | None:
        """Seconds from writing the request to the first output text, if any came."""
        return None if self.first_output_at is None else self.first_output_at - self.sent_at


@attrs.define
class LoadResult:
    """What one load run saw: answers, failures, and its wall-clock length."""

    exchanges: list[Exchange] = attrs.field(factory=list)
    failures: int = 0
    elapsed_s: float = 0.0

    @property
    def succeeded(self) -> int:
        """Answers with status 200."""
        return sum(1 for exchange in self.exchanges if exchange.status == 200)

    @property
    def errors(self) -> int:
        """Connection failures plus answers with another status."""
        return self.failures + len(self.exchanges) - self.succeeded

    @property
    def per_second(self) -> float:
        """Successful answers per second of the run."""
        return self.succeeded / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def latencies_s(self) -> list[float]:
        """Latency of every successful answer, in seconds."""
        return [each.latency_s for each in self.exchanges if each.status == 200]

    def first_outputs_s(self) -> list[float]:
        """Time to first output of every successful answer that had output, in seconds."""
        return [
            value
            for each in self.exchanges
            if each.status == 200 and (value := each.first_output_s) is not None
        ]


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile ``share`` (0-100) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(share / 100.0 * len(ordered)))
    return ordered[rank - 1]


class ResponseReader:
    """Parses one HTTP/1.1 response incrementally (head, then Content-Length or chunked body)."""

    def __init__(self) -> None:
        self.status = 0
        self.first_output_at: float | None = None
        self._buffer = bytearray()
        self._head_done = False
        self._chunked = False
        self._remaining = 0
        self._searched = 0

    def feed(self, data: bytes, now: float) -> bool:
        """Take received bytes; True once the whole response is in."""
        self._buffer += data
        if self.first_output_at is None and self._has_output():
            self.first_output_at = now
        if not self._head_done and not self._read_head():
            return False
        return self._body_done()

    def _has_output(self) -> bool:
        start = max(0, self._searched - len(_OUTPUT_MARKER))
        self._searched = len(self._buffer)
        while True:
            found = self._buffer.find(_OUTPUT_MARKER, start)
            if found < 0:
                return False
            after = found + len(_OUTPUT_MARKER)
            if after >= len(self._buffer):
                # The byte after the marker is not here yet: look again on the next read.
                self._searched = found
                return False
            if self._buffer[after] != ord('"'):
                return True
            start = after

    def _read_head(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self._buffer[:end]).lower()
        self.status = int(head[9:12])
        self._chunked = b"\r\ntransfer-encoding: chunked" in head
        start = head.find(b"\r\ncontent-length:")
        if start >= 0:
            line_end = head.find(b"\r\n", start + 2)
            self._remaining = int(head[start + 17 : line_end if line_end >= 0 else len(head)])
        del self._buffer[: end + 4]
        self._searched = 0
        self._head_done = True
        return True

    def _body_done(self) -> bool:
        if not self._chunked:
            return len(self._buffer) >= self._remaining
        # Chunked: skip whole chunks; the zero-size chunk and its CRLF end the body.
        position = 0
        while True:
            line_end = self._buffer.find(b"\r\n", position)
            if line_end < 0:
                break
            size = int(bytes(self._buffer[position:line_end]).split(b";")[0], 16)
            if size == 0:
                return len(self._buffer) >= line_end + 4
            if len(self._buffer) < line_end + 2 + size + 2:
                break
            position = line_end + 2 + size + 2
        del self._buffer[:position]
        self._searched = max(0, self._searched - position)
        return False


class Connection(asyncio.Protocol):
    """One keep-alive client connection; one request at a time."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._reader: ResponseReader | None = None
        self._done: asyncio.Future[None] | None = None
        self._first_output: asyncio.Future[None] | None = None
        self._lost: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        """A connected `Connection` to ``host``:``port``."""
        loop = asyncio.get_running_loop()
        _transport, protocol = await loop.create_connection(cls, host, port)
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, so no isinstance check.
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._lost = exc or ConnectionResetError("connection closed")
        if self._done is not None and not self._done.done():
            self._done.set_exception(self._lost)
            # Streams held open and then closed have no awaiter: mark the error seen
            # (awaiting the future still raises it).
            self._done.exception()
        self._wake_output_waiter()

    def data_received(self, data: bytes) -> None:
        if self._reader is None or self._done is None or self._first_output is None:
            return
        complete = self._reader.feed(data, time.perf_counter())
        if complete or self._reader.first_output_at is not None:
            self._wake_output_waiter()
        if complete and not self._done.done():
            self._done.set_result(None)

    @property
    def open_now(self) -> bool:
        """Whether the connection can still carry a request."""
        return self._transport is not None

    def start(self, request: bytes) -> tuple[float, asyncio.Future[None]]:
        """Write ``request``; return its send time and a future set when the answer is in."""
        if self._transport is None:
            raise ConnectionResetError("connection closed")
        loop = asyncio.get_running_loop()
        self._reader = ResponseReader()
        self._done = loop.create_future()
        self._first_output = loop.create_future()
        sent_at = time.perf_counter()
        self._transport.write(request)
        return sent_at, self._done

    async def send(self, request: bytes) -> Exchange:
        """Send ``request`` and wait for its whole answer."""
        sent_at, done = self.start(request)
        await done
        return self.finished(sent_at)

    def finished(self, sent_at: float) -> Exchange:
        """The `Exchange` of the request started at ``sent_at``, once its answer is in."""
        assert self._reader is not None
        return Exchange(self._reader.status, sent_at, self._reader.first_output_at,
                        time.perf_counter())

    def _wake_output_waiter(self) -> None:
        # A result, never an exception: nobody awaits this future in non-stream runs.
        if self._first_output is not None and not self._first_output.done():
            self._first_output.set_result(None)

    async def wait_first_output(self) -> None:
        """Wait until the current answer carries output.

        Raises:
            ConnectionError: the answer ended, or the connection closed, without output.
        """
        assert self._first_output is not None, "start() was not called"
        await self._first_output
        if self._reader is None or self._reader.first_output_at is None:
            raise ConnectionError("the answer ended without output")

    def close(self) -> None:
        """Close the connection (a client leaving mid-stream)."""
        if self._transport is not None:
            self._transport.close()


async def closed_loop(
    target: Target, body: bytes, concurrency: int, duration_s: float
) -> LoadResult:
    """``concurrency`` workers each sending ``body`` back to back for ``duration_s``."""
    loop = asyncio.get_running_loop()
    result = LoadResult()
    request = target.request(body)
    started = time.perf_counter()
    deadline = loop.time() + duration_s
    await asyncio.gather(*(_worker(target, request, deadline, result)
                           for _ in range(concurrency)))
    result.elapsed_s = time.perf_counter() - started
    return result


async def _worker(target: Target, request: bytes, deadline: float, result: LoadResult) -> None:
    loop = asyncio.get_running_loop()
    connection: Connection | None = None
    while loop.time() < deadline:
        try:
            if connection is None or not connection.open_now:
                connection = await Connection.open(target.host, target.port)
            result.exchanges.append(await connection.send(request))
        except _CONNECT_ERRORS:
            result.failures += 1
            connection = None
            await asyncio.sleep(0.01)
    if connection is not None:
        connection.close()


@attrs.define
class OpenStreams:
    """Streams held open (for memory figures) until `close`."""

    connections: list[Connection] = attrs.field(factory=list)
    failures: int = 0

    def close(self) -> None:
        """Leave every stream, as clients that go away would."""
        for connection in self.connections:
            connection.close()
        self.connections.clear()


async def open_streams(
    target: Target, body: bytes, count: int, streams: OpenStreams, batch: int = 250
) -> None:
    """Open ``count`` more streams into ``streams``, ``batch`` at a time, each until output."""
    request = target.request(body)
    remaining = count
    while remaining > 0:
        size = min(batch, remaining)
        opened = await asyncio.gather(*(_open_one(target, request) for _ in range(size)))
        for connection in opened:
            if connection is None:
                streams.failures += 1
            else:
                streams.connections.append(connection)
        remaining -= size


async def _open_one(target: Target, request: bytes, timeout_s: float = 30.0) -> Connection | None:
    try:
        async with asyncio.timeout(timeout_s):
            connection = await Connection.open(target.host, target.port)
            connection.start(request)
            await connection.wait_first_output()
            return connection
    except (TimeoutError, *_CONNECT_ERRORS):
        return None


async def wait_ready(host: str, port: int, path: str, timeout_s: float = 30.0) -> None:
    """Wait until ``GET path`` answers 200 on ``host``:``port``.

    Raises:
        TimeoutError: it did not within ``timeout_s``.
    """
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    async with asyncio.timeout(timeout_s):
        while not await _answers_ok(host, port, request):
            await asyncio.sleep(0.05)


async def _answers_ok(host: str, port: int, request: bytes) -> bool:
    try:
        connection = await Connection.open(host, port)
        exchange = await connection.send(request)
    except _CONNECT_ERRORS:
        return False  # not listening yet
    connection.close()
    return exchange.status == 200
