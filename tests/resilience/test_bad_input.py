"""Bad input: the right 4xx in the client protocol's own shape, never a 500 (issue 8).

No bad request ever reaches an upstream, and slow senders (slowloris) do not
hold up anybody else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import orjson
import pytest

from tests.conftest import Running, StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream
from tests.resilience.support import (
    CHAT,
    MESSAGES,
    MESSAGES_PATH,
    assert_settled,
    in_flight,
    post,
)

LIMIT = 1000
ROUTES = {"chat": CHAT, "messages": MESSAGES_PATH}


def shaped_error(route: str, body: bytes) -> tuple[str, str]:
    """(error type, message) from the route's own error shape; fails on any other shape."""
    payload = orjson.loads(body)
    if route == "messages":
        assert set(payload) == {"type", "error"} and payload["type"] == "error", payload
        return payload["error"]["type"], payload["error"]["message"]
    assert set(payload) == {"error"}, payload
    assert set(payload["error"]) == {"message", "type", "param", "code"}, payload
    return payload["error"]["type"], payload["error"]["message"]


def padded(size: int) -> bytes:
    """A valid request body of exactly ``size`` bytes."""
    body = {"model": "gpt", "max_tokens": 10, "messages": MESSAGES, "pad": ""}
    bare = len(orjson.dumps(body))
    body["pad"] = "x" * (size - bare)
    encoded = orjson.dumps(body)
    assert len(encoded) == size
    return encoded


async def start(fake: FakeUpstream, hopbase: StartHopbase) -> Running:
    deployments = [openai_deployment(fake, "a")]
    return await hopbase({"gpt": {"deployments": deployments}},
                         server={"max_body_bytes": LIMIT})


@pytest.mark.parametrize("route", list(ROUTES))
async def test_body_at_the_limit_is_served_and_one_byte_over_is_413(
    fake: FakeUpstream, hopbase: StartHopbase, route: str
) -> None:
    running = await start(fake, hopbase)
    headers = {"Content-Type": "application/json"}
    status, _, _ = await post(running.url, padded(LIMIT), ROUTES[route], headers)
    assert status == 200
    status, _, body = await post(running.url, padded(LIMIT + 1), ROUTES[route], headers)
    assert status == 413
    expected = ("request_too_large" if route == "messages" else "invalid_request_error",
                f"request body is larger than {LIMIT} bytes")
    assert shaped_error(route, body) == expected
    assert len(fake.requests("a")) == 1  # only the request at the limit
    await assert_settled(running)


@asynccontextmanager
async def connection(running: Running) -> AsyncIterator[tuple[asyncio.StreamReader,
                                                               asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", running.server.port)
    try:
        yield reader, writer
    finally:
        writer.close()


def head(path: str, length: str, extra: bytes = b"") -> bytes:
    return (b"POST %b HTTP/1.1\r\nHost: hopbase\r\nContent-Type: application/json\r\n"
            b"%bContent-Length: %b\r\n\r\n" % (path.encode(), extra, length.encode()))


async def read_answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(status line, body) of one HTTP/1.1 answer with a Content-Length."""
    status_line, *header_lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
    headers = dict(line.split(b": ", 1) for line in header_lines if line)
    return status_line, await reader.readexactly(int(headers[b"Content-Length"]))


async def test_oversized_body_is_refused_before_it_is_read(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(fake, hopbase)
    async with connection(running) as (reader, writer):
        writer.write(head(CHAT, "50000000") + b'{"model": "gpt", "messages": [')
        await writer.drain()
        # the other 49,999,970 bytes are never sent: the answer must not wait for them
        status_line, body = await asyncio.wait_for(read_answer(reader), 1.0)
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large"
    assert shaped_error("chat", body) == ("invalid_request_error",
                                          f"request body is larger than {LIMIT} bytes")
    assert fake.requests() == []
    await assert_settled(running)


async def test_chunked_body_over_the_limit_is_413(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(fake, hopbase)

    async def chunks() -> AsyncIterator[bytes]:
        yield padded(LIMIT + 1)

    async with aiohttp.ClientSession() as session, session.post(
        running.url + CHAT, data=chunks(), headers={"Content-Type": "application/json"}
    ) as response:
        assert "Content-Length" not in response.request_info.headers
        status, body = response.status, await response.read()
    assert status == 413
    assert shaped_error("chat", body)[1] == f"request body is larger than {LIMIT} bytes"
    assert fake.requests() == []
    await assert_settled(running)


BAD_BODIES: dict[str, tuple[bytes, str, str]] = {
    "top-level-array": (b'[{"model": "gpt"}]', "application/json",
                        "request body must be a JSON object"),
    "deep-nesting": (b"[" * 10_000 + b"]" * 10_000, "application/json",
                     "request body is not valid JSON: "),
    "deep-object-nesting": (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "application/json",
                            "request body is not valid JSON: "),
    "wrong-content-type": (b'{"model": "gpt"}', "text/plain",
                           "Content-Type must be application/json"),
    "non-utf8": (b'{"model": "gpt", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
                 "application/json", "request body is not valid JSON: "),
    "empty": (b"", "application/json", "request body is not valid JSON: "),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("case", list(BAD_BODIES))
async def test_bad_bodies_are_400_in_the_routes_shape(
    fake: FakeUpstream, hopbase: StartHopbase, route: str, case: str
) -> None:
    raw, content_type, message = BAD_BODIES[case]
    running = await hopbase({"gpt": {"deployments": [openai_deployment(fake, "a")]}},
                            server={"max_body_bytes": 1 << 20})
    status, _, body = await post(running.url, raw, ROUTES[route], {"Content-Type": content_type})
    assert status == 400
    kind, said = shaped_error(route, body)
    assert kind == "invalid_request_error"
    assert said.startswith(message) and (said == message) == (not message.endswith(": "))
    assert fake.requests() == []
    await assert_settled(running)


async def test_huge_header_is_a_4xx_not_a_500(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await start(fake, hopbase)
    async with connection(running) as (reader, writer):
        writer.write(head(CHAT, "2", b"X-Huge: " + b"h" * 100_000 + b"\r\n") + b"{}")
        await writer.drain()
        status_line, body = await asyncio.wait_for(read_answer(reader), 1.0)
    # aiohttp's HTTP parser answers this itself, before any HopBase code runs
    assert status_line == b"HTTP/1.0 400 Bad Request"
    assert body.startswith(b"Got more than 16384 bytes when reading")
    assert fake.requests() == []
    await assert_settled(running)


async def test_slow_headers_and_slow_bodies_do_not_block_other_clients(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(fake, hopbase)
    slow: list[asyncio.StreamWriter] = []
    try:
        for index in range(50):
            _, writer = await asyncio.open_connection("127.0.0.1", running.server.port)
            if index % 2:
                writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: hop")  # head unfinished
            else:
                writer.write(head(CHAT, "900") + b'{"model": "gpt", ')  # body unfinished
            slow.append(writer)
        await asyncio.gather(*(writer.drain() for writer in slow))
        began = time.monotonic()
        status, _, body = await post(running.url, {"model": "gpt", "messages": MESSAGES})
        assert (status, time.monotonic() - began < 0.5) == (200, True)
        assert b"Hello from a" in body
        assert in_flight(running) == {"a": 0}  # slow senders hold no upstream slot
    finally:
        for writer in slow:
            writer.close()
    assert len(fake.requests("a")) == 1
    await assert_settled(running)

