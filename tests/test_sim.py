"""The simulated provider: its schedule, the in-process answers and the HTTP server via the SDKs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from aiohttp.test_utils import TestServer

from hopbase import canonical
from hopbase.config import SimulatedConfig
from hopbase.sim.generator import (
    Failure,
    RequestCounter,
    SimulatedAnswer,
    planned_failure,
    prompt_chars,
)
from hopbase.sim.inprocess import SimulatedResponse, simulated_request
from hopbase.sim.server import make_sim_app

FAST = SimulatedConfig(first_output_ms=5.0, tokens_per_s=2000.0, output_tokens=6)
FAST_TEXT = "Lorem ipsum dolor sit amet consectetur."
CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "x" * 40}]}
MessagesParam = Any

ServerFactory = Callable[[Any], Awaitable[TestServer]]


async def serve(aiohttp_server: ServerFactory, settings: SimulatedConfig) -> str:
    server = await aiohttp_server(make_sim_app(settings))
    return str(server.make_url("")).rstrip("/")


def openai_client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def anthropic_client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)


async def chunks_of(response: SimulatedResponse) -> list[bytes]:
    return [chunk async for chunk in response.iter_chunks()]


def test_answer_is_scheduled_from_first_output_at_the_token_rate() -> None:
    settings = SimulatedConfig(first_output_ms=50.0, tokens_per_s=100.0, output_tokens=3)

    answer = SimulatedAnswer.create(settings, CHAT, "m", "id1")

    assert [step.at_s for step in answer.steps] == pytest.approx([0.0, 0.05, 0.06, 0.07])
    assert answer.steps[0].events == (canonical.Start("id1", "m"),)
    assert answer.steps[1].events == (canonical.TextDelta("Lorem"),)
    assert answer.steps[-1].events == (
        canonical.TextDelta(" dolor."),
        canonical.BlockStop(),
        canonical.UsageEvent(canonical.Usage(input_tokens=11, output_tokens=3)),
        canonical.Finish(canonical.StopReason.END_TURN),
    )
    assert answer.response.parts == (canonical.TextPart("Lorem ipsum dolor."),)


def test_fast_rates_batch_tokens_into_two_millisecond_steps() -> None:
    settings = SimulatedConfig(first_output_ms=0.0, tokens_per_s=2000.0, output_tokens=8)

    answer = SimulatedAnswer.create(settings, CHAT, "m", "id1")

    texts = [event.text for step in answer.steps for event in step.events
             if isinstance(event, canonical.TextDelta)]
    assert texts == ["Lorem ipsum dolor sit", " amet consectetur adipiscing elit."]
    assert [step.at_s for step in answer.steps] == pytest.approx([0.0, 0.0015, 0.0035])


def test_given_text_and_max_tokens_cap_the_answer() -> None:
    settings = SimulatedConfig(text="one two three four", first_output_ms=0.0)
    body = {"model": "m", "max_tokens": 2, "system": "abcd", "messages": []}

    answer = SimulatedAnswer.create(settings, body, "m", "id1")

    assert answer.response.parts == (canonical.TextPart("one two"),)
    assert answer.response.stop_reason is canonical.StopReason.MAX_TOKENS
    assert answer.response.usage == canonical.Usage(input_tokens=1, output_tokens=2)


def test_prompt_chars_counts_text_of_every_prompt_field() -> None:
    body = {"model": "ignored-model-name", "instructions": "abc", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]}

    assert prompt_chars(body) == len("abc") + len("user") + len("input_text") + len("hello")


def test_fail_every_picks_every_nth_request_and_zero_never() -> None:
    failing = SimulatedConfig(fail_status=503, fail_every=3, retry_after_s=2.0)
    resetting = SimulatedConfig(fail_every=1, reset_after_chunks=2, stall_after_chunks=1)

    assert [planned_failure(failing, n) is not None for n in range(1, 7)] == [
        False, False, True, False, False, True]
    assert planned_failure(failing, 3) == Failure("status", 503, 2.0)
    assert planned_failure(resetting, 1) == Failure("reset", after_chunks=2)
    assert planned_failure(SimulatedConfig(fail_status=500), 1) is None


async def test_inprocess_stream_renders_the_protocol_with_timing() -> None:
    settings = SimulatedConfig(first_output_ms=100.0, tokens_per_s=1000.0, output_tokens=4)
    started = time.monotonic()
    response = await simulated_request(
        "anthropic_messages", {**CHAT, "stream": True}, settings, RequestCounter())
    arrivals = []
    async for chunk in response.iter_chunks():
        arrivals.append((time.monotonic() - started, chunk))

    assert (response.status, response.headers["content-type"]) == (
        200, "text/event-stream; charset=utf-8")
    assert arrivals[0][1].startswith(b"event: message_start\n")
    assert arrivals[0][0] < 0.05
    assert b'"text_delta"' in arrivals[1][1] and arrivals[1][0] >= 0.1
    assert arrivals[-1][1].endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


async def test_inprocess_non_stream_is_the_whole_answer() -> None:
    response = await simulated_request("openai_chat", CHAT, FAST, RequestCounter())

    body = orjson.loads(await response.read())

    assert body["object"] == "chat.completion" and body["model"] == "sim-model"
    assert body["choices"][0]["message"]["content"] == FAST_TEXT
    assert body["usage"]["prompt_tokens"] == 11 and body["usage"]["completion_tokens"] == 6


async def test_inprocess_failure_status_has_error_body_and_retry_after() -> None:
    settings = SimulatedConfig(fail_status=429, fail_every=2, retry_after_s=1.5)
    counter = RequestCounter()

    first = await simulated_request("anthropic_messages", CHAT, settings, counter)
    second = await simulated_request("anthropic_messages", CHAT, settings, counter)

    assert (first.status, second.status) == (200, 429)
    assert second.headers["retry-after"] == "1.5"
    assert orjson.loads(await second.read())["error"]["type"] == "rate_limit_error"


async def test_inprocess_reset_after_chunks_raises_connection_reset() -> None:
    settings = SimulatedConfig(**_fast(), fail_every=1, reset_after_chunks=2)
    response = await simulated_request(
        "openai_chat", {**CHAT, "stream": True}, settings, RequestCounter())
    received = []

    with pytest.raises(ConnectionResetError):
        async for chunk in response.iter_chunks():
            received.append(chunk)

    assert len(received) == 2
    assert b'"role":"assistant"' in received[0]


async def test_inprocess_stall_after_chunks_sends_nothing_more() -> None:
    settings = SimulatedConfig(**_fast(), fail_every=1, stall_after_chunks=1)
    response = await simulated_request(
        "openai_responses", {**CHAT, "stream": True}, settings, RequestCounter())
    chunks = response.iter_chunks()

    first = await anext(chunks)

    assert first.startswith(b"event: response.created\n")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(chunks), 0.2)
    await chunks.aclose()


async def test_inprocess_non_stream_reset_raises_on_read() -> None:
    settings = SimulatedConfig(**_fast(), fail_every=1, reset_after_chunks=0)
    response = await simulated_request("openai_chat", CHAT, settings, RequestCounter())

    with pytest.raises(ConnectionResetError):
        await response.read()


def _fast() -> dict[str, Any]:
    return {"first_output_ms": FAST.first_output_ms, "tokens_per_s": FAST.tokens_per_s,
            "output_tokens": FAST.output_tokens}


async def test_openai_sdk_chat_whole_and_streamed(aiohttp_server: ServerFactory) -> None:
    url = await serve(aiohttp_server, FAST)
    messages: Any = [{"role": "user", "content": "hello"}]
    async with openai_client(url) as client:
        whole = await client.chat.completions.create(model="sim-model", messages=messages)
        stream = await client.chat.completions.create(
            model="sim-model", messages=messages, stream=True,
            stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]

    assert (whole.model, whole.choices[0].message.content) == ("sim-model", FAST_TEXT)
    assert whole.choices[0].finish_reason == "stop"
    text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(text) == FAST_TEXT
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 6)


async def test_openai_sdk_chat_stream_without_usage_unless_asked(
    aiohttp_server: ServerFactory,
) -> None:
    url = await serve(aiohttp_server, FAST)
    async with openai_client(url) as client:
        stream = await client.chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "hi"}], stream=True)
        chunks = [chunk async for chunk in stream]

    assert [chunk.usage for chunk in chunks] == [None] * len(chunks)


async def test_openai_sdk_responses_whole_and_streamed(aiohttp_server: ServerFactory) -> None:
    url = await serve(aiohttp_server, FAST)
    async with openai_client(url) as client:
        whole = await client.responses.create(model="sim-model", input="hello")
        async with client.responses.stream(model="sim-model", input="hello") as stream:
            event_types = [event.type async for event in stream]
            final = await stream.get_final_response()

    assert (whole.model, whole.output_text) == ("sim-model", FAST_TEXT)
    assert (final.output_text, final.status) == (FAST_TEXT, "completed")
    assert (event_types[0], event_types[-1]) == ("response.created", "response.completed")
    assert final.usage is not None and final.usage.output_tokens == 6


async def test_anthropic_sdk_messages_whole_and_streamed(aiohttp_server: ServerFactory) -> None:
    url = await serve(aiohttp_server, FAST)
    messages: MessagesParam = [{"role": "user", "content": "hello"}]
    async with anthropic_client(url) as client:
        whole = await client.messages.create(model="sim-model", max_tokens=64, messages=messages)
        streaming = client.messages.stream(model="sim-model", max_tokens=64, messages=messages)
        async with streaming as stream:
            text = "".join([piece async for piece in stream.text_stream])
            final = await stream.get_final_message()

    assert whole.content[0].type == "text" and whole.content[0].text == FAST_TEXT
    assert (whole.model, whole.stop_reason) == ("sim-model", "end_turn")
    assert text == FAST_TEXT
    assert (final.stop_reason, final.usage.output_tokens) == ("end_turn", 6)


async def test_failure_status_reaches_the_sdks_with_retry_after(
    aiohttp_server: ServerFactory,
) -> None:
    settings = SimulatedConfig(fail_status=429, fail_every=1, retry_after_s=3.0)
    url = await serve(aiohttp_server, settings)
    messages: MessagesParam = [{"role": "user", "content": "hello"}]

    async with openai_client(url) as client:
        with pytest.raises(openai.RateLimitError) as openai_error:
            await client.chat.completions.create(model="sim-model", messages=messages)
    async with anthropic_client(url) as other:
        with pytest.raises(anthropic.RateLimitError) as anthropic_error:
            await other.messages.create(model="sim-model", max_tokens=8, messages=messages)

    assert openai_error.value.response.headers["retry-after"] == "3"
    assert openai_error.value.code == "rate_limit_exceeded"
    assert anthropic_error.value.response.headers["retry-after"] == "3"
    assert anthropic_error.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "simulated failure (429)"},
    }


async def test_reset_breaks_the_http_stream(aiohttp_server: ServerFactory) -> None:
    settings = SimulatedConfig(**_fast(), fail_every=1, reset_after_chunks=2)
    url = await serve(aiohttp_server, settings)
    received = b""

    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with session.post(url + "/v1/messages", json={**CHAT, "stream": True}) as answer:
                async for chunk in answer.content.iter_any():
                    received += chunk

    assert received.startswith(b"event: message_start\n")
    assert b"message_stop" not in received


async def test_first_chunk_with_output_not_before_first_output_ms(
    aiohttp_server: ServerFactory,
) -> None:
    settings = SimulatedConfig(first_output_ms=150.0, tokens_per_s=1000.0, output_tokens=4)
    url = await serve(aiohttp_server, settings)
    started = time.monotonic()

    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json={**CHAT, "stream": True}) as answer,
    ):
        body = b""
        while b'"content":"Lorem' not in body and not answer.content.at_eof():
            body += await answer.content.readany()
        first_output_s = time.monotonic() - started
        await answer.read()

    assert 0.15 <= first_output_s < 1.0


async def test_bad_json_gets_the_protocol_error(aiohttp_server: ServerFactory) -> None:
    url = await serve(aiohttp_server, FAST)
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/messages", data=b"{not json") as answer,
    ):
        body = await answer.json()

    assert answer.status == 400
    assert body["error"]["type"] == "invalid_request_error"


async def test_models_list_in_each_sdk_shape(aiohttp_server: ServerFactory) -> None:
    url = await serve(aiohttp_server, FAST)
    async with openai_client(url) as client:
        openai_models = [model.id async for model in client.models.list()]
    async with anthropic_client(url) as other:
        anthropic_models = [model.id async for model in other.models.list()]

    assert openai_models == anthropic_models == ["simulated"]
