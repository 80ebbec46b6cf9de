"""Faults before any output reached the client: retried invisibly, or one clean error (issue 8).

Deployment ``a`` always goes first (huge weight); ``b`` is the one left to try.
Each test asserts what the client got, what every upstream saw, the attempt
outcomes in the request log, and that nothing leaked.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp.abc import AbstractResolver, ResolveResult

from hopbase.upstream import Transport
from tests.conftest import Running, StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events
from tests.resilience.support import (
    MESSAGES,
    assert_settled,
    closed_port,
    error_of,
    events_of,
    post,
    raw_peer,
    read_records,
)

STREAM = {"model": "gpt", "messages": MESSAGES, "stream": True,
          "stream_options": {"include_usage": True}}
PLAIN = {"model": "gpt", "messages": MESSAGES}


def first(base_url: str, **extra: Any) -> dict[str, Any]:
    """Deployment ``a`` at ``base_url``, chosen first."""
    return {"id": "a", "provider": "openai", "base_url": base_url,
            "api_key_env": "FAKE_UPSTREAM_KEY", "model": "up-model", "weight": 1_000_000, **extra}


def with_b(fake: FakeUpstream, a: dict[str, Any]) -> dict[str, Any]:
    return {"gpt": {"deployments": [a, openai_deployment(fake, "b", weight=0.000001)]}}


def pair(fake: FakeUpstream) -> dict[str, Any]:
    return with_b(fake, first(fake.base_url("a")))


def alone(fake: FakeUpstream) -> dict[str, Any]:
    return {"gpt": {"deployments": [first(fake.base_url("a"))]}}


async def attempts(running: Running) -> list[tuple[str, str, int | None]]:
    """(deployment, outcome, status) of the last request's attempts."""
    record = (await read_records(running))[0]
    return [(a["deployment"], a["outcome"], a["status"]) for a in record["attempts"]]


async def served_by_b(running: Running, fake: FakeUpstream) -> None:
    """A stream served whole by b, with a's failure invisible to the client."""
    fake.script("b", Reply.golden("chat_text.sse"))
    status, _, body = await post(running.url, STREAM)
    assert status == 200
    assert events_of(body) == golden_events("chat_text.sse")
    assert len(fake.requests("b")) == 1


async def test_connect_refused_is_served_by_b(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    refused = f"http://127.0.0.1:{closed_port()}/v1"
    running = await hopbase(with_b(fake, first(refused)))
    await served_by_b(running, fake)
    assert await attempts(running) == [("a", "error", None), ("b", "success", 200)]
    assert running.snapshot("a").failures_in_window == 1
    await assert_settled(running)


async def test_connection_closed_before_headers_is_served_by_b(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    async with raw_peer("close") as peer:
        running = await hopbase(with_b(fake, first(peer.base_url())))
        await served_by_b(running, fake)
        assert peer.accepted == 1
    assert await attempts(running) == [("a", "error", None), ("b", "success", 200)]
    await assert_settled(running)


async def test_listener_that_never_accepts_times_out_and_b_serves(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    async with raw_peer("backlog") as peer:
        running = await hopbase(with_b(fake, first(peer.base_url())),
                                server={"upstream_connect_timeout_s": 0.3})
        await served_by_b(running, fake)
    assert await attempts(running) == [("a", "timeout", None), ("b", "success", 200)]
    await assert_settled(running)


async def test_accepted_but_never_answered_times_out_as_504_when_alone(
    hopbase: StartHopbase,
) -> None:
    async with raw_peer("silent") as peer:
        running = await hopbase({"gpt": {"deployments": [first(peer.base_url())]}},
                                server={"upstream_connect_timeout_s": 0.3,
                                        "keepalive_interval_s": 5})
        status, _, body = await post(running.url, STREAM)
        assert peer.accepted == 1
    assert status == 504
    assert error_of(body)["code"] == "upstream_timeout"
    assert await attempts(running) == [("a", "timeout", None)]
    await assert_settled(running)


async def test_headers_then_eof_before_any_event_is_retried(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.headers_then_eof())
    running = await hopbase(pair(fake))
    await served_by_b(running, fake)
    assert await attempts(running) == [("a", "error", 200), ("b", "success", 200)]
    await assert_settled(running)


async def test_redirect_is_never_followed_and_the_key_never_leaves(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    async with FakeUpstream() as target:
        fake.script("a", Reply.redirect(target.base_url("stolen") + "/chat/completions"))
        running = await hopbase(pair(fake))
        await served_by_b(running, fake)
        assert target.requests() == []
    assert await attempts(running) == [("a", "error", 307), ("b", "success", 200)]
    await assert_settled(running)


async def test_upstream_401_fails_over_and_cools_the_deployment(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(401))
    running = await hopbase(pair(fake))
    await served_by_b(running, fake)
    snapshot = running.snapshot("a")
    assert (snapshot.cooldown_active, snapshot.cooldown_reason) == (True, "auth")
    await assert_settled(running)


async def test_upstream_401_with_no_other_deployment_is_502_never_401(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(401))
    running = await hopbase(alone(fake))
    status, _, body = await post(running.url, PLAIN)
    assert status == 502
    error = error_of(body)
    assert (error["type"], error["code"]) == ("server_error", "upstream_error")
    assert "sk-upstream-secret" not in body.decode()
    await assert_settled(running)


async def test_529_overloaded_is_retried(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    fake.script("a", Reply.status(529))
    running = await hopbase(pair(fake))
    await served_by_b(running, fake)
    assert await attempts(running) == [("a", "error", 529), ("b", "success", 200)]
    await assert_settled(running)


async def test_should_retry_false_is_honoured(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    fake.script("a", Reply.status(500, headers={"x-should-retry": "false"}))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, PLAIN)
    assert status == 502
    assert error_of(body)["code"] == "upstream_error"
    assert fake.requests("b") == []
    assert await attempts(running) == [("a", "error", 500)]
    await assert_settled(running)


class FailingResolver(AbstractResolver):
    """A resolver that fails every lookup and remembers the names it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        raise OSError(-2, "Name or service not known (test resolver)")

    async def close(self) -> None:
        return None


async def use_transport(running: Running, transport: Transport) -> None:
    """Swap HopBase's transport before any request (app cleanup closes the new one)."""
    await running.gateway.transport.close()
    running.gateway.transport = transport
    await transport.start()


async def test_dns_failure_is_served_by_b_without_a_real_lookup(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    resolver = FailingResolver()
    running = await hopbase(with_b(fake, first("http://upstream-a.test/v1")))
    await use_transport(running, Transport(2.0, resolver=resolver))
    await served_by_b(running, fake)
    assert resolver.asked == ["upstream-a.test"]  # b's loopback address needs no lookup
    assert await attempts(running) == [("a", "error", None), ("b", "success", 200)]
    await assert_settled(running)


@pytest.fixture
async def untrusted_tls_port() -> AsyncIterator[int]:
    """A TLS listener whose certificate comes from a CA nobody trusts."""
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    server = await asyncio.start_server(lambda reader, writer: writer.close(),
                                        "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_tls_handshake_failure_is_retried(
    fake: FakeUpstream, hopbase: StartHopbase, untrusted_tls_port: int
) -> None:
    running = await hopbase(with_b(fake, first(f"https://127.0.0.1:{untrusted_tls_port}/v1")))
    await served_by_b(running, fake)
    assert await attempts(running) == [("a", "error", None), ("b", "success", 200)]
    assert running.snapshot("a").failures_in_window == 1
    await assert_settled(running)


async def test_tls_failure_alone_answers_502(
    hopbase: StartHopbase, untrusted_tls_port: int
) -> None:
    running = await hopbase({"gpt": {"deployments": [
        first(f"https://127.0.0.1:{untrusted_tls_port}/v1")]}})
    async with aiohttp.ClientSession() as session, session.post(
        running.url + "/v1/chat/completions", json=PLAIN
    ) as response:
        assert response.status == 502
        error = error_of(await response.read())
    assert error["message"] == "upstream connection failed: ClientConnectorCertificateError"
    await assert_settled(running)
