"""OpenAI Chat Completions protocol module: requests, answers, streams and errors.

Stream round trips compare canonical events modulo framing: Chat has no content
blocks (BlockStop is not carried), the Start id becomes the chunk id
``chatcmpl-<request_id>`` and reasoning signatures are dropped. Request round trips
leave out what Chat cannot carry on input: assistant reasoning and tool-result errors.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from hopbase import canonical, errors, sse
from hopbase.canonical import (
    BlockStop,
    Error,
    Finish,
    ImagePart,
    Message,
    ReasoningDelta,
    ReasoningPart,
    Start,
    StopReason,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    ToolResult,
    Usage,
    UsageEvent,
)
from hopbase.protocols import openai_chat

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}

RICH_REQUEST = canonical.Request(
    model="gpt-5.6-sol",
    system="You are terse.\n\nAnswer in English.",
    messages=(
        Message("user", (TextPart("What is in this picture?"),
                         ImagePart("https://example.com/cat.png", "high"))),
        Message("assistant", (TextPart("A cat."),)),
        Message("user", (TextPart("And the weather in Paris and Rome?"),)),
        Message("assistant", (TextPart("Checking."),
                              ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
                              ToolCall("call_2", "get_weather", '{"city": "Rome"}'))),
        Message("user", (ToolResult("call_1", "18C, sunny"), ToolResult("call_2", "21C"))),
        Message("user", (ImagePart("data:image/png;base64,iVBORw0KGgo="),
                         TextPart("Thanks. Also this one?"))),
    ),
    tools=(
        canonical.Tool("get_weather", "Current weather of a city", WEATHER_SCHEMA),
        canonical.Tool("get_time"),
    ),
    tool_choice=canonical.ToolChoice("tool", "get_weather"),
    max_tokens=512,
    temperature=0.3,
    top_p=0.9,
    stop=("END", "STOP"),
    stream=True,
    include_usage=True,
    reasoning=canonical.Reasoning(effort="high"),
    parallel_tool_calls=False,
    user="user-42",
    metadata={"team": "search"},
    source_protocol="openai_chat",
    extra={"seed": 7, "response_format": {"type": "json_object"}},
)


def test_request_round_trip() -> None:
    assert openai_chat.parse_request(
        openai_chat.render_request(RICH_REQUEST, RICH_REQUEST.model)) == RICH_REQUEST


def test_render_request_wire_form() -> None:
    request = canonical.Request(
        model="group",
        system="Be brief.",
        messages=(
            Message("user", (TextPart("hi"),)),
            Message("assistant", (ReasoningPart("thinking", "sig"),
                                  ToolCall("call_9", "lookup", "{}"))),
            Message("user", (ToolResult("call_9", "no such thing", is_error=True),
                             TextPart("ok"))),
        ),
        tool_choice=canonical.ToolChoice("required"),
        max_tokens=100,
        stream=True,
        reasoning=canonical.Reasoning(budget_tokens=8000),
        source_protocol="anthropic_messages",
    )
    assert openai_chat.render_request(request, "gpt-up") == {
        "model": "gpt-up",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_9", "type": "function",
                 "function": {"name": "lookup", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_9", "content": "no such thing"},
            {"role": "user", "content": "ok"},
        ],
        "tool_choice": "required",
        "max_completion_tokens": 100,
        "reasoning_effort": "medium",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_render_request_drops_extra_of_another_protocol(caplog: pytest.LogCaptureFixture) -> None:
    request = canonical.Request(
        model="group", messages=(Message("user", (TextPart("hi"),)),),
        source_protocol="anthropic_messages", extra={"top_k": 5, "service_tier": "auto"})
    with caplog.at_level(logging.DEBUG, logger="hopbase.protocols.openai_chat"):
        body = openai_chat.render_request(request, "up")
    assert body == {"model": "up", "messages": [{"role": "user", "content": "hi"}]}
    assert caplog.messages == [
        "dropping fields ['service_tier', 'top_k'] of a anthropic_messages request: "
        "Chat has no place for them"]


def test_render_request_keeps_extra_of_chat_without_overriding() -> None:
    request = canonical.Request(
        model="group", messages=(Message("user", (TextPart("hi"),)),),
        source_protocol="openai_chat", extra={"seed": 1, "model": "sneaky"})
    assert openai_chat.render_request(request, "up") == {
        "model": "up", "messages": [{"role": "user", "content": "hi"}], "seed": 1}


def test_parse_request_as_sdks_send_it() -> None:
    body = {
        "model": "gpt-5.6-sol",
        "messages": [
            {"role": "developer", "content": "Use tools."},
            {"role": "system", "content": [{"type": "text", "text": "Line one."},
                                           {"type": "text", "text": "Line two."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "Weather?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.jpg"}}]},
            {"role": "assistant", "content": None, "reasoning_content": "Need the tool.",
             "tool_calls": [
                 {"id": "call_a", "type": "function",
                  "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                 {"id": "call_b", "type": "function",
                  "function": {"name": "get_weather", "arguments": "{\"city\":\"Bergen\"}"}}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "3C"},
            {"role": "tool", "tool_call_id": "call_b",
             "content": [{"type": "text", "text": "7C"}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "parameters": WEATHER_SCHEMA, "strict": True}}],
        "tool_choice": "auto",
        "max_tokens": 64,
        "stop": "\n\n",
        "temperature": 1,
        "stream": True,
        "stream_options": {"include_usage": False},
        "n": 1,
        "frequency_penalty": None,
    }
    assert openai_chat.parse_request(body) == canonical.Request(
        model="gpt-5.6-sol",
        system="Use tools.\n\nLine one.\nLine two.",
        messages=(
            Message("user", (TextPart("Weather?"), ImagePart("https://x/y.jpg"))),
            Message("assistant", (ReasoningPart("Need the tool."),
                                  ToolCall("call_a", "get_weather", '{"city":"Oslo"}'),
                                  ToolCall("call_b", "get_weather", '{"city":"Bergen"}'))),
            Message("user", (ToolResult("call_a", "3C"), ToolResult("call_b", "7C"))),
            Message("assistant", (TextPart("No."),)),
            Message("user", (TextPart("thanks"),)),
        ),
        tools=(canonical.Tool("get_weather", None, WEATHER_SCHEMA),),
        tool_choice=canonical.ToolChoice("auto"),
        max_tokens=64,
        temperature=1,
        stop=("\n\n",),
        stream=True,
        include_usage=False,
        source_protocol="openai_chat",
        extra={"n": 1, "frequency_penalty": None},
    )


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 10, "max_completion_tokens": 20}
    assert openai_chat.parse_request(body).max_tokens == 20


USER = {"role": "user", "content": "hi"}

BAD_REQUESTS = [
    ([1], "the request body must be a JSON object"),
    ({"messages": [USER]}, "model: required, a non-empty string"),
    ({"model": 5, "messages": [USER]}, "model: required, a non-empty string"),
    ({"model": "m"}, "messages: required, a non-empty list of messages"),
    ({"model": "m", "messages": []}, "messages: required, a non-empty list of messages"),
    ({"model": "m", "messages": ["hi"]}, "messages[0]: must be an object"),
    ({"model": "m", "messages": [{"role": "robot", "content": "x"}]},
     "messages[0].role: must be one of system, developer, user, assistant, tool"),
    ({"model": "m", "messages": [{"role": "user"}]},
     "messages[0].content: must be a string or a list of content parts"),
    ({"model": "m", "messages": [{"role": "user", "content": ["x"]}]},
     "messages[0].content[0].type: None is not supported here (expected image_url or text)"),
    ({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]},
     "messages[0].content[0].type: 'input_audio' is not supported here "
     "(expected image_url or text)"),
    ({"model": "m", "messages": [{"role": "user", "content": [{"type": ["text"]}]}]},
     "messages[0].content[0].type: ['text'] is not supported here (expected image_url or text)"),
    ({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
     "messages[0].content[0].text: must be a string"),
    ({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"detail": "low"}}]}]},
     "messages[0].content[0].image_url.url: must be a string"),
    ({"model": "m", "messages": [{"role": "system", "content": [
        {"type": "image_url", "image_url": {"url": "https://x"}}]}]},
     "messages[0].content[0].type: 'image_url' is not supported here (expected text)"),
    ({"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": {}}]},
     "messages[0].tool_calls: must be a list"),
    ({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]},
     "messages[0].tool_calls[0].function: required, an object with name and arguments"),
    ({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}]},
     "messages[0].tool_calls[0].function.arguments: must be a string"),
    ({"model": "m", "messages": [{"role": "assistant", "reasoning_content": 1}]},
     "messages[0].reasoning_content: must be a string"),
    ({"model": "m", "messages": [{"role": "tool", "content": "x"}]},
     "messages[0].tool_call_id: must be a string"),
    ({"model": "m", "messages": [USER], "tools": {}}, "tools: must be a list"),
    ({"model": "m", "messages": [USER], "tools": [{"type": "custom", "custom": {"name": "x"}}]},
     'tools[0].type: only {"type": "function"} tools are supported'),
    ({"model": "m", "messages": [USER], "tools": [{"type": "function", "function": {}}]},
     "tools[0].function.name: required, a non-empty string"),
    ({"model": "m", "messages": [USER], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": []}}]},
     "tools[0].function.parameters: must be a JSON Schema object"),
    ({"model": "m", "messages": [USER], "tool_choice": "any"},
     'tool_choice: "auto", "none", "required" or '
     '{"type": "function", "function": {"name": ...}} expected'),
    ({"model": "m", "messages": [USER], "temperature": "hot"}, "temperature: must be a number"),
    ({"model": "m", "messages": [USER], "top_p": True}, "top_p: must be a number"),
    ({"model": "m", "messages": [USER], "max_tokens": 1.5}, "max_tokens: must be an integer"),
    ({"model": "m", "messages": [USER], "max_completion_tokens": "9"},
     "max_completion_tokens: must be an integer"),
    ({"model": "m", "messages": [USER], "stream": "yes"}, "stream: must be true or false"),
    ({"model": "m", "messages": [USER], "stop": ["a", 1]},
     "stop: must be a string or a list of strings"),
    ({"model": "m", "messages": [USER], "stream_options": []},
     "stream_options: must be an object"),
    ({"model": "m", "messages": [USER], "stream_options": {"include_usage": 1}},
     "include_usage: must be true or false"),
    ({"model": "m", "messages": [USER], "metadata": {"a": 1}},
     "metadata: must be an object of string values"),
    ({"model": "m", "messages": [USER], "user": 42}, "user: must be a string"),
    ({"model": "m", "messages": [USER], "reasoning_effort": 3},
     "reasoning_effort: must be a string"),
    ({"model": "m", "messages": [USER], "parallel_tool_calls": "no"},
     "parallel_tool_calls: must be true or false"),
]


@pytest.mark.parametrize(("body", "message"), BAD_REQUESTS)
def test_bad_request_raises_invalid_request(body: Any, message: str) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        openai_chat.parse_request(body)
    assert (caught.value.status, caught.value.message) == (400, message)


RICH_RESPONSE = canonical.Response(
    id="chatcmpl-abc123",
    model="group",
    parts=(ReasoningPart("The user wants weather."), TextPart("Let me check."),
           ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
           ToolCall("call_2", "get_weather", '{"city": "Rome"}')),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=120, output_tokens=45, cached_input_tokens=64, reasoning_tokens=12),
)


def test_response_round_trip() -> None:
    rendered = openai_chat.render_response(RICH_RESPONSE, "group")
    assert openai_chat.parse_response(rendered) == RICH_RESPONSE
    completion = ChatCompletion.model_validate(rendered)
    assert (completion.model, completion.choices[0].finish_reason,
            completion.usage and completion.usage.total_tokens) == ("group", "tool_calls", 165)


def test_parse_official_non_stream_answer() -> None:
    body = {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4.1-2025-04-14",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "Hello! How can I assist you today?",
                        "refusal": None, "annotations": []},
            "logprobs": None,
            "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0},
        },
        "service_tier": "default",
    }
    assert openai_chat.parse_response(body) == canonical.Response(
        "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "gpt-4.1-2025-04-14",
        (TextPart("Hello! How can I assist you today?"),), StopReason.END_TURN,
        Usage(19, 10, 0, 0))


def test_parse_refusal_and_deepseek_reasoning() -> None:
    refusal = {"id": "c1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
               "message": {"role": "assistant", "content": None, "refusal": "I can't."}}]}
    assert openai_chat.parse_response(refusal) == canonical.Response(
        "c1", "m", (TextPart("I can't."),), StopReason.REFUSAL, Usage())
    reasoning = {"id": "d1", "model": "deepseek-reasoner", "choices": [
        {"index": 0, "finish_reason": "length",
         "message": {"role": "assistant", "content": "Hi", "reasoning_content": "Okay."}}]}
    assert openai_chat.parse_response(reasoning).parts == (ReasoningPart("Okay."), TextPart("Hi"))


def test_parse_response_without_choices_is_an_upstream_failure() -> None:
    with pytest.raises(errors.UpstreamFailed) as caught:
        openai_chat.parse_response({"id": "x", "choices": []})
    assert caught.value.message == "invalid chat.completion from upstream: no choices"


def decode(data: bytes) -> list[sse.Event]:
    return sse.Decoder().feed(data)


def parse_stream(data: bytes) -> tuple[list[canonical.Event], bool]:
    parser = openai_chat.StreamParser()
    events = [event for item in decode(data) for event in parser.feed(item)]
    return events, parser.complete


STREAM_EVENTS: list[canonical.Event] = [
    Start("msg_01", "claude-up"),
    ReasoningDelta("The user wants "),
    ReasoningDelta("weather.", signature="sig=="),
    BlockStop(),
    TextDelta("Checking "),
    TextDelta("Paris."),
    BlockStop(),
    ToolCallStart(0, "call_1", "get_weather"),
    ToolCallDelta(0, '{"ci'),
    ToolCallDelta(0, 'ty": "Pa'),
    ToolCallDelta(0, 'ris"}'),
    BlockStop(),
    UsageEvent(Usage(input_tokens=30, output_tokens=21, cached_input_tokens=4,
                     reasoning_tokens=6)),
    Finish(StopReason.TOOL_USE),
]


def render_stream(events: list[canonical.Event], include_usage: bool = True) -> bytes:
    renderer = openai_chat.StreamRenderer("group", include_usage, request_id="req_7")
    return b"".join(renderer.render(event) for event in events)


def framing_free(events: list[canonical.Event], include_usage: bool) -> list[canonical.Event]:
    """What survives Chat framing: see the module docstring."""
    kept: list[canonical.Event] = [Start("chatcmpl-req_7", "group")]
    for event in events[1:]:
        if isinstance(event, BlockStop) or (isinstance(event, UsageEvent) and not include_usage):
            continue
        kept.append(ReasoningDelta(event.text) if isinstance(event, ReasoningDelta) else event)
    return kept


@pytest.mark.parametrize("include_usage", [True, False])
def test_stream_round_trip(include_usage: bool) -> None:
    events, complete = parse_stream(render_stream(STREAM_EVENTS, include_usage))
    assert (events, complete) == (framing_free(STREAM_EVENTS, include_usage), True)


def test_rendered_chunks_validate_against_the_sdk() -> None:
    items = decode(render_stream(STREAM_EVENTS))
    assert items[-1].data == b"[DONE]"
    chunks = [ChatCompletionChunk.model_validate_json(item.data) for item in items[:-1]]
    assert {(chunk.id, chunk.created, chunk.model, chunk.object) for chunk in chunks} == {
        (chunks[0].id, chunks[0].created, "group", "chat.completion.chunk")}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [chunk.choices[0].finish_reason for chunk in chunks[:-1]][-1] == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 21
    assert all(item.name is None for item in items)


def test_rendered_bytes_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_chat.time, "time", lambda: 1764441600.5)
    renderer = openai_chat.StreamRenderer("gr\"oup", include_usage=True, request_id="r1")
    events: list[canonical.Event] = [
        Start("x", "y"), TextDelta("Hi"), BlockStop(), UsageEvent(Usage(3, 1)),
        Finish(StopReason.MAX_TOKENS)]
    out = b"".join(renderer.render(event) for event in events)
    head = b'data: {"id":"chatcmpl-r1","object":"chat.completion.chunk","created":1764441600,' \
           b'"model":"gr\\"oup","choices":['
    assert out == (
        head + b'{"index":0,"delta":{"role":"assistant","content":"","refusal":null},'
        b'"logprobs":null,"finish_reason":null}]}\n\n'
        + head + b'{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}\n\n'
        + head + b'{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]}\n\n'
        + head + b'],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,'
        b'"prompt_tokens_details":{"cached_tokens":0},'
        b'"completion_tokens_details":{"reasoning_tokens":0}}}\n\n'
        b"data: [DONE]\n\n")
    assert renderer.render(TextDelta("late")) == b""


def test_renderer_without_start_emits_the_role_chunk_first() -> None:
    renderer = openai_chat.StreamRenderer("group", request_id="r")
    items = decode(renderer.render(TextDelta("a")) + renderer.render(TextDelta("")))
    deltas = [orjson.loads(item.data)["choices"][0]["delta"] for item in items]
    assert deltas == [{"role": "assistant", "content": "", "refusal": None}, {"content": "a"}]


def sdk_client(status: int, body: bytes, content_type: str) -> openai.OpenAI:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=body, headers={"content-type": content_type})

    return openai.OpenAI(api_key="test", base_url="http://hopbase.test/v1", max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))


def test_sdk_stream_helper_accumulates_rendered_stream() -> None:
    client = sdk_client(200, render_stream(STREAM_EVENTS), "text/event-stream")
    with client.chat.completions.stream(
            model="group", messages=[{"role": "user", "content": "hi"}]) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    message = completion.choices[0].message
    assert message.content == "Checking Paris."
    assert getattr(message, "reasoning", None) == "The user wants weather."
    assert message.tool_calls is not None
    assert [(call.id, call.function.name, call.function.arguments)
            for call in message.tool_calls] == [("call_1", "get_weather", '{"city": "Paris"}')]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.total_tokens) == (30, 51)


def test_sdk_raises_the_rendered_in_stream_error() -> None:
    renderer = openai_chat.StreamRenderer("group", request_id="r")
    body = renderer.render(Start("a", "b")) + renderer.render(TextDelta("par")) + \
        renderer.render_error(Error("overloaded_error", "Upstream overloaded"))
    client = sdk_client(200, body, "text/event-stream")
    stream = client.chat.completions.create(
        model="group", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(openai.APIError) as caught:
        for _ in stream:
            pass
    assert (caught.value.message, caught.value.type, caught.value.code) == (
        "Upstream overloaded", "server_error", "overloaded_error")


def test_sdk_reads_the_rendered_non_stream_answer() -> None:
    body = orjson.dumps(openai_chat.render_response(RICH_RESPONSE, "group"))
    client = sdk_client(200, body, "application/json")
    completion = client.chat.completions.create(
        model="group", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Let me check."
    assert completion.choices[0].message.tool_calls is not None
    assert len(completion.choices[0].message.tool_calls) == 2


def test_stream_error_exact_bytes_and_round_trip() -> None:
    interrupted = Error("api_error", "Response stream interrupted, please retry")
    renderer = openai_chat.StreamRenderer("group")
    out = renderer.render_error(interrupted)
    assert out == (b'data: {"error":{"message":"Response stream interrupted, please retry",'
                   b'"type":"server_error","code":"api_error"}}\n\ndata: [DONE]\n\n')
    assert renderer.render(TextDelta("after")) == b""
    assert renderer.render_error(interrupted) == b""
    assert parse_stream(out) == ([interrupted], True)


@pytest.mark.parametrize(("error", "kind"), [
    (Error("rate_limit_error", "slow down"), "rate_limit_error"),
    (Error("invalid_request_error", "bad"), "invalid_request_error"),
    (Error("authentication_error", "who"), "authentication_error"),
    (Error("timeout_error", "too slow"), "server_error"),
    (Error("not_found_error", "gone"), "invalid_request_error")])
def test_stream_error_types_round_trip(error: Error, kind: str) -> None:
    out = openai_chat.StreamRenderer("g").render(error)
    assert orjson.loads(decode(out)[0].data) == {
        "error": {"message": error.message, "type": kind, "code": error.type}}
    assert parse_stream(out) == ([error], True)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None,
          usage: dict[str, Any] | None = None, choices: bool = True) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
                            "object": "chat.completion.chunk", "created": 1741570283,
                            "model": "gpt-4o-2024-08-06", "service_tier": "default",
                            "system_fingerprint": "fp_eb9dce56a8", "choices": []}
    if choices:
        body["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None,
                            "finish_reason": finish}]
    body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


OPENAI_USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
                "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}}
OPENAI_START = Start("chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "gpt-4o-2024-08-06")


def test_official_text_stream() -> None:
    data = (chunk({"role": "assistant", "content": "", "refusal": None})
            + chunk({"content": "Hello"}) + chunk({"content": "!"})
            + chunk({}, finish="stop") + chunk(usage=OPENAI_USAGE, choices=False)
            + b"data: [DONE]\n\n")
    assert parse_stream(data) == ([
        OPENAI_START, TextDelta("Hello"), TextDelta("!"),
        UsageEvent(Usage(9, 3)), Finish(StopReason.END_TURN)], True)


def test_official_parallel_tool_call_stream() -> None:
    first = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"index": 0, "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "type": "function",
         "function": {"name": "get_weather", "arguments": ""}}]}
    data = (chunk(first)
            + chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\""}}]})
            + chunk({"tool_calls": [{"index": 0, "function": {"arguments": "location"}}]})
            + chunk({"tool_calls": [{"index": 0, "function": {"arguments": "\":\"Paris\"}"}}]})
            + chunk({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                                     "function": {"name": "get_time", "arguments": "{}"}}]})
            + chunk({}, finish="tool_calls") + b"data: [DONE]\n\n")
    assert parse_stream(data) == ([
        OPENAI_START,
        ToolCallStart(0, "call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather"),
        ToolCallDelta(0, '{"'), ToolCallDelta(0, "location"), ToolCallDelta(0, '":"Paris"}'),
        ToolCallStart(1, "call_2", "get_time"), ToolCallDelta(1, "{}"),
        Finish(StopReason.TOOL_USE)], True)


def test_deepseek_reasoning_stream_with_usage_on_the_finish_chunk() -> None:
    usage = {"prompt_tokens": 13, "completion_tokens": 250, "total_tokens": 263,
             "prompt_tokens_details": {"cached_tokens": 5},
             "completion_tokens_details": {"reasoning_tokens": 220},
             "prompt_cache_hit_tokens": 5, "prompt_cache_miss_tokens": 8}
    data = (chunk({"role": "assistant", "content": None, "reasoning_content": ""})
            + chunk({"content": None, "reasoning_content": "Okay"})
            + chunk({"content": None, "reasoning_content": ", greet."})
            + chunk({"content": "Hello", "reasoning_content": None})
            + chunk({"content": "", "reasoning_content": None}, finish="stop", usage=usage))
    parser = openai_chat.StreamParser()
    events = [event for item in decode(data) for event in parser.feed(item)]
    assert events == [OPENAI_START, ReasoningDelta("Okay"), ReasoningDelta(", greet."),
                      TextDelta("Hello"), UsageEvent(Usage(13, 250, 5, 220)),
                      Finish(StopReason.END_TURN)]
    assert parser.complete is False
    assert parser.feed(decode(b"data: [DONE]\n\n")[0]) == []
    assert parser.complete is True


def test_streamed_refusal_and_content_filter() -> None:
    data = chunk({"refusal": "I can't help."}) + chunk({}, finish="stop") + b"data: [DONE]\n\n"
    assert parse_stream(data)[0][1:] == [TextDelta("I can't help."), Finish(StopReason.REFUSAL)]
    filtered = chunk({"content": "x"}) + chunk({}, finish="content_filter") + b"data: [DONE]\n\n"
    assert parse_stream(filtered)[0][-1] == Finish(StopReason.CONTENT_FILTER)


def test_upstream_error_and_invalid_json() -> None:
    error = b'data: {"error": {"message": "The server had an error", "type": "server_error",' \
            b' "param": null, "code": null}}\n\n'
    assert parse_stream(error) == ([Error("api_error", "The server had an error")], False)
    limited = b'data: {"error": {"message": "Rate limit", "type": "requests",' \
              b' "code": "rate_limit_exceeded"}}\n\n'
    assert parse_stream(limited)[0] == [Error("api_error", "Rate limit")]
    assert parse_stream(b"data: {not json\n\n")[0] == [
        Error("api_error", "invalid JSON from upstream")]
    odd = b'data: {"error": {"message": "odd", "type": ["x"], "code": {"y": 1}}}\n\n'
    assert parse_stream(odd)[0] == [Error("api_error", "odd")]


def test_tool_call_without_a_usable_index_or_id_still_starts_a_call() -> None:
    data = chunk({"tool_calls": [{"index": {"bad": 1}, "function": {"name": "f"}}]})
    events, _ = parse_stream(data)
    assert len(events) == 2 and isinstance(events[1], ToolCallStart)
    assert (events[1].index, events[1].name, events[1].id[:5], len(events[1].id)) == (
        0, "f", "call_", 29)


def test_role_only_and_empty_chunks_yield_only_start() -> None:
    data = chunk({"role": "assistant"}) + chunk({"content": ""}) + chunk({})
    assert parse_stream(data) == ([OPENAI_START], False)


ERROR_BODIES = [
    (errors.InvalidRequest("bad"), "invalid_request_error", "invalid_request"),
    (errors.Unauthorized("who"), "authentication_error", "invalid_api_key"),
    (errors.Forbidden("no"), "permission_error", "forbidden"),
    (errors.ModelNotFound("none"), "invalid_request_error", "model_not_found"),
    (errors.BodyTooLarge("big"), "invalid_request_error", "request_too_large"),
    (errors.RateLimited("busy"), "rate_limit_error", "rate_limit_exceeded"),
    (errors.GatewayError("busy", status=429), "rate_limit_error", "rate_limit_exceeded"),
    (errors.AllCoolingDown("cool"), "server_error", "all_deployments_cooling_down"),
    (errors.UpstreamFailed("down"), "server_error", "upstream_error"),
    (errors.UpstreamTimeout("slow"), "server_error", "upstream_timeout"),
    (errors.UpstreamRejected("context too long", status=422), "invalid_request_error",
     "upstream_rejected"),
]


@pytest.mark.parametrize(("error", "kind", "code"), ERROR_BODIES)
def test_render_error(error: errors.GatewayError, kind: str, code: str) -> None:
    assert openai_chat.render_error(error) == {
        "error": {"message": error.message, "type": kind, "param": None, "code": code}}


def test_sdk_reads_the_rendered_error_body() -> None:
    body = orjson.dumps(openai_chat.render_error(errors.RateLimited("all busy")))
    client = sdk_client(429, body, "application/json")
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="g", messages=[{"role": "user", "content": "x"}])
    assert (caught.value.code, caught.value.type) == ("rate_limit_exceeded", "rate_limit_error")


WORDS = st.sampled_from([
    "user", "assistant", "tool", "system", "developer", "function", "text", "image_url",
    "refusal", "auto", "required", "stop", "length", "tool_calls", "server_error", "api_error"])
KEYS = st.sampled_from([
    "role", "content", "type", "text", "image_url", "url", "detail", "tool_calls", "function",
    "name", "arguments", "id", "tool_call_id", "reasoning", "reasoning_content", "refusal",
    "parameters", "description", "index", "include_usage", "delta", "choices", "usage", "error",
    "code", "message", "finish_reason", "prompt_tokens", "prompt_tokens_details",
    "cached_tokens"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | WORDS
    | st.text(max_size=4),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=16)
FIELDS = st.sampled_from(sorted(openai_chat._KNOWN_FIELDS - {"model"}))


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(FIELDS, JSON, max_size=5))
def test_any_client_json_parses_or_raises_invalid_request(fields: dict[str, Any]) -> None:
    try:
        request = openai_chat.parse_request({"model": "m", **fields})
    except errors.InvalidRequest as error:
        assert error.status == 400
    else:
        assert openai_chat.parse_request(openai_chat.render_request(request, "m")).model == "m"


@settings(max_examples=120, deadline=None)
@given(st.lists(JSON, max_size=4))
def test_any_upstream_chunk_parses_without_raising(bodies: list[Any]) -> None:
    parser = openai_chat.StreamParser()
    for body in bodies:
        for event in parser.feed(sse.Event(None, json.dumps(body).encode(), b"")):
            assert isinstance(event, canonical.Event)
    try:
        openai_chat.parse_response(bodies[0] if bodies else {})
    except errors.UpstreamFailed as error:
        assert error.status == 502
