"""The client misbehaves: hangs up, stops reading, asks for gzip (issue 8).

A client going away is never the deployment's fault: its attempt ends as
``cancelled``, the upstream connection is closed at once, the slot is released,
no failure is counted, and no further attempt starts.
"""

from __future__ import annotations

import asyncio
import socket
import time
import tracemalloc
from typing import Any

import aiohttp
import orjson

from tests.conftest import Running, StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events
from tests.resilience.support import (
    CHAT,
    MESSAGES,
    assert_settled,
    chat_events,
    eventually,
    read_records,
)

STREAM = {"model": "gpt", "messages": MESSAGES, "stream": True,
          "stream_options": {"include_usage": True}}


def trio(fake: FakeUpstream) -> dict[str, Any]:
    """a first, then b, then c (weights make the order all but certain)."""
    return {"gpt": {"deployments": [openai_deployment(fake, "a", weight=1e6),
                                    openai_deployment(fake, "b", weight=1.0),
                                    openai_deployment(fake, "c", weight=1e-6)]}}


async def disconnected_record(running: Running) -> dict[str, Any]:
    """The one request record, once HopBase has finished with the request."""
    assert await eventually(lambda: running.gateway.request_log is not None
                            and running.gateway.request_log.pending > 0)
    records = await read_records(running)
    assert len(records) == 1
    assert records[0]["clientDisconnected"] is True
    return records[0]


def not_penalised(running: Running, deployment: str) -> None:
    snapshot = running.snapshot(deployment)
    assert (snapshot.failures_in_window, snapshot.cooldown_active) == (0, False)


async def test_disconnect_mid_stream_closes_upstream_at_once(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.golden("chat_text.sse", delay_s=0.2))
    running = await hopbase(trio(fake))
    async with aiohttp.ClientSession() as session:
        response = await session.post(running.url + CHAT, json=STREAM)
        await response.content.readuntil(b'"The"')
        response.close()
        hung_up = time.monotonic()
    await fake.wait_closed("a", timeout=1.0)
    closed_at = fake.connections("a")[0].closed_at
    assert closed_at is not None and closed_at - hung_up < 0.3
    record = await disconnected_record(running)
    assert record["status"] == 200
    assert [(a["deployment"], a["outcome"]) for a in record["attempts"]] == [("a", "cancelled")]
    not_penalised(running, "a")
    assert fake.requests("b") == []
    await assert_settled(running)


async def test_disconnect_during_first_output_wait(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.golden("chat_text.sse", first_delay_s=5))
    running = await hopbase(trio(fake), routing={"stuck_after_s": 10},
                            server={"keepalive_interval_s": 0.1})
    async with aiohttp.ClientSession() as session:
        response = await session.post(running.url + CHAT, json=STREAM)
        await response.content.readuntil(b"keepalive")
        response.close()
    await fake.wait_closed("a", timeout=1.0)
    record = await disconnected_record(running)
    assert (record["status"], record["attempts"][0]["outcome"]) == (200, "cancelled")
    not_penalised(running, "a")
    assert fake.requests("b") == []
    await assert_settled(running)


async def test_disconnect_during_a_retry_starts_no_further_attempt(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(500))
    fake.script("b", Reply.stall_before_headers(5))
    running = await hopbase(trio(fake), server={"keepalive_interval_s": 5})

    async def client() -> None:
        async with aiohttp.ClientSession() as session:
            await session.post(running.url + CHAT, json=STREAM)

    request = asyncio.create_task(client())
    assert await eventually(lambda: len(fake.requests("b")) == 1)
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)
    await fake.wait_closed("b", timeout=1.0)
    record = await disconnected_record(running)
    assert record["status"] == 499  # nothing was sent: nginx's "client closed request"
    outcomes = [(a["deployment"], a["outcome"]) for a in record["attempts"]]
    assert outcomes == [("a", "error"), ("b", "cancelled")]
    assert fake.requests("c") == []
    assert running.snapshot("a").failures_in_window == 1
    not_penalised(running, "b")
    await assert_settled(running)


async def raw_request(
    port: int, body: bytes, receive_buffer: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Send a Chat request over a socket with a tiny receive buffer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=receive_buffer)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: hopbase\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                 % (len(body), body))
    await writer.drain()
    return reader, writer


def client_connections(running: Running) -> int:
    """Client connections HopBase's HTTP server holds open."""
    runner = running.server.runner
    assert runner is not None and runner.server is not None
    return len(runner.server.connections)  # type: ignore[attr-defined]


async def read_one_kilobyte_per_second(reader: asyncio.StreamReader) -> None:
    """Read 100 bytes every 0.1 s, forever (cancelled by the test)."""
    while await reader.read(100):
        await asyncio.sleep(0.1)


async def test_slow_reader_is_aborted_after_send_timeout_with_memory_bounded(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    answer = chat_events(8000, piece="x" * 2000)  # about 16 MiB of events
    fake.script("a", Reply.stream(answer))
    running = await hopbase(trio(fake), server={"send_timeout_s": 0.5,
                                                "stream_buffer_bytes": 256 * 1024})
    tracemalloc.start()
    try:
        started = time.monotonic()
        reader, writer = await raw_request(running.server.port or 0, orjson.dumps(STREAM), 4096)
        trickle = asyncio.create_task(read_one_kilobyte_per_second(reader))
        try:
            assert await eventually(lambda: len(fake.requests("a")) == 1)
            await fake.wait_closed("a", timeout=2.5)
            aborted_after = time.monotonic() - started
            _, peak = tracemalloc.get_traced_memory()
            # HopBase let go of the connection; the kernel may still hand the reader its backlog
            assert await eventually(lambda: client_connections(running) == 0)
        finally:
            trickle.cancel()
            writer.close()
    finally:
        tracemalloc.stop()
    assert 0.5 <= aborted_after < 2.0
    assert peak < 4 << 20, f"peak {peak} bytes for one stalled stream"
    record = await disconnected_record(running)
    assert [(a["deployment"], a["outcome"]) for a in record["attempts"]] == [("a", "cancelled")]
    not_penalised(running, "a")
    await assert_settled(running)


async def test_gzip_accepted_stream_is_not_buffered(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = golden_events("chat_text.sse")
    fake.script("a", Reply.stream(events[:3], then="stall"))
    running = await hopbase(trio(fake), routing={"stuck_after_s": 5})
    async with aiohttp.ClientSession() as session:
        response = await session.post(running.url + CHAT, json=STREAM,
                                      headers={"Accept-Encoding": "gzip"})
        received = await asyncio.wait_for(response.content.readuntil(b'" capital"'), 1.0)
        assert "Content-Encoding" not in response.headers
        response.close()
    assert received.replace(b": hopbase-keepalive\n\n", b"").startswith(b"".join(events[:2]))
    await fake.wait_closed("a", timeout=1.0)
    await assert_settled(running)
