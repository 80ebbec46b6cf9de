"""The scripted fake upstream: each Reply kind, routing by name, connection logs, realism."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.fakes import GOLDEN_DIRECTORY, json_answer, stream_answer
from tests.fakes.upstream import FakeUpstream, Reply, golden_events

CHAT_BODY = {"model": "up-model", "messages": [{"role": "user", "content": "Say hello"}]}
STREAM_BODY = {**CHAT_BODY, "stream": True}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def post(
    session: aiohttp.ClientSession, fake: FakeUpstream, name: str, path: str, body: Any
) -> aiohttp.ClientResponse:
    return await session.post(f"{fake.url}/{name}{path}", json=body)


def openai_client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)


def data_of(event: bytes) -> Any:
    line = next(line for line in event.split(b"\n") if line.startswith(b"data: "))
    return orjson.loads(line[6:])


async def test_routes_by_deployment_name_and_says_who_served(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    first = await post(session, fake, "a", "/v1/chat/completions", CHAT_BODY)
    second = await post(session, fake, "b", "/v1/chat/completions", CHAT_BODY)

    assert (first.headers["x-fake-deployment"], second.headers["x-fake-deployment"]) == ("a", "b")
    assert (await first.json())["choices"][0]["message"]["content"] == "Hello from a"
    assert (await second.json())["choices"][0]["message"]["content"] == "Hello from b"
    assert [(r.deployment, r.path, r.body) for r in fake.requests("a")] == [
        ("a", "/v1/chat/completions", CHAT_BODY)
    ]
    assert [r.deployment for r in fake.requests()] == ["a", "b"]
    assert fake.requests("a")[0].headers["content-type"] == "application/json"


async def test_base_urls_follow_each_sdk_convention(fake: FakeUpstream) -> None:
    assert fake.base_url("a") == f"{fake.url}/a/v1"
    assert fake.base_url("a", "anthropic") == f"{fake.url}/a"


async def test_script_is_used_in_order_then_default(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.status(500), Reply.json({"n": 2}))
    fake.default("a", Reply.json({"n": "default"}, status=201))

    answers = [await post(session, fake, "a", "/v1/chat/completions", CHAT_BODY) for _ in range(4)]

    assert [answer.status for answer in answers] == [500, 200, 201, 201]
    assert await answers[1].json() == {"n": 2}
    assert await answers[3].json() == {"n": "default"}


async def test_status_has_realistic_error_body_per_protocol_and_retry_after(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.status(429, retry_after=7))
    fake.script("b", Reply.status(529))
    fake.script("c", Reply.status(400, body={"custom": True}, headers={"x-extra": "1"}))

    openai_answer = await post(session, fake, "a", "/v1/chat/completions", CHAT_BODY)
    anthropic_answer = await post(session, fake, "b", "/v1/messages", CHAT_BODY)
    custom = await post(session, fake, "c", "/v1/responses", CHAT_BODY)

    assert openai_answer.status == 429 and openai_answer.headers["retry-after"] == "7"
    assert (await openai_answer.json())["error"] == {
        "message": "fake status 429 from a", "type": "requests", "param": None,
        "code": "rate_limit_exceeded",
    }
    anthropic_body = await anthropic_answer.json()
    assert (anthropic_answer.status, anthropic_body["type"], anthropic_body["error"]) == (
        529, "error", {"type": "overloaded_error", "message": "fake status 529 from b"},
    )
    assert (custom.status, custom.headers["x-extra"]) == (400, "1")
    assert await custom.json() == {"custom": True}


async def test_stream_writes_events_in_order_after_first_delay(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    events = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]
    fake.script("a", Reply.stream(events, delay_s=0.01, first_delay_s=0.1, headers={"x-up": "y"}))
    started = time.monotonic()

    answer = await post(session, fake, "a", "/v1/chat/completions", STREAM_BODY)
    body = await answer.read()

    assert time.monotonic() - started >= 0.1
    assert body == b"".join(events)
    assert answer.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert answer.headers["x-up"] == "y"


async def test_golden_reply_plays_the_recording_byte_for_byte(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.golden("messages_tool.sse"))

    answer = await post(session, fake, "a", "/v1/messages", STREAM_BODY)

    assert await answer.read() == (GOLDEN_DIRECTORY / "messages_tool.sse").read_bytes()


async def test_reset_gives_the_client_an_error_after_the_events(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.golden("chat_text.sse", count=3, then="reset"))
    received = b""

    with pytest.raises(aiohttp.ClientPayloadError):
        async with session.post(f"{fake.url}/a/v1/chat/completions", json=STREAM_BODY) as answer:
            async for chunk in answer.content.iter_any():
                received += chunk

    assert received == b"".join(golden_events("chat_text.sse")[:3])
    assert fake.connections("a")[0].closed_at is not None


async def test_eof_ends_cleanly_without_the_terminal_event(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.golden("messages_text.sse", then="eof"))

    answer = await post(session, fake, "a", "/v1/messages", STREAM_BODY)
    body = await answer.read()

    assert body == b"".join(golden_events("messages_text.sse")[:-1])
    assert b"message_stop" not in body
    await fake.wait_closed("a", timeout=0.5)


async def test_stall_keeps_the_connection_open_until_the_client_closes(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.golden("chat_text.sse", count=2, then="stall"))
    answer = await post(session, fake, "a", "/v1/chat/completions", STREAM_BODY)
    first = await answer.content.readuntil(b"\n\n")
    second = await answer.content.readuntil(b"\n\n")

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(answer.content.readany(), 0.2)
    log = fake.connections("a")[0]
    assert [first, second] == golden_events("chat_text.sse")[:2]
    assert log.closed_at is None

    closed_by_client = time.monotonic()
    answer.close()
    since_last_write = await fake.wait_closed("a", timeout=0.5)

    assert log.closed_at is not None and log.last_write_at is not None
    assert 0 <= log.closed_at - closed_by_client < 0.5
    assert since_last_write == pytest.approx(log.closed_at - log.last_write_at)
    assert since_last_write >= 0.2


async def test_keep_alive_connection_closes_when_the_client_closes_it(fake: FakeUpstream) -> None:
    async with aiohttp.ClientSession() as client:
        answer = await post(client, fake, "a", "/v1/chat/completions", CHAT_BODY)
        await answer.read()
        with pytest.raises(TimeoutError):
            await fake.wait_closed("a", timeout=0.1)
    await fake.wait_closed("a", timeout=0.5)


async def test_wait_closed_without_any_request_fails_clearly(fake: FakeUpstream) -> None:
    with pytest.raises(AssertionError, match="no request reached deployment 'nobody'"):
        await fake.wait_closed("nobody")


async def test_json_reply_waits_its_delay(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.json({"ok": True}, status=202, delay_s=0.1))
    started = time.monotonic()

    answer = await post(session, fake, "a", "/v1/chat/completions", CHAT_BODY)

    assert (answer.status, await answer.json()) == (202, {"ok": True})
    assert time.monotonic() - started >= 0.1


async def test_stall_before_headers_sends_nothing_in_time(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.stall_before_headers(5.0))

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await post(session, fake, "a", "/v1/chat/completions", CHAT_BODY)
    await fake.wait_closed("a", timeout=0.5)


async def test_stall_before_headers_then_answers(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.stall_before_headers(0.1))
    started = time.monotonic()

    answer = await post(session, fake, "a", "/v1/chat/completions", CHAT_BODY)

    assert time.monotonic() - started >= 0.1
    assert (await answer.json())["choices"][0]["message"]["content"] == "Hello from a"


async def test_headers_then_eof_sends_sse_headers_and_no_event(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.headers_then_eof())

    answer = await post(session, fake, "a", "/v1/chat/completions", STREAM_BODY)

    assert answer.status == 200
    assert answer.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert await answer.read() == b""
    await fake.wait_closed("a", timeout=0.5)


async def test_chunked_writes_exact_bytes_in_small_pieces(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    raw = b"data: {\"a\":\r\n\r\ndata: 2\r\r: comment\n\n"
    fake.script("a", Reply.chunked(raw, chunk_size=3, delay_s=0.005))
    answer = await post(session, fake, "a", "/v1/chat/completions", STREAM_BODY)

    pieces = [piece async for piece in answer.content.iter_any()]

    assert b"".join(pieces) == raw
    assert max(len(piece) for piece in pieces) <= 3


async def test_redirect_is_a_307_with_location(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script("a", Reply.redirect("http://elsewhere.invalid/v1/chat/completions"))

    answer = await session.post(
        f"{fake.url}/a/v1/chat/completions", json=CHAT_BODY, allow_redirects=False
    )

    assert answer.status == 307
    assert answer.headers["location"] == "http://elsewhere.invalid/v1/chat/completions"


async def test_stream_rejects_an_unknown_ending() -> None:
    with pytest.raises(ValueError, match="then must be one of"):
        Reply.stream([], then="explode")


async def test_default_chat_answers_read_by_the_openai_sdk(fake: FakeUpstream) -> None:
    async with openai_client(fake.base_url("a")) as client:
        whole = await client.chat.completions.create(model="up-model", messages=[
            {"role": "user", "content": "hi"}])
        stream = await client.chat.completions.create(
            model="up-model", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]

    assert whole.choices[0].message.content == "Hello from a"
    text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(text) == "Hello from a"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


async def test_default_responses_answers_read_by_the_openai_sdk(fake: FakeUpstream) -> None:
    async with openai_client(fake.base_url("b")) as client:
        whole = await client.responses.create(model="up-model", input="hi")
        async with client.responses.stream(model="up-model", input="hi") as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_response()

    assert whole.output_text == "Hello from b"
    assert (final.output_text, final.status) == ("Hello from b", "completed")


async def test_default_messages_answers_read_by_the_anthropic_sdk(fake: FakeUpstream) -> None:
    base_url = fake.base_url("c", "anthropic")
    async with anthropic.AsyncAnthropic(base_url=base_url, api_key="x", max_retries=0) as client:
        messages: Any = [{"role": "user", "content": "hi"}]
        whole = await client.messages.create(model="up-model", max_tokens=50, messages=messages)
        streaming = client.messages.stream(model="up-model", max_tokens=50, messages=messages)
        async with streaming as stream:
            final = await stream.get_final_message()

    assert whole.content[0].type == "text" and whole.content[0].text == "Hello from c"
    assert final.content[0].type == "text" and final.content[0].text == "Hello from c"
    assert (final.stop_reason, final.usage.output_tokens) == ("end_turn", 3)
    assert fake.requests("c")[0].path == "/v1/messages"


def chunk_of(event: bytes) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(data_of(event))


def test_golden_chat_files_have_the_documented_shape() -> None:
    text = [chunk_of(event) for event in golden_events("chat_text.sse")[:-1]]
    tool = [chunk_of(event) for event in golden_events("chat_tool.sse")[:-1]]
    reasoning = [data_of(e) for e in golden_events("chat_reasoning.sse")[:-1]]

    assert [c.choices[0].delta.role for c in text[:1]] == ["assistant"]
    assert len([c for c in text if c.choices and c.choices[0].delta.content]) == 5
    assert [text[-2].choices[0].finish_reason, text[-1].choices] == ["stop", []]
    assert golden_events("chat_text.sse")[-1] == b"data: [DONE]\n\n"
    arguments = [data_of(event)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                 for event in golden_events("chat_tool.sse")[1:4]]
    assert arguments == ['{"location"', ': "Paris, France"', "}"]
    assert tool[0].choices[0].delta.tool_calls is not None
    assert tool[0].choices[0].delta.tool_calls[0].id == "call_Vf3kQ9mZ2xLp7TnR4sWbYc1H"
    assert tool[-2].choices[0].finish_reason == "tool_calls"
    assert [c["choices"][0]["delta"].get("reasoning") for c in reasoning[1:4]] == [
        "The user asks", " for 2 + 2.", " That is 4."]
    for chunk in reasoning:
        ChatCompletionChunk.model_validate(chunk)


@pytest.mark.parametrize("filename", ["responses_text.sse", "responses_tool.sse",
                                      "responses_reasoning.sse"])
def test_golden_responses_files_are_valid_official_events(filename: str) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    events = golden_events(filename)
    parsed = [adapter.validate_python(data_of(event)) for event in events]

    assert [event.sequence_number for event in parsed] == list(range(len(events)))
    assert [event.split(b"\n")[0] for event in events] == [
        b"event: " + event.type.encode() for event in parsed]
    assert parsed[-1].type == "response.completed"


@pytest.mark.parametrize("filename", ["messages_text.sse", "messages_tool.sse",
                                      "messages_thinking.sse"])
def test_golden_messages_files_are_valid_official_events(filename: str) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    events = golden_events(filename)
    parsed = [adapter.validate_python(data_of(event)) for event in events if b"ping" not in event]

    assert (parsed[0].type, parsed[-1].type) == ("message_start", "message_stop")
    assert [event.split(b"\n")[0] for event in events if b"ping" not in event] == [
        b"event: " + event.type.encode() for event in parsed]


def test_golden_special_deltas_are_present() -> None:
    def delta_types(filename: str) -> list[str]:
        return [data_of(e)["delta"]["type"] for e in golden_events(filename)
                if e.startswith(b"event: content_block_delta")]

    assert delta_types("messages_thinking.sse") == [
        "thinking_delta", "thinking_delta", "signature_delta", "text_delta", "text_delta"]
    assert delta_types("messages_tool.sse").count("input_json_delta") == 4
    assert [e.split(b"\n")[0] for e in golden_events("responses_reasoning.sse")].count(
        b"event: response.reasoning_summary_text.delta") == 3


@pytest.mark.parametrize(("protocol", "event_type", "skipped"), [
    ("openai_chat", ChatCompletionChunk, [b"data: [DONE]\n\n"]),
    ("openai_responses", ResponseStreamEvent, []),
    ("anthropic_messages", RawMessageStreamEvent, [b'event: ping\ndata: {"type":"ping"}\n\n']),
])
def test_default_stream_answers_are_valid_official_events(
    protocol: str, event_type: Any, skipped: list[bytes]
) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(event_type)
    body = {**STREAM_BODY, "stream_options": {"include_usage": True}}
    events = stream_answer(protocol, body, "Hello from a")
    checked = [event for event in events if event not in skipped]

    for event in checked:
        adapter.validate_python(data_of(event))

    assert len(events) - len(checked) == len(skipped)


def test_default_json_answers_are_valid_official_objects() -> None:
    chat = ChatCompletion.model_validate(json_answer("openai_chat", CHAT_BODY, "Hello from a"))
    response = Response.model_validate(json_answer("openai_responses", CHAT_BODY, "Hi b"))
    message = Message.model_validate(json_answer("anthropic_messages", CHAT_BODY, "Hi c"))

    assert chat.choices[0].message.content == "Hello from a"
    assert (response.output_text, message.content[0].type) == ("Hi b", "text")
