"""Helpers of the hardening suite: leak checks, raw loopback peers, client calls.

Every scenario ends with `assert_settled`: no deployment holds an in-flight slot,
the upstream connection pool has no connection checked out, and no task started
by HopBase's code is still alive. Waiting for that uses `eventually`, which polls
real I/O settling (a closed socket is noticed by the event loop, not by a clock).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import orjson

from hopbase import sse
from hopbase.logs import parse_log_query
from tests.conftest import Running

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
MESSAGES_PATH = "/v1/messages"
HOPBASE_ROOT = str(Path(__file__).resolve().parents[2] / "hopbase")


async def eventually(condition: Callable[[], bool], timeout: float = 2.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; its last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def in_flight(running: Running) -> dict[str, int]:
    """In-flight slots per deployment id."""
    return {snapshot.id: snapshot.in_flight for snapshot in running.gateway.router.snapshot()}


def checked_out_connections(running: Running) -> int:
    """Upstream connections currently acquired from HopBase's pool (idle ones excluded)."""
    session = running.gateway.transport._session  # noqa: SLF001 - no public view of the pool
    if session is None:
        return 0
    return len(session.connector._acquired)  # type: ignore[union-attr]  # noqa: SLF001


def hopbase_tasks() -> list[asyncio.Task[Any]]:
    """Live tasks whose coroutine is HopBase code, except the request log's flusher."""
    found = []
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        if code is None or not code.co_filename.startswith(HOPBASE_ROOT):
            continue
        if task.get_name() == "request-log-flush":
            continue
        found.append(task)
    return found


def _leaks(running: Running) -> dict[str, Any]:
    slots = {name: count for name, count in in_flight(running).items() if count}
    return {
        "in_flight": slots,
        "checked_out_connections": checked_out_connections(running),
        "tasks": [t.get_coro() for t in hopbase_tasks() if t is not asyncio.current_task()],
    }


async def assert_settled(running: Running, timeout: float = 2.0) -> None:
    """Assert nothing leaked: slots, upstream connections, HopBase tasks."""
    clean = {"in_flight": {}, "checked_out_connections": 0, "tasks": []}
    await eventually(lambda: _leaks(running) == clean, timeout)
    leaks = _leaks(running)
    assert leaks == clean, f"leaked after {timeout} s: {leaks}"


def events_of(data: bytes) -> list[bytes]:
    """The SSE events in a client body (LF framing), keepalive comments removed."""
    cleaned = data.replace(sse.KEEPALIVE, b"")
    return [event + b"\n\n" for event in cleaned.split(b"\n\n") if event]


async def post(
    url: str, body: Any, path: str = CHAT, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """POST ``body`` (JSON, or bytes as they are) and read the whole answer."""
    payload: dict[str, Any] = {"data": body} if isinstance(body, bytes) else {"json": body}
    async with aiohttp.ClientSession() as session, session.post(
        url + path, headers=headers, **payload
    ) as response:
        return response.status, dict(response.headers), await response.read()


def error_of(body: bytes) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-shaped error body."""
    payload = orjson.loads(body)
    assert set(payload) == {"error"}, payload
    return payload["error"]  # type: ignore[no-any-return]


async def read_records(running: Running) -> list[dict[str, Any]]:
    """Every request record so far, newest first."""
    request_log = running.gateway.request_log
    assert request_log is not None
    await request_log.flush()
    page = await request_log.query(parse_log_query({}))
    return page["data"]  # type: ignore[no-any-return]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@attrs.define
class RawPeer:
    """A raw loopback TCP listener that misbehaves in one way.

    ``mode``: ``close`` reads the request head and closes without answering;
    ``silent`` accepts and never answers; ``backlog`` never accepts at all and has
    its accept queue filled, so new connections cannot even complete.
    """

    mode: str
    port: int = 0
    accepted: int = 0
    _server: asyncio.Server | None = None
    _listener: socket.socket | None = None
    _fillers: list[socket.socket] = attrs.field(factory=list)
    _writers: list[asyncio.StreamWriter] = attrs.field(factory=list)

    async def start(self) -> None:
        if self.mode == "backlog":
            self._start_full_backlog()
            return
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def _start_full_backlog(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        self._listener = listener
        self.port = listener.getsockname()[1]
        # Linux keeps backlog + 1 completed connections; past that, SYNs are dropped.
        for _ in range(2):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", self.port))
            self._fillers.append(filler)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        if self.mode == "close":
            writer.close()
            return
        await reader.read()  # silent: wait until the client goes away

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for sock in [*self._fillers, *([self._listener] if self._listener else [])]:
            sock.close()

    def base_url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1"


@asynccontextmanager
async def raw_peer(mode: str) -> AsyncIterator[RawPeer]:
    """A started `RawPeer`, closed afterwards."""
    peer = RawPeer(mode)
    await peer.start()
    try:
        yield peer
    finally:
        await peer.close()


def chat_events(count: int, piece: str = "token ") -> list[bytes]:
    """A whole Chat stream: role chunk, ``count`` content chunks, finish, usage, ``[DONE]``."""
    head = (b'{"id":"chatcmpl-resilience","object":"chat.completion.chunk","created":1764441600,'
            b'"model":"up-model","choices":[{"index":0,"delta":')

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        tail = orjson.dumps({"logprobs": None, "finish_reason": finish})[1:]
        return b"data: " + head + orjson.dumps(delta) + b"," + tail + b"]}\n\n"

    usage = {"prompt_tokens": 3, "completion_tokens": count, "total_tokens": 3 + count}
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": piece}) for _ in range(count)),
        chunk({}, "stop"),
        b"data: " + head[:-len(b'[{"index":0,"delta":')] + b'[],"usage":' + orjson.dumps(usage)
        + b"}\n\n",
        sse.DONE,
    ]
