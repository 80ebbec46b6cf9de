"""The Anthropic Messages protocol module: requests, answers, streams, errors."""

# The recorded wire fixtures below keep their original, long lines.
# ruff: noqa: E501

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import anthropic
import attrs
import httpx2
import orjson
import pytest
from anthropic import types as wire
from hypothesis import given, settings
from hypothesis import strategies as st

from hopbase import canonical, errors, sse
from hopbase.protocols import anthropic_messages as messages

StopReason = canonical.StopReason
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


def rich_request(**changes: Any) -> canonical.Request:
    """Everything the Messages API can say about one conversation."""
    request = canonical.Request(
        model="claude-sonnet-5",
        system="You are a weather bot.",
        messages=(
            canonical.Message("user", (
                canonical.TextPart("What is this and how is the weather there?"),
                canonical.ImagePart("data:image/png;base64,iVBORw0KGgo="),
                canonical.ImagePart("https://example.com/paris.jpg"),
            )),
            canonical.Message("assistant", (
                canonical.ReasoningPart("The user wants the weather in Paris.", SIGNATURE),
                canonical.TextPart("That is the Eiffel Tower. Let me check."),
                canonical.ToolCall("toolu_01A", "get_weather", '{"city":"Paris","unit":"c"}'),
            )),
            canonical.Message("user", (
                canonical.ToolResult("toolu_01A", "18 degrees, sunny"),
                canonical.ToolResult("toolu_01B", "station offline", is_error=True),
                canonical.TextPart("Thanks!"),
            )),
        ),
        tools=(canonical.Tool("get_weather", "Current weather for a city", {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),),
        tool_choice=canonical.ToolChoice("auto"),
        parallel_tool_calls=False,
        max_tokens=2048,
        temperature=1.0,
        top_p=0.95,
        stop=("END", "STOP"),
        stream=True,
        include_usage=True,
        reasoning=canonical.Reasoning(budget_tokens=1500),
        user="user-42",
        source_protocol=messages.NAME,
        extra={"top_k": 40, "service_tier": "auto"},
    )
    return attrs.evolve(request, **changes)


def test_request_round_trip_keeps_everything() -> None:
    request = rich_request()
    assert messages.parse_request(messages.render_request(request, request.model)) == request


def test_request_renders_the_wire_shape() -> None:
    body = messages.render_request(rich_request(), "claude-upstream")
    assert body["model"] == "claude-upstream"
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1500}
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["metadata"] == {"user_id": "user-42"}
    assert body["top_k"] == 40
    assert body["messages"][0]["content"][1] == {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    assert body["messages"][1]["content"][2] == {
        "type": "tool_use", "id": "toolu_01A", "name": "get_weather",
        "input": {"city": "Paris", "unit": "c"}}
    assert body["messages"][2]["content"][1] == {
        "type": "tool_result", "tool_use_id": "toolu_01B", "content": "station offline",
        "is_error": True}


def test_parse_reads_the_wire_forms() -> None:
    request = messages.parse_request({
        "model": "claude-sonnet-5", "max_tokens": 100,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"b": [1, 2]}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1",
                 "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]},
        ],
        "tool_choice": {"type": "any"},
        "metadata": {"user_id": "u1"},
        "stream": False,
        "anthropic_beta_flag": True,
    })
    assert request == canonical.Request(
        model="claude-sonnet-5", max_tokens=100, system="Be brief.",
        messages=(
            canonical.Message("user", (canonical.TextPart("Hi"),)),
            canonical.Message("assistant", (canonical.ToolCall("t1", "f", '{"b":[1,2]}'),)),
            canonical.Message("user", (canonical.ToolResult("t1", "one\ntwo"),
                                       canonical.ImagePart("https://x.test/a.png"))),
        ),
        tool_choice=canonical.ToolChoice("required"), user="u1",
        source_protocol=messages.NAME, extra={"anthropic_beta_flag": True})


def test_what_canonical_cannot_hold_reaches_an_anthropic_upstream_verbatim() -> None:
    system = [{"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral"}}]
    history = [
        {"role": "user", "content": [{"type": "document", "source": {
            "type": "text", "media_type": "text/plain", "data": "A memo."}}]},
        {"role": "assistant", "content": [
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "text", "text": "Done."}]},
        {"role": "user", "content": "And now?"},
    ]
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]
    thinking = {"type": "adaptive", "display": "omitted"}
    body = {"model": "m", "max_tokens": 9, "system": system, "messages": history,
            "tools": tools, "thinking": thinking}
    request = messages.parse_request(body)
    assert request.system == "Long rules."
    assert request.messages == (
        canonical.Message("user", ()),
        canonical.Message("assistant", (canonical.TextPart("Done."),)),
        canonical.Message("user", (canonical.TextPart("And now?"),)))
    assert request.tools == ()
    assert request.reasoning == canonical.Reasoning()
    assert messages.render_request(request, "m") == body
    foreign = attrs.evolve(request, source_protocol="openai_chat")
    rendered = messages.render_request(foreign, "m")
    assert rendered["system"] == "Long rules."
    assert rendered["messages"] == [
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "user", "content": [{"type": "text", "text": "And now?"}]}]
    assert "tools" not in rendered


def test_a_foreign_request_gets_anthropic_defaults(caplog: pytest.LogCaptureFixture) -> None:
    request = canonical.Request(
        model="gpt-group", source_protocol="openai_chat", temperature=0.2,
        reasoning=canonical.Reasoning(effort="high"), metadata={"team": "a"},
        extra={"seed": 7, "logprobs": True},
        messages=(
            canonical.Message("assistant", (canonical.ReasoningPart("unsigned thoughts"),
                                            canonical.TextPart(""))),
            canonical.Message("user", (canonical.TextPart("see result"),
                                       canonical.ToolResult("call_1", "42"))),
        ))
    with caplog.at_level(logging.DEBUG, logger=messages.__name__):
        body = messages.render_request(request, "claude-x")
    assert body == {
        "model": "claude-x", "max_tokens": 4096 + 16384,
        "thinking": {"type": "enabled", "budget_tokens": 16384},
        "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "42"},
            {"type": "text", "text": "see result"}]}]}
    assert "logprobs, metadata, seed" in caplog.text


@pytest.mark.parametrize(("effort", "max_tokens", "expected"), [
    ("low", None, {"max_tokens": 4096 + 1024, "thinking": 1024}),
    ("medium", 3000, {"max_tokens": 3000, "thinking": 2999}),
    ("high", 1000, {"max_tokens": 1000, "thinking": None}),
    ("none", None, {"max_tokens": 4096, "thinking": None}),
])
def test_reasoning_effort_becomes_a_thinking_budget(
        effort: str, max_tokens: int | None, expected: dict[str, Any]) -> None:
    request = canonical.Request(
        model="g", source_protocol="openai_responses", max_tokens=max_tokens,
        reasoning=canonical.Reasoning(effort=effort),
        messages=(canonical.Message("user", (canonical.TextPart("hi"),)),))
    body = messages.render_request(request, "c")
    assert body["max_tokens"] == expected["max_tokens"]
    budget = expected["thinking"]
    assert body.get("thinking") == (None if budget is None else
                                    {"type": "enabled", "budget_tokens": budget})


def test_thinking_is_left_out_when_a_tool_is_forced() -> None:
    request = canonical.Request(
        model="g", source_protocol="openai_chat", reasoning=canonical.Reasoning(effort="low"),
        tool_choice=canonical.ToolChoice("tool", "f"), temperature=0.5,
        messages=(canonical.Message("user", (canonical.TextPart("hi"),)),))
    body = messages.render_request(request, "c")
    assert "thinking" not in body
    assert body["tool_choice"] == {"type": "tool", "name": "f"}
    assert body["temperature"] == 0.5


@pytest.mark.parametrize(("part", "problem"), [
    (canonical.ToolCall("call_9", "f", "{not json"), "tool call call_9: arguments must be"),
    (canonical.ToolCall("call_9", "f", "[1]"), "tool call call_9: arguments must be"),
    (canonical.ImagePart("data:image/png,rawbytes"), "image: a data: URL must be base64"),
])
def test_unrenderable_parts_are_invalid_requests(part: canonical.Part, problem: str) -> None:
    request = canonical.Request(model="g", source_protocol="openai_chat",
                                messages=(canonical.Message("assistant", (part,)),))
    with pytest.raises(errors.InvalidRequest) as caught:
        messages.render_request(request, "c")
    assert str(caught.value).startswith(problem)


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "max_tokens": 10,
                            "messages": [{"role": "user", "content": "hi"}]}
    body.update(changes)
    return {key: value for key, value in body.items() if value is not ...}


def _message(*blocks: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


BAD_REQUESTS = [
    ([], "body: must be an object"),
    (_body(model=...), "model: required"),
    (_body(model=5), "model: required"),
    (_body(max_tokens=...), "max_tokens: required by the Messages API"),
    (_body(max_tokens="100"), "max_tokens: must be an integer"),
    (_body(max_tokens=True), "max_tokens: must be an integer"),
    (_body(max_tokens=0), "max_tokens: must be at least 1"),
    (_body(messages=...), "messages: required"),
    (_body(messages={}), "messages: must be a list"),
    (_body(messages=[]), "messages: must hold at least one message"),
    (_body(messages=["hi"]), "messages[0]: must be an object"),
    (_body(messages=[{"role": "system", "content": "x"}]), "messages[0].role: must be"),
    (_body(messages=[{"role": "user", "content": 5}]), "messages[0].content: must be a string"),
    (_body(messages=_message({"text": "x"})), "messages[0].content[0].type: must be a string"),
    (_body(messages=_message("x")), "messages[0].content[0]: must be an object"),
    (_body(messages=_message({"type": "text", "text": 5})), "messages[0].content[0].text:"),
    (_body(messages=_message({"type": "image"})), "messages[0].content[0].source: must be"),
    (_body(messages=_message({"type": "image", "source": {"type": "base64", "media_type": "a"}})),
     "messages[0].content[0].source.data: must be a string"),
    (_body(messages=_message({"type": "image", "source": {"type": 3}})),
     "messages[0].content[0].source.type: must be 'base64' or 'url'"),
    (_body(messages=_message({"type": "tool_use", "id": "t", "name": "f", "input": "{}"})),
     "messages[0].content[0].input: must be an object"),
    (_body(messages=_message({"type": "tool_use", "name": "f", "input": {}})),
     "messages[0].content[0].id: must be a string"),
    (_body(messages=_message({"type": "tool_result", "content": "x"})),
     "messages[0].content[0].tool_use_id: must be a string"),
    (_body(messages=_message({"type": "tool_result", "tool_use_id": "t", "content": 5})),
     "messages[0].content[0].content: must be a list"),
    (_body(messages=_message({"type": "tool_result", "tool_use_id": "t", "content": [7]})),
     "messages[0].content[0].content[0]: must be an object"),
    (_body(messages=_message({"type": "tool_result", "tool_use_id": "t", "is_error": "no"})),
     "messages[0].content[0].is_error: must be true or false"),
    (_body(messages=_message({"type": "thinking", "signature": "s"})),
     "messages[0].content[0].thinking: must be a string"),
    (_body(system=5), "system: must be a string or a list of text blocks"),
    (_body(system=[{"type": "image"}]), "system[0].type: must be 'text'"),
    (_body(system=[{"type": "text"}]), "system[0].text: must be a string"),
    (_body(tools={}), "tools: must be a list"),
    (_body(tools=[{"input_schema": {}}]), "tools[0].name: must be a string"),
    (_body(tools=[{"name": "f"}]), "tools[0].input_schema: must be an object"),
    (_body(tools=[{"name": "f", "description": 1, "input_schema": {}}]),
     "tools[0].description: must be a string"),
    (_body(tool_choice="auto"), "tool_choice: must be an object"),
    (_body(tool_choice={"type": "sometimes"}), "tool_choice.type: must be one of"),
    (_body(tool_choice={"type": "tool"}), "tool_choice.name: must be a string"),
    (_body(tool_choice={"type": "auto", "disable_parallel_tool_use": "no"}),
     "tool_choice.disable_parallel_tool_use: must be true or false"),
    (_body(temperature="hot"), "temperature: must be a number"),
    (_body(top_p=[1]), "top_p: must be a number"),
    (_body(stop_sequences="END"), "stop_sequences: must be a list"),
    (_body(stop_sequences=[1]), "stop_sequences[0]: must be a string"),
    (_body(stream="yes"), "stream: must be true or false"),
    (_body(thinking="on"), "thinking: must be an object"),
    (_body(thinking={}), "thinking.type: must be a string"),
    (_body(thinking={"type": "enabled"}), "thinking.budget_tokens: must be an integer"),
    (_body(metadata={"user_id": 5}), "metadata.user_id: must be a string"),
    (_body(metadata=[]), "metadata: must be an object"),
]


@pytest.mark.parametrize(("body", "problem"), BAD_REQUESTS)
def test_bad_requests_name_the_field(body: Any, problem: str) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        messages.parse_request(body)
    assert str(caught.value).startswith(problem)
    assert caught.value.status == 400


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 5000) | st.floats(allow_nan=False)
    | st.sampled_from(["", "user", "assistant", "text", "image", "tool_use", "tool_result",
                       "thinking", "enabled", "base64", "url", "auto", "tool"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "text", "role", "content", "source", "id", "name", "input",
                         "tool_use_id", "data", "media_type", "url", "budget_tokens"]),
        inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({"model": st.just("m"), "max_tokens": st.just(5)}, optional={
    key: _json for key in ("messages", "system", "tools", "tool_choice", "thinking",
                           "metadata", "stop_sequences", "temperature", "stream")}))
def test_client_input_raises_nothing_but_invalid_request(body: dict[str, Any]) -> None:
    with contextlib.suppress(errors.InvalidRequest):
        messages.parse_request(body)


def test_render_error_body() -> None:
    assert messages.render_error(errors.RateLimited("slow down")) == {
        "type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    assert messages.render_error(errors.InvalidRequest("model: required")) == {
        "type": "error", "error": {"type": "invalid_request_error", "message": "model: required"}}


def test_stream_error_is_the_exact_spec_bytes() -> None:
    expected = (b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
                b'"message":"Response stream interrupted, please retry"}}\n\n')
    interrupted = canonical.Error("api_error", "Response stream interrupted, please retry")
    renderer = messages.StreamRenderer("g")
    renderer.render(canonical.Start("msg_1", "x"))
    renderer.render(canonical.TextDelta("partial"))
    assert renderer.render_error(interrupted) == expected
    assert renderer.render(canonical.TextDelta("late")) == b""
    assert messages.StreamRenderer("g").render(interrupted) == expected


STREAM_EVENTS: list[canonical.Event] = [
    canonical.Start("msg_01XYZ", "upstream-model"),
    canonical.ReasoningDelta("The user wants "),
    canonical.ReasoningDelta("the weather."),
    canonical.ReasoningDelta("", SIGNATURE),
    canonical.BlockStop(),
    canonical.TextDelta("Let me "),
    canonical.TextDelta("check \"Paris\"."),
    canonical.BlockStop(),
    canonical.ToolCallStart(0, "toolu_01A", "get_weather"),
    canonical.ToolCallDelta(0, '{"city":'),
    canonical.ToolCallDelta(0, ' "Par'),
    canonical.ToolCallDelta(0, 'is"}'),
    canonical.BlockStop(),
    canonical.UsageEvent(canonical.Usage(1200, 85, cached_input_tokens=1000,
                                         reasoning_tokens=30)),
    canonical.Finish(StopReason.TOOL_USE),
]


def render_all(events: Sequence[canonical.Event], model: str = "claude-group") -> bytes:
    renderer = messages.StreamRenderer(model, request_id="req_1")
    return b"".join(renderer.render(event) for event in events)


def parse_all(stream: bytes) -> tuple[list[canonical.Event], messages.StreamParser]:
    parser = messages.StreamParser()
    events = [event for wire_event in sse.Decoder().feed(stream)
              for event in parser.feed(wire_event)]
    return events, parser


def test_stream_round_trip() -> None:
    events, parser = parse_all(render_all(STREAM_EVENTS))
    assert events == [canonical.Start("msg_01XYZ", "claude-group"), *STREAM_EVENTS[1:]]
    assert parser.complete


def test_stream_round_trip_without_block_stops() -> None:
    """Switching kinds closes the open block, so the parser reports BlockStops (framing only)."""
    source = [event for event in STREAM_EVENTS if not isinstance(event, canonical.BlockStop)]
    events, _ = parse_all(render_all(source))
    assert [event for event in events if not isinstance(event, canonical.BlockStop)] == [
        canonical.Start("msg_01XYZ", "claude-group"), *source[1:]]
    assert sum(isinstance(event, canonical.BlockStop) for event in events) == 3


def test_rendered_stream_is_exactly_the_anthropic_shape() -> None:
    stream = render_all([canonical.Start("msg_1", "x"), canonical.TextDelta("Hi"),
                         canonical.Finish(StopReason.END_TURN)])
    assert stream == (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
        b'"type":"message","role":"assistant","model":"claude-group","content":[],'
        b'"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,'
        b'"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Hi"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
        b'"stop_sequence":null},"usage":{"input_tokens":0,"cache_creation_input_tokens":0,'
        b'"cache_read_input_tokens":0,"output_tokens":0}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


WIRE_TYPES: dict[str, type[Any]] = {
    "message_start": wire.RawMessageStartEvent,
    "content_block_start": wire.RawContentBlockStartEvent,
    "content_block_delta": wire.RawContentBlockDeltaEvent,
    "content_block_stop": wire.RawContentBlockStopEvent,
    "message_delta": wire.RawMessageDeltaEvent,
    "message_stop": wire.RawMessageStopEvent,
}


def test_every_rendered_event_validates_against_the_sdk_types() -> None:
    decoded = sse.Decoder().feed(render_all(STREAM_EVENTS))
    names = [event.name for event in decoded]
    assert names == ["message_start", "content_block_start", *["content_block_delta"] * 3,
                     "content_block_stop", "content_block_start", *["content_block_delta"] * 2,
                     "content_block_stop", "content_block_start",
                     *["content_block_delta"] * 3, "content_block_stop", "message_delta",
                     "message_stop"]
    for event in decoded:
        model = WIRE_TYPES[event.name or ""].model_validate_json(event.data)
        assert model.type == event.name
        assert [*orjson.loads(event.data)][0] == "type"


def sdk_client(body: bytes, content_type: str) -> anthropic.Anthropic:
    def answer(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    return anthropic.Anthropic(api_key="sk-test", base_url="http://hopbase.test", max_retries=0,
                               http_client=httpx2.Client(transport=httpx2.MockTransport(answer)))


def test_the_official_sdk_accumulates_the_rendered_stream() -> None:
    client = sdk_client(render_all(STREAM_EVENTS), "text/event-stream")
    with client.messages.stream(model="claude-group", max_tokens=64,
                                messages=[{"role": "user", "content": "Weather?"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == 'Let me check "Paris".'
    assert final.id == "msg_01XYZ"
    assert final.model == "claude-group"
    assert [block.type for block in final.content] == ["thinking", "text", "tool_use"]
    thinking, answer, call = final.content
    assert isinstance(thinking, wire.ThinkingBlock)
    assert (thinking.thinking, thinking.signature) == ("The user wants the weather.", SIGNATURE)
    assert isinstance(answer, wire.TextBlock)
    assert answer.text == 'Let me check "Paris".'
    assert isinstance(call, wire.ToolUseBlock)
    assert (call.id, call.name, call.input) == ("toolu_01A", "get_weather", {"city": "Paris"})
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens,
            final.usage.output_tokens) == (200, 1000, 85)


def test_the_official_sdk_raises_the_in_stream_error() -> None:
    renderer = messages.StreamRenderer("claude-group")
    stream = (renderer.render(canonical.Start("msg_1", "x")) + renderer.render(
        canonical.TextDelta("Hal")) + renderer.render_error(
        canonical.Error("overloaded_error", "Overloaded")))
    client = sdk_client(stream, "text/event-stream")
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"), client.messages.stream(
            model="claude-group", max_tokens=8, messages=[{"role": "user", "content": "x"}]) as s:
        s.get_final_message()


RESPONSE = canonical.Response(
    id="msg_01Q",
    model="claude-group",
    parts=(canonical.ReasoningPart("Thinking it over.", SIGNATURE),
           canonical.TextPart("It is sunny."),
           canonical.ToolCall("toolu_9", "log", '{"entry":"sunny","n":[1,2]}')),
    stop_reason=StopReason.TOOL_USE,
    usage=canonical.Usage(300, 40, cached_input_tokens=100, reasoning_tokens=12),
)


def test_response_round_trip() -> None:
    rendered = messages.render_response(RESPONSE, "claude-group")
    assert messages.parse_response(rendered) == RESPONSE
    assert rendered["usage"] == {"input_tokens": 200, "cache_creation_input_tokens": 0,
                                 "cache_read_input_tokens": 100, "output_tokens": 40,
                                 "output_tokens_details": {"thinking_tokens": 12}}


def test_the_official_sdk_reads_the_rendered_response() -> None:
    rendered = messages.render_response(RESPONSE, "claude-group")
    wire.Message.model_validate(rendered)
    client = sdk_client(orjson.dumps(rendered), "application/json")
    answer = client.messages.create(model="claude-group", max_tokens=8,
                                    messages=[{"role": "user", "content": "x"}])
    assert [block.type for block in answer.content] == ["thinking", "text", "tool_use"]
    assert answer.stop_reason == "tool_use"
    assert answer.usage.output_tokens == 40


def test_render_response_fills_what_the_wire_requires() -> None:
    response = canonical.Response(
        "", "gpt-x", (canonical.ReasoningPart("hm"), canonical.ToolCall("c1", "f", "oops")),
        StopReason.CONTENT_FILTER, canonical.Usage(5, 1))
    rendered = messages.render_response(response, "claude-group")
    assert rendered["id"].startswith("msg_")
    assert rendered["content"] == [{"type": "thinking", "thinking": "hm", "signature": ""},
                                   {"type": "tool_use", "id": "c1", "name": "f", "input": {}}]
    assert rendered["stop_reason"] == "refusal"
    wire.Message.model_validate(rendered)


def test_parse_response_of_a_real_answer() -> None:
    body = orjson.loads(b"""{"id":"msg_01Aq9w938a90dw8q","type":"message","role":"assistant",
      "model":"claude-opus-4-6","content":[
        {"type":"thinking","thinking":"Check the weather.","signature":"WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve"},
        {"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
        {"type":"text","text":"I'll look that up.","citations":null},
        {"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"get_weather","input":{"location":"San Francisco, CA"}}],
      "stop_reason":"tool_use","stop_sequence":null,
      "usage":{"input_tokens":2095,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":503,"service_tier":"standard"}}""")
    assert messages.parse_response(body) == canonical.Response(
        "msg_01Aq9w938a90dw8q", "claude-opus-4-6",
        (canonical.ReasoningPart("Check the weather.", "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve"),
         canonical.TextPart("I'll look that up."),
         canonical.ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather",
                            '{"location":"San Francisco, CA"}')),
        StopReason.TOOL_USE, canonical.Usage(2200, 503, cached_input_tokens=100))


def test_parse_response_rejects_a_body_that_is_no_message() -> None:
    with pytest.raises(errors.UpstreamFailed, match="malformed Messages response"):
        messages.parse_response({"type": "message", "content": [{"text": "no type"}]})


# Streams as Anthropic's API sends them (spacing, pings and key order as recorded).
TEXT_STREAM = b"""event: message_start
data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-6", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}

event: message_stop
data: {"type": "message_stop"}

"""

TOOL_STREAM = b"""event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-opus-4-6","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", let me check."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \\"San Francisc"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"o, CA\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""

THINKING_STREAM = b"""event: message_start
data: {"type":"message_start","message":{"id":"msg_015SQewixvT9s4cABCVvUE6g","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2,"cache_creation_input_tokens":22,"cache_read_input_tokens":13993,"output_tokens":5,"service_tier":"standard"}} }

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}        }

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants me to read a file."}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Eu8BCkYICxgCKkBR++kFr7Za2JhF"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"I'll read it."}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":2,"cache_creation_input_tokens":22,"cache_read_input_tokens":13993,"output_tokens":137,"output_tokens_details":{"thinking_tokens":60}}}

event: message_stop
data: {"type":"message_stop"}

"""


def test_real_text_stream() -> None:
    events, parser = parse_all(TEXT_STREAM)
    assert events == [
        canonical.Start("msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "claude-opus-4-6"),
        canonical.TextDelta("Hello"), canonical.TextDelta("!"), canonical.BlockStop(),
        canonical.UsageEvent(canonical.Usage(25, 15)), canonical.Finish(StopReason.END_TURN)]
    assert parser.complete


def test_real_tool_stream() -> None:
    events, _ = parse_all(TOOL_STREAM)
    assert events == [
        canonical.Start("msg_014p7gG3wDgGV9EUtLvnow3U", "claude-opus-4-6"),
        canonical.TextDelta("Okay"), canonical.TextDelta(", let me check."), canonical.BlockStop(),
        canonical.ToolCallStart(0, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather"),
        canonical.ToolCallDelta(0, '{"location":'), canonical.ToolCallDelta(0, ' "San Francisc'),
        canonical.ToolCallDelta(0, 'o, CA"}'), canonical.BlockStop(),
        canonical.UsageEvent(canonical.Usage(472, 89)), canonical.Finish(StopReason.TOOL_USE)]


def test_real_thinking_stream() -> None:
    events, _ = parse_all(THINKING_STREAM)
    assert events == [
        canonical.Start("msg_015SQewixvT9s4cABCVvUE6g", "claude-sonnet-4-20250514"),
        canonical.ReasoningDelta("The user wants me to read a file."),
        canonical.ReasoningDelta("", "Eu8BCkYICxgCKkBR++kFr7Za2JhF"), canonical.BlockStop(),
        canonical.TextDelta("I'll read it."), canonical.BlockStop(),
        canonical.UsageEvent(canonical.Usage(14017, 137, cached_input_tokens=13993,
                                             reasoning_tokens=60)),
        canonical.Finish(StopReason.END_TURN)]


def test_parsed_real_streams_fold_into_the_answer() -> None:
    builder = canonical.ResponseBuilder()
    for event in parse_all(TOOL_STREAM)[0]:
        builder.add(event)
    assert builder.build().parts == (
        canonical.TextPart("Okay, let me check."),
        canonical.ToolCall("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather",
                           '{"location": "San Francisco, CA"}'))


def _feed(parser: messages.StreamParser, data: bytes, name: str | None = None) -> Any:
    return parser.feed(sse.Event(name, data, b""))


def test_upstream_error_event_ends_the_stream() -> None:
    parser = messages.StreamParser()
    assert _feed(parser, b'{"type":"message_start","message":{"id":"m","model":"c"}}') == [
        canonical.Start("m", "c")]
    assert not parser.complete
    assert _feed(parser, b'{"type": "error", "error": {"type": "overloaded_error", '
                         b'"message": "Overloaded"}}', "error") == [
        canonical.Error("overloaded_error", "Overloaded")]
    assert parser.complete


@pytest.mark.parametrize(("data", "expected"), [
    (b"{not json", [canonical.Error("api_error", "invalid JSON from upstream")]),
    (b'{"type":"content_block_delta","index":0}',
     [canonical.Error("api_error", "malformed event from upstream")]),
    (b'{"type":"ping"}', []),
    (b'{"type":"some_future_event","x":1}', []),
    (b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}', []),
    (b'{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta",'
     b'"citation":{}}}', []),
])
def test_parser_edge_events(data: bytes, expected: list[canonical.Event]) -> None:
    parser = messages.StreamParser()
    assert _feed(parser, data) == expected
    assert not parser.complete


def test_tool_calls_count_from_zero_across_blocks() -> None:
    parser = messages.StreamParser()
    starts = [_feed(parser, orjson.dumps({
        "type": "content_block_start", "index": index,
        "content_block": {"type": "tool_use", "id": f"t{index}", "name": "f", "input": {}}}))
        for index in (1, 2)]
    assert starts == [[canonical.ToolCallStart(0, "t1", "f")],
                      [canonical.ToolCallStart(1, "t2", "f")]]
    assert _feed(parser, b'{"type":"content_block_delta","index":2,"delta":'
                         b'{"type":"input_json_delta","partial_json":"{}"}}') == [
        canonical.ToolCallDelta(1, "{}")]


def test_renderer_opens_a_message_when_output_comes_first() -> None:
    stream = render_all([canonical.ToolCallStart(0, "c1", "f"), canonical.ToolCallDelta(0, "{}"),
                         canonical.Finish(StopReason.TOOL_USE)])
    decoded = sse.Decoder().feed(stream)
    assert [event.name for event in decoded][:2] == ["message_start", "content_block_start"]
    assert orjson.loads(decoded[0].data)["message"]["id"] == "msg_req_1"
