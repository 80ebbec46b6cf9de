"""Failures, retries and cooldowns over loopback (SPEC sections 5 and 7)."""

from __future__ import annotations

import time

import aiohttp

from hopbase import sse
from tests.conftest import StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events

MESSAGES = [{"role": "user", "content": "hi"}]
STREAM = {"model": "gpt", "messages": MESSAGES, "stream": True}


def pair(fake: FakeUpstream) -> dict:
    """Deployment a is (all but) always chosen first; b is the fallback."""
    return {"gpt": {"deployments": [
        openai_deployment(fake, "a", weight=1_000_000),
        openai_deployment(fake, "b", weight=0.000001),
    ]}}


async def post(url: str, body: dict) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as session, session.post(
        url + "/v1/chat/completions", json=body
    ) as response:
        return response.status, dict(response.headers), await response.read()


def events_of(data: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in data.replace(sse.KEEPALIVE, b"").split(b"\n\n") if e]


async def test_429_on_a_is_served_by_b_and_a_cools_for_retry_after(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(429, retry_after=42))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, {"model": "gpt", "messages": MESSAGES})
    assert status == 200
    assert b"Hello from b" in body
    snapshot = running.snapshot("a")
    assert snapshot.cooldown_active is True
    assert snapshot.cooldown_reason == "rate_limited"
    assert 41.0 < snapshot.cooldown_seconds_left <= 42.0


async def test_5xx_before_output_retries_and_client_sees_only_b(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(500))
    fake.script("b", Reply.golden("chat_text.sse"))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, {**STREAM, "stream_options": {"include_usage": True}})
    assert status == 200
    assert events_of(body) == golden_events("chat_text.sse")
    assert running.snapshot("a").failures_in_window == 1


async def test_stream_failing_before_output_is_retried_invisibly(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = golden_events("chat_text.sse")
    fake.script("a", Reply.stream(events[:1], then="reset"))  # only the role chunk, then reset
    fake.script("b", Reply.golden("chat_text.sse"))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, {**STREAM, "stream_options": {"include_usage": True}})
    assert status == 200
    assert events_of(body) == events


async def test_reset_after_three_chunks_ends_with_error_event_and_no_retry(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = golden_events("chat_text.sse")
    fake.script("a", Reply.stream(events[:3], then="reset"))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, STREAM)
    received = events_of(body)
    assert status == 200
    assert received[:3] == events[:3]
    assert received[3].startswith(b'data: {"error":')
    assert b"Response stream interrupted" in received[3]
    assert received[4:] == [sse.DONE]
    assert fake.requests("b") == []


async def test_stall_before_output_is_retried(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    events = golden_events("chat_text.sse")
    fake.script("a", Reply.stream(events[:1], then="stall"))
    fake.script("b", Reply.golden("chat_text.sse"))
    running = await hopbase(pair(fake), routing={"stuck_after_s": 0.5})
    status, _, body = await post(running.url, {**STREAM, "stream_options": {"include_usage": True}})
    assert status == 200
    assert events_of(body) == events
    assert fake.requests("b") != []


async def test_stall_after_output_ends_with_error_event(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = golden_events("chat_text.sse")
    fake.script("a", Reply.stream(events[:3], then="stall"))
    running = await hopbase(pair(fake), routing={"stuck_after_s": 0.5})
    status, _, body = await post(running.url, STREAM)
    received = events_of(body)
    assert received[:3] == events[:3]
    assert received[3].startswith(b'data: {"error":')
    assert received[-1] == sse.DONE
    assert fake.requests("b") == []


async def test_all_cooling_gives_503_with_retry_after(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(429, retry_after=30))
    fake.script("b", Reply.status(429, retry_after=20))
    running = await hopbase(pair(fake))
    first_status, _, _ = await post(running.url, {"model": "gpt", "messages": MESSAGES})
    status, headers, body = await post(running.url, {"model": "gpt", "messages": MESSAGES})
    assert first_status == 502
    assert status == 503
    assert headers["Retry-After"] == "20"
    assert b"cooling down" in body


async def test_upstream_400_is_passed_through_and_not_a_failure(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    error = {"error": {"message": "messages[0].content is bad", "type": "invalid_request_error",
                       "param": "messages", "code": None}}
    fake.script("a", Reply.status(400, body=error))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, {"model": "gpt", "messages": MESSAGES})
    assert status == 400
    assert b"messages[0].content is bad" in body
    assert fake.requests("b") == []
    assert running.snapshot("a").failures_in_window == 0


async def test_disconnect_during_first_output_wait_closes_upstream_without_penalty(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.golden("chat_text.sse", first_delay_s=5))
    running = await hopbase(pair(fake), routing={"stuck_after_s": 10},
                            server={"keepalive_interval_s": 0.1})
    async with aiohttp.ClientSession() as session:
        response = await session.post(running.url + "/v1/chat/completions", json=STREAM)
        await response.content.readuntil(b"keepalive")
        response.close()
        hung_up = time.monotonic()
    await fake.wait_closed("a", timeout=2.0)
    closed_at = fake.connections("a")[0].closed_at
    assert closed_at is not None and closed_at - hung_up < 0.5
    snapshot = running.snapshot("a")
    assert (snapshot.in_flight, snapshot.failures_in_window) == (0, 0)
    assert fake.requests("b") == []
