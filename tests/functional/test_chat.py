"""Chat Completions end to end: the openai SDK → HopBase → fake upstream / simulated provider."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import openai
import pytest

from hopbase import sse
from tests.conftest import StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def client(url: str, key: str = "unused") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


async def raw_stream(url: str, body: dict, headers: dict | None = None) -> bytes:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json=body, headers=headers or {}) as response,
    ):
        assert response.status == 200
        return await response.read()


def without_keepalives(data: bytes) -> bytes:
    return data.replace(sse.KEEPALIVE, b"")


async def test_non_stream_through_fake_upstream(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await hopbase({"gpt": {"deployments": [openai_deployment(fake, "a")]}})
    async with client(running.url) as sdk:
        completion = await sdk.chat.completions.create(model="gpt", messages=MESSAGES)
    assert completion.choices[0].message.content == "Hello from a"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    sent = fake.requests("a")[0]
    assert sent.body["model"] == "up-model"
    assert sent.headers["authorization"] == "Bearer sk-upstream-secret-0000"


async def test_stream_bytes_equal_upstream_bytes_with_include_usage(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.default("a", Reply.golden("chat_text.sse"))
    running = await hopbase({"gpt": {"deployments": [openai_deployment(fake, "a")]}})
    body = {
        "model": "gpt",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    received = await raw_stream(running.url, body)
    assert without_keepalives(received) == b"".join(golden_events("chat_text.sse"))


async def test_stream_without_include_usage_strips_the_usage_chunk(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.default("a", Reply.golden("chat_text.sse"))
    running = await hopbase({"gpt": {"deployments": [openai_deployment(fake, "a")]}})
    received = await raw_stream(running.url, {"model": "gpt", "messages": MESSAGES, "stream": True})
    expected = [e for e in golden_events("chat_text.sse") if b'"choices":[]' not in e]
    assert len(expected) == len(golden_events("chat_text.sse")) - 1
    assert without_keepalives(received) == b"".join(expected)
    assert fake.requests("a")[0].body["stream_options"] == {"include_usage": True}


async def test_sdk_stream_through_fake_upstream(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await hopbase({"gpt": {"deployments": [openai_deployment(fake, "a")]}})
    async with client(running.url) as sdk:
        stream = await sdk.chat.completions.create(
            model="gpt", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from a"
    assert chunks[-1].usage is not None and chunks[-1].choices == []


@pytest.mark.parametrize("include_usage", [True, False])
async def test_sdk_through_simulated_provider(hopbase: StartHopbase, include_usage: bool) -> None:
    simulated = {"first_output_ms": 5, "tokens_per_s": 2000, "output_tokens": 12}
    running = await hopbase(
        {"demo": {"deployments": [{"id": "sim", "provider": "simulated", "simulated": simulated}]}}
    )
    async with client(running.url) as sdk:
        whole = await sdk.chat.completions.create(model="demo", messages=MESSAGES)
        stream = await sdk.chat.completions.create(
            model="demo",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": include_usage},
        )
        chunks = [chunk async for chunk in stream]
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content
    assert (chunks[-1].usage is not None) is include_usage


async def test_keepalive_comments_fall_between_events(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = golden_events("chat_text.sse")
    fake.script("a", Reply.stream(events[:3] + events[3:], delay_s=0.0))
    slow = [events[0], events[1], events[2]]
    fake.script("a", Reply.stream(slow, delay_s=0.6, then="end"))
    running = await hopbase(
        {"gpt": {"deployments": [openai_deployment(fake, "a")]}}, routing={"stuck_after_s": 5}
    )
    first = await raw_stream(running.url, {"model": "gpt", "messages": MESSAGES, "stream": True})
    assert sse.KEEPALIVE not in first
    received = await raw_stream(running.url, {"model": "gpt", "messages": MESSAGES, "stream": True})
    assert received.count(sse.KEEPALIVE) >= 2
    for piece in received.split(b"\n\n")[:-1]:
        assert piece.startswith((b"data: ", b": hopbase-keepalive")), piece[:40]


async def test_client_disconnect_closes_upstream_and_penalises_nothing(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.golden("chat_text.sse", delay_s=0.3))
    running = await hopbase(
        {"gpt": {"deployments": [openai_deployment(fake, "a")]}}, routing={"stuck_after_s": 5}
    )
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            running.url + "/v1/chat/completions",
            json={"model": "gpt", "messages": MESSAGES, "stream": True},
        )
        await response.content.readuntil(b"The")
        response.close()
        hung_up = time.monotonic()
    await fake.wait_closed("a", timeout=2.0)
    closed_at = fake.connections("a")[0].closed_at
    assert closed_at is not None and closed_at - hung_up < 0.5
    await asyncio.sleep(0.05)
    snapshot = running.snapshot("a")
    assert snapshot.in_flight == 0
    assert snapshot.failures_in_window == 0
    assert snapshot.cooldown_active is False


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        (
            {"Authorization": "Bearer wrong"},
            {"model": "gpt", "messages": MESSAGES},
            401,
            "invalid_api_key",
        ),
        ({}, {"model": "gpt", "messages": MESSAGES}, 401, "invalid_api_key"),
        (
            {"Authorization": "Bearer team-a-key"},
            {"model": "nope", "messages": MESSAGES},
            404,
            "model_not_found",
        ),
        ({"Authorization": "Bearer team-a-key"}, {"messages": MESSAGES}, 400, "invalid_request"),
    ],
    ids=["wrong-key", "no-key", "unknown-model", "missing-model"],
)
async def test_errors_in_openai_shape(
    fake: FakeUpstream, hopbase: StartHopbase, headers: dict, body: dict, status: int, code: str
) -> None:
    running = await hopbase(
        {"gpt": {"deployments": [openai_deployment(fake, "a")]}},
        env={"TEAM_A_KEY": "team-a-key"},
        auth={"keys": [{"name": "team-a", "key_env": "TEAM_A_KEY"}]},
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(running.url + "/v1/chat/completions", json=body, headers=headers) as response,
    ):
        payload = await response.json()
        assert response.status == status
        assert response.headers["x-request-id"].startswith("req_")
    assert payload["error"]["code"] == code
    assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]
    assert fake.requests("a") == []


async def test_malformed_json_and_body_too_large(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await hopbase(
        {"gpt": {"deployments": [openai_deployment(fake, "a")]}}, server={"max_body_bytes": 1000}
    )
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + "/v1/chat/completions",
            data=b"{not json",
            headers={"Content-Type": "application/json"},
        ) as response:
            assert response.status == 400
            assert (await response.json())["error"]["type"] == "invalid_request_error"
        big = {"model": "gpt", "messages": [{"role": "user", "content": "x" * 2000}]}
        async with session.post(running.url + "/v1/chat/completions", json=big) as response:
            assert response.status == 413
            assert (await response.json())["error"]["code"] == "request_too_large"
    assert fake.requests("a") == []


async def test_request_id_is_echoed_when_sane(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await hopbase({"gpt": {"deployments": [openai_deployment(fake, "a")]}})
    async with (
        aiohttp.ClientSession() as session,
        session.get(running.url + "/healthz", headers={"x-request-id": "abc-123"}) as response,
    ):
        assert response.headers["x-request-id"] == "abc-123"
