"""The OpenAI Responses protocol module: requests, answers, streams and errors."""

from __future__ import annotations

import logging
import typing
from typing import Any

import attrs
import httpx2
import openai
import orjson
import pytest
from openai.types import responses as sdk_types

from hopbase import canonical, errors, sse
from hopbase.canonical import (
    BlockStop,
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
from hopbase.protocols import openai_responses as responses

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def rich_request() -> canonical.Request:
    """Everything Responses can carry (it has no stop sequences and no tool-result errors)."""
    return canonical.Request(
        model="gpt-5.6-sol",
        system="You are terse.",
        messages=(
            Message("user", (
                TextPart("What is the weather here?"),
                ImagePart("https://example.com/paris.jpg", "high"),
                ImagePart("data:image/png;base64,iVBORw0KGgo="),
            )),
            Message("assistant", (
                ReasoningPart("The user wants the weather.", "rs_0a1b2c:gAAAAABenc"),
                TextPart("Let me check."),
                ToolCall("call_1", "get_weather", '{"city":"Paris"}'),
            )),
            Message("user", (
                ToolResult("call_1", '{"temp_c":21}'),
                TextPart("And tomorrow?"),
            )),
        ),
        tools=(canonical.Tool("get_weather", "Current weather", WEATHER_SCHEMA),),
        tool_choice=canonical.ToolChoice("tool", "get_weather"),
        max_tokens=512,
        temperature=0.5,
        top_p=0.9,
        stream=True,
        include_usage=True,
        reasoning=canonical.Reasoning(effort="medium", summary="auto"),
        parallel_tool_calls=False,
        user="user-1",
        metadata={"team": "a"},
        source_protocol=responses.NAME,
        extra={"store": False, "previous_response_id": "resp_prev", "truncation": "auto"},
    )


def test_rich_request_round_trips() -> None:
    request = rich_request()
    assert responses.parse_request(responses.render_request(request, request.model)) == request


def test_rich_request_renders_the_responses_wire_form() -> None:
    body = responses.render_request(rich_request(), "gpt-5.6")
    assert body == {
        "model": "gpt-5.6",
        "instructions": "You are terse.",
        "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "What is the weather here?"},
                {"type": "input_image", "image_url": "https://example.com/paris.jpg",
                 "detail": "high"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            ]},
            {"type": "reasoning", "id": "rs_0a1b2c", "encrypted_content": "gAAAAABenc",
             "summary": [{"type": "summary_text", "text": "The user wants the weather."}]},
            {"role": "assistant", "content": "Let me check."},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c":21}'},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "Current weather",
                   "parameters": WEATHER_SCHEMA, "strict": False}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 512,
        "temperature": 0.5,
        "top_p": 0.9,
        "parallel_tool_calls": False,
        "user": "user-1",
        "stream": True,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "metadata": {"team": "a"},
        "store": False,
        "previous_response_id": "resp_prev",
        "truncation": "auto",
    }


def sdk_style_body() -> dict[str, Any]:
    """A second turn as the openai SDK sends it: item ids, phase, strict and hosted tools."""
    return {
        "model": "gpt-5.6-sol",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "reasoning", "id": "rs_68af01", "summary": [], "encrypted_content": "gAAAA"},
            {"type": "function_call", "id": "fc_68af02", "call_id": "call_1",
             "name": "get_weather", "arguments": '{"city":"Paris"}', "status": "completed"},
            {"type": "function_call_output", "call_id": "call_1", "output": "21C"},
            {"id": "msg_68af03", "type": "message", "role": "assistant", "status": "completed",
             "phase": "final_answer",
             "content": [{"type": "output_text", "text": "Il fait 21C.", "annotations": []}]},
            {"role": "user", "content": "Merci"},
        ],
        "tools": [
            {"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA,
             "strict": True},
            {"type": "web_search"},
        ],
        "tool_choice": {"type": "allowed_tools", "mode": "auto",
                        "tools": [{"type": "function", "name": "get_weather"}]},
        "reasoning": {"effort": "high", "summary": "detailed"},
        "max_output_tokens": 800,
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "text": {"verbosity": "low"},
    }


def test_sdk_request_parses_to_the_canonical_view() -> None:
    request = responses.parse_request(sdk_style_body())
    assert request.system == "Be brief.\n\nAnswer in French."
    assert request.messages == (
        Message("user", (TextPart("Weather in Paris?"),)),
        Message("assistant", (ReasoningPart("", "rs_68af01:gAAAA"),
                              ToolCall("call_1", "get_weather", '{"city":"Paris"}'))),
        Message("user", (ToolResult("call_1", "21C"),)),
        Message("assistant", (TextPart("Il fait 21C."),)),
        Message("user", (TextPart("Merci"),)),
    )
    assert request.tools == (canonical.Tool("get_weather", None, WEATHER_SCHEMA),)
    assert request.tool_choice is None
    assert request.reasoning == canonical.Reasoning(effort="high", summary="detailed")
    assert (request.stream, request.include_usage, request.max_tokens) == (True, True, 800)
    assert request.extra["store"] is False
    assert request.extra["include"] == ["reasoning.encrypted_content"]


def test_same_protocol_upstream_gets_exactly_what_the_client_sent() -> None:
    body = sdk_style_body()
    rendered = responses.render_request(responses.parse_request(body), "gpt-5.6")
    assert rendered == {**body, "model": "gpt-5.6"}


def test_other_protocol_upstream_gets_the_canonical_view(
        caplog: pytest.LogCaptureFixture) -> None:
    request = attrs.evolve(responses.parse_request(sdk_style_body()),
                           source_protocol="anthropic_messages")
    with caplog.at_level(logging.DEBUG, logger=responses.__name__):
        rendered = responses.render_request(request, "gpt-5.6")
    assert rendered == {
        "model": "gpt-5.6",
        "instructions": "Be brief.\n\nAnswer in French.",
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_68af01", "summary": [], "encrypted_content": "gAAAA"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "21C"},
            {"role": "assistant", "content": "Il fait 21C."},
            {"role": "user", "content": "Merci"},
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA,
                   "strict": False}],
        "max_output_tokens": 800,
        "stream": True,
        "reasoning": {"effort": "high", "summary": "detailed"},
    }
    assert ("dropping anthropic_messages fields for a Responses upstream: include, input, "
            "instructions, store, text, tool_choice, tools") in caplog.messages


def test_foreign_request_maps_budget_drops_stop_and_foreign_reasoning() -> None:
    request = canonical.Request(
        model="claude-sonnet-5",
        messages=(
            Message("user", (TextPart("Hi"),)),
            Message("assistant", (ReasoningPart("hmm", "EqQBCkYIBxgCKkA"), TextPart("Hello"))),
            Message("user", (TextPart("Again"),)),
        ),
        stop=("END",),
        reasoning=canonical.Reasoning(budget_tokens=4000),
        source_protocol="anthropic_messages",
        extra={"top_k": 5},
    )
    assert responses.render_request(request, "gpt-5.6") == {
        "model": "gpt-5.6",
        "input": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                  {"role": "user", "content": "Again"}],
        "reasoning": {"effort": "medium", "summary": "auto"},
    }


def test_single_user_text_renders_as_a_string_input() -> None:
    request = responses.parse_request({"model": "m", "input": "Tell me a joke", "stream": True})
    assert request.messages == (Message("user", (TextPart("Tell me a joke"),)),)
    assert request.extra == {}
    assert responses.render_request(request, "up") == {
        "model": "up", "input": "Tell me a joke", "stream": True}


def test_stateful_request_needs_no_input() -> None:
    body = {"model": "m", "previous_response_id": "resp_1", "store": True}
    request = responses.parse_request(body)
    assert request.messages == ()
    assert request.extra == {"previous_response_id": "resp_1", "store": True}
    assert responses.render_request(request, "up") == {**body, "model": "up"}


BAD_REQUESTS = [
    ([], "body: must be a JSON object"),
    ({"input": "hi"}, "model: required, a non-empty string"),
    ({"model": 5, "input": "hi"}, "model: required, a non-empty string"),
    ({"model": "m"}, "input: required, a string or a list of input items"),
    ({"model": "m", "input": 5}, "input: must be a string or a list of input items"),
    ({"model": "m", "input": [5]}, "input[0]: must be an object"),
    ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
     "input[0].type: 'item_reference' is not supported; use message, function_call, "
     "function_call_output or reasoning"),
    ({"model": "m", "input": [{"type": ["message"]}]},
     "input[0].type: ['message'] is not supported; use message, function_call, "
     "function_call_output or reasoning"),
    ({"model": "m", "input": [{"role": "tool", "content": "x"}]},
     "input[0].role: must be user, assistant, system or developer"),
    ({"model": "m", "input": [{"role": "user", "content": 5}]},
     "input[0].content: must be a string or a list of content parts"),
    ({"model": "m", "input": [{"role": "user", "content": ["hi"]}]},
     "input[0].content[0]: must be an object"),
    ({"model": "m", "input": [{"role": "user",
                               "content": [{"type": "input_file", "file_id": "file_1"}]}]},
     "input[0].content[0].type: 'input_file' is not supported; use input_text, input_image"),
    ({"model": "m", "input": [{"role": "user",
                               "content": [{"type": "input_image", "file_id": "file_1"}]}]},
     "input[0].content[0].image_url: required, a URL or data: URL (file_id is not supported)"),
    ({"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://x/y.png", "detail": 1}]}]},
     "input[0].content[0].detail: must be a string"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
     "input[0].content[0].text: must be a string"),
    ({"model": "m", "input": [{"role": "assistant", "content": [
        {"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input[0].content[0].type: 'input_image' is not supported; use output_text, refusal"),
    ({"model": "m", "input": [{"role": "developer", "content": [{"type": "input_image"}]}]},
     "input[0].content[0]: must be an input_text part"),
    ({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
     "input[0].call_id: required, a non-empty string"),
    ({"model": "m", "input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
     "input[0].name: required, a non-empty string"),
    ({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f",
                               "arguments": {"a": 1}}]},
     "input[0].arguments: must be a string"),
    ({"model": "m", "input": [{"type": "function_call_output", "call_id": "c",
                               "output": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].output[0]: must be an input_text part"),
    ({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]},
     "input[0].call_id: required, a non-empty string"),
    ({"model": "m", "input": [{"type": "reasoning", "id": "rs_1"}]},
     "input[0].summary: required, a list of summary_text parts"),
    ({"model": "m", "input": [{"type": "reasoning", "summary": [{"type": "x", "text": "a"}]}]},
     "input[0].summary[0]: must be a summary_text part"),
    ({"model": "m", "input": [{"type": "reasoning", "summary": [], "encrypted_content": 5}]},
     "input[0].encrypted_content: must be a string"),
    ({"model": "m", "input": "hi", "instructions": 5}, "instructions: must be a string"),
    ({"model": "m", "input": "hi", "tools": {}}, "tools: must be a list"),
    ({"model": "m", "input": "hi", "tools": ["f"]}, "tools[0]: must be an object"),
    ({"model": "m", "input": "hi", "tools": [{"type": "function"}]},
     "tools[0].name: required, a non-empty string"),
    ({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f",
                                              "parameters": "x"}]},
     "tools[0].parameters: must be a JSON schema object"),
    ({"model": "m", "input": "hi", "tool_choice": "sometimes"},
     "tool_choice: must be auto, none, required or an object"),
    ({"model": "m", "input": "hi", "tool_choice": 3},
     "tool_choice: must be auto, none, required or an object"),
    ({"model": "m", "input": "hi", "tool_choice": {"type": "function"}},
     "tool_choice.name: required, a non-empty string"),
    ({"model": "m", "input": "hi", "max_output_tokens": "5"},
     "max_output_tokens: must be an integer"),
    ({"model": "m", "input": "hi", "max_output_tokens": True},
     "max_output_tokens: must be an integer"),
    ({"model": "m", "input": "hi", "temperature": "hot"}, "temperature: must be a number"),
    ({"model": "m", "input": "hi", "top_p": False}, "top_p: must be a number"),
    ({"model": "m", "input": "hi", "stream": "yes"}, "stream: must be a boolean"),
    ({"model": "m", "input": "hi", "parallel_tool_calls": 1},
     "parallel_tool_calls: must be a boolean"),
    ({"model": "m", "input": "hi", "user": 5}, "user: must be a string"),
    ({"model": "m", "input": "hi", "reasoning": "high"}, "reasoning: must be an object"),
    ({"model": "m", "input": "hi", "reasoning": {"effort": 3}},
     "reasoning.effort: must be a string"),
    ({"model": "m", "input": "hi", "metadata": []}, "metadata: must be an object of strings"),
    ({"model": "m", "input": "hi", "metadata": {"a": 1}}, "metadata: values must be strings"),
]


@pytest.mark.parametrize(("body", "message"), BAD_REQUESTS)
def test_bad_request_raises_invalid_request(body: Any, message: str) -> None:
    with pytest.raises(errors.InvalidRequest) as raised:
        responses.parse_request(body)
    assert raised.value.message == message
    assert raised.value.status == 400


@pytest.mark.parametrize(("error", "expected"), [
    (errors.InvalidRequest("model: required"),
     {"message": "model: required", "type": "invalid_request_error", "param": None,
      "code": "invalid_request"}),
    (errors.Unauthorized("bad key"),
     {"message": "bad key", "type": "authentication_error", "param": None,
      "code": "invalid_api_key"}),
    (errors.Forbidden("admin only"),
     {"message": "admin only", "type": "permission_error", "param": None, "code": "forbidden"}),
    (errors.ModelNotFound("no such model"),
     {"message": "no such model", "type": "invalid_request_error", "param": None,
      "code": "model_not_found"}),
    (errors.RateLimited("slow down", retry_after_s=3),
     {"message": "slow down", "type": "rate_limit_error", "param": None,
      "code": "rate_limit_exceeded"}),
    (errors.UpstreamRejected("context too long", status=422),
     {"message": "context too long", "type": "invalid_request_error", "param": None,
      "code": "upstream_rejected"}),
    (errors.UpstreamFailed("all attempts failed"),
     {"message": "all attempts failed", "type": "server_error", "param": None,
      "code": "upstream_error"}),
    (errors.AllCoolingDown("cooling"),
     {"message": "cooling", "type": "server_error", "param": None,
      "code": "all_deployments_cooling_down"}),
])
def test_render_error_is_openai_shaped(error: errors.GatewayError,
                                       expected: dict[str, Any]) -> None:
    assert responses.render_error(error) == {"error": expected}


def decode(data: bytes) -> list[sse.Event]:
    return sse.Decoder().feed(data)


def parse_stream(data: bytes) -> tuple[list[canonical.Event], responses.StreamParser]:
    parser = responses.StreamParser()
    return [out for event in decode(data) for out in parser.feed(event)], parser


def render_stream(events: list[canonical.Event], model: str = "group") -> bytes:
    renderer = responses.StreamRenderer(model, request_id="req_test")
    return b"".join(renderer.render(event) for event in events)


STREAM_EVENTS: list[canonical.Event] = [
    Start("resp_round", "group"),
    ReasoningDelta("Weather needs "),
    ReasoningDelta("a tool."),
    ReasoningDelta("", "EqQBCkYIBxgCKkA"),
    BlockStop(),
    TextDelta("Let me "),
    TextDelta("check."),
    BlockStop(),
    ToolCallStart(0, "call_1", "get_weather"),
    ToolCallDelta(0, '{"ci'),
    ToolCallDelta(0, 'ty":"Pa'),
    ToolCallDelta(0, 'ris"}'),
    BlockStop(),
    ToolCallStart(1, "call_2", "get_time"),
    ToolCallDelta(1, "{}"),
    BlockStop(),
    UsageEvent(Usage(input_tokens=40, output_tokens=25, cached_input_tokens=8,
                     reasoning_tokens=12)),
    Finish(StopReason.TOOL_USE),
]


def test_stream_round_trips_exactly() -> None:
    events, parser = parse_stream(render_stream(STREAM_EVENTS))
    assert events == STREAM_EVENTS
    assert parser.complete is True


def test_stream_round_trip_adds_block_stops_for_implicit_closes() -> None:
    """Framing only: a block the renderer closes itself comes back with a BlockStop."""
    sent: list[canonical.Event] = [
        Start("resp_round", "group"), ReasoningDelta("hm"), TextDelta("Hi"),
        UsageEvent(Usage(1, 2)), Finish(StopReason.MAX_TOKENS)]
    events, _ = parse_stream(render_stream(sent))
    assert events == [Start("resp_round", "group"), ReasoningDelta("hm"), BlockStop(),
                      TextDelta("Hi"), BlockStop(), UsageEvent(Usage(1, 2)),
                      Finish(StopReason.MAX_TOKENS)]


def test_renderer_output_framing() -> None:
    data = render_stream(STREAM_EVENTS)
    decoded = decode(data)
    payloads = [orjson.loads(event.data) for event in decoded]
    assert [event.name for event in decoded] == [payload["type"] for payload in payloads]
    assert [payload["sequence_number"] for payload in payloads] == list(range(len(payloads)))
    assert [payload["type"] for payload in payloads] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]
    assert b"[DONE]" not in data
    final = payloads[-1]["response"]
    assert (final["id"], final["model"], final["status"]) == ("resp_round", "group", "completed")
    assert [item["id"][:3] for item in final["output"]] == ["rs_", "msg", "fc_", "fc_"]
    assert final["usage"] == {
        "input_tokens": 40, "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
        "output_tokens": 25, "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 65}


def event_models() -> dict[str, type[Any]]:
    models: dict[str, type[Any]] = {}
    for model in typing.get_args(typing.get_args(sdk_types.ResponseStreamEvent)[0]):
        literal = model.model_fields["type"].annotation
        models[typing.get_args(literal)[0]] = model
    return models


def test_every_rendered_event_validates_against_the_sdk_models() -> None:
    models = event_models()
    failed: list[canonical.Event] = [Start("x", "up"), TextDelta("partial")]
    renderer = responses.StreamRenderer("group")
    data = b"".join(renderer.render(event) for event in failed)
    data += renderer.render_error(canonical.Error("rate_limit_error", "slow down"))
    checked = 0
    for stream in (render_stream(STREAM_EVENTS), data):
        for event in decode(stream):
            payload = orjson.loads(event.data)
            models[payload["type"]].model_validate(payload)
            checked += 1
    assert checked == 33


def sdk_client(body: bytes, content_type: str = "text/event-stream") -> openai.OpenAI:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)
    transport = httpx2.MockTransport(answer)
    return openai.OpenAI(api_key="sk-test", base_url="http://hopbase.test/v1",
                         http_client=httpx2.Client(transport=transport), max_retries=0)


def test_sdk_stream_helper_accumulates_the_rendered_stream() -> None:
    client = sdk_client(render_stream(STREAM_EVENTS) + sse.DONE)
    with client.responses.stream(model="group", input="Weather in Paris?") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.id == "resp_round"
    assert final.model == "group"
    assert final.output_text == "Let me check."
    reasoning, message, first_call, second_call = final.output
    assert isinstance(reasoning, sdk_types.ResponseReasoningItem)
    assert [part.text for part in reasoning.summary] == ["Weather needs a tool."]
    assert reasoning.encrypted_content == "EqQBCkYIBxgCKkA"
    assert message.type == "message"
    assert isinstance(first_call, sdk_types.ResponseFunctionToolCall)
    assert isinstance(second_call, sdk_types.ResponseFunctionToolCall)
    assert (first_call.call_id, first_call.name, first_call.arguments) == (
        "call_1", "get_weather", '{"city":"Paris"}')
    assert (second_call.call_id, second_call.arguments) == ("call_2", "{}")
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.total_tokens) == (
        40, 25, 65)


def test_output_items_handed_back_keep_a_foreign_reasoning_signature() -> None:
    """A Responses client of an Anthropic upstream sends its output back as the next input."""
    client = sdk_client(render_stream(STREAM_EVENTS) + sse.DONE)
    with client.responses.stream(model="group", input="Weather in Paris?") as stream:
        final = stream.get_final_response()
    items = [item.model_dump(exclude_none=True) for item in final.output]
    body = {"model": "group", "input": [
        {"role": "user", "content": "Weather in Paris?"}, *items,
        {"type": "function_call_output", "call_id": "call_1", "output": "21C"},
        {"type": "function_call_output", "call_id": "call_2", "output": "noon"}]}
    assert responses.parse_request(body).messages == (
        Message("user", (TextPart("Weather in Paris?"),)),
        Message("assistant", (
            ReasoningPart("Weather needs a tool.", "EqQBCkYIBxgCKkA"),
            TextPart("Let me check."),
            ToolCall("call_1", "get_weather", '{"city":"Paris"}'),
            ToolCall("call_2", "get_time", "{}"),
        )),
        Message("user", (ToolResult("call_1", "21C"), ToolResult("call_2", "noon"))),
    )


def test_sdk_stream_helper_reports_text_deltas_with_snapshots() -> None:
    client = sdk_client(render_stream(STREAM_EVENTS) + sse.DONE)
    with client.responses.stream(model="group", input="hi") as stream:
        snapshots = [event.snapshot for event in stream
                     if event.type == "response.output_text.delta"]
    assert snapshots == ["Let me ", "Let me check."]


def test_sdk_stream_helper_sees_the_failed_response() -> None:
    renderer = responses.StreamRenderer("group")
    data = renderer.render(Start("x", "up")) + renderer.render(TextDelta("Hel"))
    data += renderer.render_error(canonical.Error("api_error", "upstream broke")) + sse.DONE
    with sdk_client(data).responses.stream(model="group", input="hi") as stream:
        last = list(stream)[-1]
        assert last.type == "response.failed"
        assert last.response.error is not None
        assert (last.response.error.code, last.response.error.message) == (
            "server_error", "upstream broke")
        message = last.response.output[0]
        assert isinstance(message, sdk_types.ResponseOutputMessage)
        assert isinstance(message.content[0], sdk_types.ResponseOutputText)
        assert (message.status, message.content[0].text) == ("incomplete", "Hel")
        with pytest.raises(RuntimeError, match="response.completed"):
            stream.get_final_response()


def test_stream_error_is_response_failed_with_exact_bytes() -> None:
    renderer = responses.StreamRenderer("group", request_id="req_7f3a")
    renderer.render(Start("chatcmpl-1", "gpt-5.6"))
    data = renderer.render_error(canonical.Error("overloaded_error", "Overloaded"))
    assert data == (
        b'event: response.failed\ndata: {"type":"response.failed","sequence_number":2,'
        b'"response":{"id":"resp_7f3a","object":"response","created_at":'
        + str(renderer.created_at).encode()
        + b',"status":"failed","background":false,'
        b'"error":{"code":"server_error","message":"Overloaded"},"incomplete_details":null,'
        b'"instructions":null,"max_output_tokens":null,"model":"group","output":[],'
        b'"parallel_tool_calls":true,"previous_response_id":null,'
        b'"reasoning":{"effort":null,"summary":null},"store":false,"temperature":null,'
        b'"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":null,'
        b'"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    )
    assert renderer.render(TextDelta("late")) == b""
    assert renderer.render_error(canonical.Error("api_error", "again")) == b""


def test_stream_error_before_any_event_still_opens_the_response() -> None:
    renderer = responses.StreamRenderer("group")
    data = renderer.render(canonical.Error("rate_limit_error", "busy"))
    payloads = [orjson.loads(event.data) for event in decode(data)]
    assert [payload["type"] for payload in payloads] == [
        "response.created", "response.in_progress", "response.failed"]
    assert payloads[-1]["response"]["error"] == {"code": "rate_limit_exceeded", "message": "busy"}
    events, parser = parse_stream(data)
    assert events[-1] == canonical.Error("rate_limit_error", "busy")
    assert parser.complete is True


def test_renderer_ids_follow_the_request_id() -> None:
    assert responses.StreamRenderer("g", request_id="req_abc").response_id == "resp_abc"
    assert responses.StreamRenderer("g").response_id.startswith("resp_")
    assert responses.StreamRenderer("g").response_id != responses.StreamRenderer("g").response_id


def wire(*payloads: dict[str, Any]) -> bytes:
    """SSE bytes as api.openai.com frames them: ``event: <type>`` and one line of JSON."""
    return b"".join(sse.encode(orjson.dumps(payload), payload["type"]) for payload in payloads)


def upstream_response(response_id: str, model: str, status: str, output: list[Any],
                      usage: dict[str, Any] | None,
                      reasoning: dict[str, Any] | None = None) -> dict[str, Any]:
    """A response object with every field api.openai.com sends."""
    return {
        "id": response_id, "object": "response", "created_at": 1755431664, "status": status,
        "background": False, "error": None, "incomplete_details": None, "instructions": None,
        "max_output_tokens": None, "max_tool_calls": None, "model": model, "output": output,
        "parallel_tool_calls": True, "previous_response_id": None, "prompt_cache_key": None,
        "reasoning": reasoning or {"effort": None, "summary": None}, "safety_identifier": None,
        "service_tier": "auto", "store": True, "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto",
        "tools": [], "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "usage": usage,
        "user": None, "metadata": {},
    }


def lifecycle(kind: str, sequence: int, response: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "sequence_number": sequence, "response": response}


def item_event(kind: str, sequence: int, output_index: int,
               item: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "sequence_number": sequence, "output_index": output_index, "item": item}


def upstream_usage(input_tokens: int, output_tokens: int, reasoning: int = 0) -> dict[str, Any]:
    return {"input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": input_tokens + output_tokens}


def text_events(start: int, item_id: str, output_index: int, deltas: list[str],
                obfuscations: list[str]) -> list[dict[str, Any]]:
    """content_part.added, output_text deltas, output_text.done and content_part.done."""
    where = {"item_id": item_id, "output_index": output_index, "content_index": 0}
    text = "".join(deltas)
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    events: list[dict[str, Any]] = [
        {"type": "response.content_part.added", "sequence_number": start, **where, "part": part}]
    for offset, (delta, obfuscation) in enumerate(zip(deltas, obfuscations, strict=True)):
        events.append({"type": "response.output_text.delta", "sequence_number": start + 1 + offset,
                       **where, "delta": delta, "logprobs": [], "obfuscation": obfuscation})
    done = start + 1 + len(deltas)
    events.append({"type": "response.output_text.done", "sequence_number": done, **where,
                   "text": text, "logprobs": []})
    events.append({"type": "response.content_part.done", "sequence_number": done + 1, **where,
                   "part": {**part, "text": text}})
    return events


def message_item(item_id: str, status: str, text: str | None) -> dict[str, Any]:
    content = [] if text is None else [
        {"type": "output_text", "annotations": [], "logprobs": [], "text": text}]
    return {"id": item_id, "type": "message", "status": status, "content": content,
            "role": "assistant"}


# A gpt-4.1 answer to "Say hi", as api.openai.com streams it.
GPT = "gpt-4.1-2025-04-14"
HI_ID, HI_MESSAGE = "resp_68a1c2f0b5d88190", "msg_68a1c2f1a7c08190"
TEXT_STREAM = wire(
    lifecycle("response.created", 0, upstream_response(HI_ID, GPT, "in_progress", [], None)),
    lifecycle("response.in_progress", 1, upstream_response(HI_ID, GPT, "in_progress", [], None)),
    item_event("response.output_item.added", 2, 0, message_item(HI_MESSAGE, "in_progress", None)),
    *text_events(3, HI_MESSAGE, 0, ["Hi", " there", "!"],
                 ["q0XbZ6jyzb9aGY", "4dQ2H2ajE1", "Zx3TqPpV0aJ9Wm1"]),
    item_event("response.output_item.done", 9, 0,
               message_item(HI_MESSAGE, "completed", "Hi there!")),
    lifecycle("response.completed", 10, upstream_response(
        HI_ID, GPT, "completed", [message_item(HI_MESSAGE, "completed", "Hi there!")],
        upstream_usage(9, 4))),
)

# A gpt-4.1 answer that calls get_weather.
CALL_ID, CALL_ITEM = "resp_68a1c3b1d2a48190", "fc_68a1c3b2e6f88190"
CALL_WHERE = {"item_id": CALL_ITEM, "output_index": 0}
CALL_ARGUMENTS = '{"location":"Paris, France"}'


def function_item(status: str, arguments: str) -> dict[str, Any]:
    return {"id": CALL_ITEM, "type": "function_call", "status": status, "arguments": arguments,
            "call_id": "call_Kt1pQZ2lmH3vX8s7", "name": "get_weather"}


TOOL_STREAM = wire(
    lifecycle("response.created", 0, upstream_response(CALL_ID, GPT, "in_progress", [], None)),
    lifecycle("response.in_progress", 1, upstream_response(CALL_ID, GPT, "in_progress", [], None)),
    item_event("response.output_item.added", 2, 0, function_item("in_progress", "")),
    *({"type": "response.function_call_arguments.delta", "sequence_number": 3 + offset,
       **CALL_WHERE, "delta": delta, "obfuscation": obfuscation}
      for offset, (delta, obfuscation) in enumerate([
          ('{"', "Qm4LBa1G6qhyIj"), ("location", "JbP4aTnQ"), ('":"', "lW6R0fF7dKpA5"),
          ("Paris, France", "e9x"), ('"}', "vT2Hq0aNbm5Xk")])),
    {"type": "response.function_call_arguments.done", "sequence_number": 8, **CALL_WHERE,
     "arguments": CALL_ARGUMENTS},
    item_event("response.output_item.done", 9, 0, function_item("completed", CALL_ARGUMENTS)),
    lifecycle("response.completed", 10, upstream_response(
        CALL_ID, GPT, "completed", [function_item("completed", CALL_ARGUMENTS)],
        upstream_usage(61, 18))),
)

# An o4-mini answer with reasoning {"summary": "detailed"} and
# include=["reasoning.encrypted_content"]: two summary parts, then the answer.
O4 = "o4-mini-2025-04-16"
THINK_ID, THINK_ITEM, THINK_MESSAGE = (
    "resp_68a1c4cf9b3c8190", "rs_68a1c4d0f1b88190", "msg_68a1c4d4c2e08190")
THINK_SETTINGS = {"effort": "medium", "summary": "detailed"}
SUMMARY = ["**Counting letters**\n\nThree r.", "**Answering**"]


def reasoning_item(summary: list[str]) -> dict[str, Any]:
    return {"id": THINK_ITEM, "type": "reasoning", "encrypted_content": "gAAAAABoocTQ",
            "summary": [{"type": "summary_text", "text": text} for text in summary]}


def summary_events(start: int, index: int, deltas: list[str]) -> list[dict[str, Any]]:
    where = {"item_id": THINK_ITEM, "output_index": 0, "summary_index": index}
    text = "".join(deltas)
    events: list[dict[str, Any]] = [
        {"type": "response.reasoning_summary_part.added", "sequence_number": start, **where,
         "part": {"type": "summary_text", "text": ""}}]
    events.extend({"type": "response.reasoning_summary_text.delta",
                   "sequence_number": start + 1 + offset, **where, "delta": delta,
                   "obfuscation": "Hn2"} for offset, delta in enumerate(deltas))
    done = start + 1 + len(deltas)
    events.append({"type": "response.reasoning_summary_text.done", "sequence_number": done,
                   **where, "text": text})
    events.append({"type": "response.reasoning_summary_part.done", "sequence_number": done + 1,
                   **where, "part": {"type": "summary_text", "text": text}})
    return events


REASONING_STREAM = wire(
    lifecycle("response.created", 0, upstream_response(
        THINK_ID, O4, "in_progress", [], None, THINK_SETTINGS)),
    lifecycle("response.in_progress", 1, upstream_response(
        THINK_ID, O4, "in_progress", [], None, THINK_SETTINGS)),
    item_event("response.output_item.added", 2, 0, reasoning_item([])),
    *summary_events(3, 0, ["**Counting letters**\n\n", "Three r."]),
    *summary_events(8, 1, ["**Answering**"]),
    item_event("response.output_item.done", 12, 0, reasoning_item(SUMMARY)),
    item_event("response.output_item.added", 13, 1,
               message_item(THINK_MESSAGE, "in_progress", None)),
    *text_events(14, THINK_MESSAGE, 1, ["3"], ["TzQ4m0aVb8cL1xW"]),
    item_event("response.output_item.done", 18, 1, message_item(THINK_MESSAGE, "completed", "3")),
    lifecycle("response.completed", 19, upstream_response(
        THINK_ID, O4, "completed",
        [reasoning_item(SUMMARY), message_item(THINK_MESSAGE, "completed", "3")],
        upstream_usage(14, 339, reasoning=320), THINK_SETTINGS)),
)


def test_upstream_fixtures_are_well_formed_sdk_events() -> None:
    models = event_models()
    for stream in (TEXT_STREAM, TOOL_STREAM, REASONING_STREAM):
        payloads = [orjson.loads(event.data) for event in decode(stream)]
        assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
        for payload in payloads:
            models[payload["type"]].model_validate(payload)


def test_upstream_text_stream_parses() -> None:
    events, parser = parse_stream(TEXT_STREAM)
    assert events == [
        Start("resp_68a1c2f0b5d88190", "gpt-4.1-2025-04-14"),
        TextDelta("Hi"), TextDelta(" there"), TextDelta("!"), BlockStop(),
        UsageEvent(Usage(input_tokens=9, output_tokens=4)),
        Finish(StopReason.END_TURN),
    ]
    assert parser.complete is True


def test_upstream_tool_call_stream_parses() -> None:
    events, parser = parse_stream(TOOL_STREAM)
    assert events == [
        Start("resp_68a1c3b1d2a48190", "gpt-4.1-2025-04-14"),
        ToolCallStart(0, "call_Kt1pQZ2lmH3vX8s7", "get_weather"),
        ToolCallDelta(0, '{"'), ToolCallDelta(0, "location"), ToolCallDelta(0, '":"'),
        ToolCallDelta(0, "Paris, France"), ToolCallDelta(0, '"}'),
        BlockStop(),
        UsageEvent(Usage(input_tokens=61, output_tokens=18)),
        Finish(StopReason.TOOL_USE),
    ]
    assert parser.complete is True


def test_upstream_reasoning_stream_parses() -> None:
    events, parser = parse_stream(REASONING_STREAM)
    assert events == [
        Start("resp_68a1c4cf9b3c8190", "o4-mini-2025-04-16"),
        ReasoningDelta("**Counting letters**\n\n"), ReasoningDelta("Three r."),
        ReasoningDelta("\n\n"), ReasoningDelta("**Answering**"),
        ReasoningDelta("", "rs_68a1c4d0f1b88190:gAAAAABoocTQ"), BlockStop(),
        TextDelta("3"), BlockStop(),
        UsageEvent(Usage(input_tokens=14, output_tokens=339, reasoning_tokens=320)),
        Finish(StopReason.END_TURN),
    ]
    assert parser.complete is True


@pytest.mark.parametrize("stream", [TEXT_STREAM, TOOL_STREAM, REASONING_STREAM])
def test_stream_and_whole_answer_parse_alike(stream: bytes) -> None:
    events, _ = parse_stream(stream)
    builder = canonical.ResponseBuilder()
    for event in events:
        builder.add(event)
    completed = orjson.loads(decode(stream)[-1].data)["response"]
    assert builder.build() == responses.parse_response(completed)


def test_parser_is_not_complete_before_the_terminal_event() -> None:
    parser = responses.StreamParser()
    for event in decode(TEXT_STREAM)[:-1]:
        parser.feed(event)
    assert parser.complete is False


def test_upstream_incomplete_stream_finishes_with_max_tokens() -> None:
    data = sse.encode(orjson.dumps({
        "type": "response.incomplete", "sequence_number": 9,
        "response": {"id": "resp_1", "status": "incomplete",
                     "incomplete_details": {"reason": "max_output_tokens"},
                     "usage": {"input_tokens": 5, "output_tokens": 16, "total_tokens": 21}}}),
        "response.incomplete")
    events, parser = parse_stream(data)
    assert events == [UsageEvent(Usage(5, 16)), Finish(StopReason.MAX_TOKENS)]
    assert parser.complete is True


@pytest.mark.parametrize(("data", "expected"), [
    (b'event: response.failed\ndata: {"type":"response.failed","sequence_number":3,'
     b'"response":{"id":"resp_1","status":"failed","error":{"code":"server_error",'
     b'"message":"The model failed to generate a response."}}}\n\n',
     canonical.Error("api_error", "The model failed to generate a response.")),
    (b'event: response.failed\ndata: {"type":"response.failed","sequence_number":3,'
     b'"response":{"id":"resp_1","status":"failed","error":{"code":"rate_limit_exceeded",'
     b'"message":"Rate limit reached"}}}\n\n',
     canonical.Error("rate_limit_error", "Rate limit reached")),
    (b'event: error\ndata: {"type":"error","sequence_number":1,"code":"invalid_prompt",'
     b'"message":"Invalid prompt","param":null}\n\n',
     canonical.Error("invalid_request_error", "Invalid prompt")),
    (b'event: error\ndata: {"type":"error","sequence_number":1,"error":{"type":"server_error",'
     b'"code":"server_error","message":"Something went wrong","param":null}}\n\n',
     canonical.Error("api_error", "Something went wrong")),
    (b'data: {"error":{"message":"backend down","type":"server_error","code":null}}\n\n',
     canonical.Error("api_error", "backend down")),
])
def test_upstream_errors_become_canonical_errors(data: bytes, expected: canonical.Error) -> None:
    events, parser = parse_stream(data)
    assert events == [expected]
    assert parser.complete is True


def test_invalid_json_from_upstream_is_an_error_event() -> None:
    parser = responses.StreamParser()
    event = sse.Event("response.output_text.delta", b'{"type": "response.output', b"")
    assert parser.feed(event) == [canonical.Error("api_error", "invalid JSON from upstream")]
    assert parser.feed(sse.Event(None, b"[1, 2]", b"")) == [
        canonical.Error("api_error", "invalid JSON from upstream")]
    assert parser.complete is False


def test_events_without_output_yield_nothing() -> None:
    parser = responses.StreamParser()
    quiet = [
        {"type": "response.in_progress", "sequence_number": 1, "response": {"id": "resp_1"}},
        {"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
         "item": {"id": "msg_1", "type": "message", "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "sequence_number": 3, "item_id": "msg_1",
         "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": ""}},
        {"type": "response.output_text.delta", "sequence_number": 4, "item_id": "msg_1",
         "output_index": 0, "content_index": 0, "delta": ""},
        {"type": "response.web_search_call.searching", "sequence_number": 5},
        {"type": "response.output_text.delta", "sequence_number": 6, "delta": ["odd"]},
        {"type": "response.output_item.done", "sequence_number": 7, "output_index": 0,
         "item": "garbled"},
    ]
    for payload in quiet:
        assert parser.feed(sse.Event(str(payload["type"]), orjson.dumps(payload), b"")) == []
    assert parser.feed(sse.Event(None, b"[DONE]", b"")) == []


def test_arguments_sent_only_whole_are_not_lost() -> None:
    parser = responses.StreamParser()
    item = {"id": "fc_1", "type": "function_call", "call_id": "call_9", "name": "lookup",
            "arguments": '{"q":"x"}', "status": "completed"}
    done = {"type": "response.output_item.done", "sequence_number": 4, "output_index": 2,
            "item": item}
    assert parser.feed(sse.Event(None, orjson.dumps(done), b"")) == [
        ToolCallStart(0, "call_9", "lookup"), ToolCallDelta(0, '{"q":"x"}'), BlockStop()]


def whole_answer() -> canonical.Response:
    return canonical.Response(
        id="resp_whole",
        model="group",
        parts=(
            ReasoningPart("Checking the forecast.", "rs_5e6f:gAAAAABenc"),
            TextPart("Let me look that up."),
            ToolCall("call_1", "get_weather", '{"city":"Paris"}'),
        ),
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(input_tokens=30, output_tokens=12, cached_input_tokens=4, reasoning_tokens=6),
    )


@pytest.mark.parametrize("answer", [
    whole_answer(),
    attrs.evolve(whole_answer(), parts=(ReasoningPart("Thinking", "EqQBCkYIBxgCKkA"),
                                        TextPart("Hi")), stop_reason=StopReason.END_TURN),
    attrs.evolve(whole_answer(), parts=(ReasoningPart("Thinking"), TextPart("Hi")),
                 stop_reason=StopReason.END_TURN),
    attrs.evolve(whole_answer(), parts=(TextPart("Once upon a"),),
                 stop_reason=StopReason.MAX_TOKENS),
    attrs.evolve(whole_answer(), parts=(TextPart("I can't"),),
                 stop_reason=StopReason.CONTENT_FILTER),
])
def test_whole_answer_round_trips(answer: canonical.Response) -> None:
    assert responses.parse_response(responses.render_response(answer, "group")) == answer


def test_whole_answer_validates_and_reads_with_the_sdk() -> None:
    body = responses.render_response(whole_answer(), "group")
    assert sdk_types.Response.model_validate(body).status == "completed"
    client = sdk_client(orjson.dumps(body), content_type="application/json")
    answer = client.responses.create(model="group", input="Weather in Paris?")
    assert (answer.id, answer.model, answer.output_text) == (
        "resp_whole", "group", "Let me look that up.")
    reasoning, _, call = answer.output
    assert isinstance(reasoning, sdk_types.ResponseReasoningItem)
    assert isinstance(call, sdk_types.ResponseFunctionToolCall)
    assert (reasoning.id, reasoning.encrypted_content) == ("rs_5e6f", "gAAAAABenc")
    assert (call.call_id, call.arguments) == ("call_1", '{"city":"Paris"}')
    assert answer.usage is not None
    assert answer.usage.input_tokens_details.cached_tokens == 4


def test_whole_answer_from_another_protocol_gets_responses_ids() -> None:
    answer = attrs.evolve(whole_answer(), id="msg_01XFDUDYJgAACzvnptvVoYEL")
    body = responses.render_response(answer, "group")
    assert body["id"].startswith("resp_")
    assert [item["id"][:3] for item in body["output"]] == ["rs_", "msg", "fc_"]
    incomplete = responses.render_response(
        attrs.evolve(answer, stop_reason=StopReason.MAX_TOKENS), "group")
    assert (incomplete["status"], incomplete["incomplete_details"]) == (
        "incomplete", {"reason": "max_output_tokens"})


def test_upstream_whole_answer_with_refusal_parses() -> None:
    body = {
        "id": "resp_9", "object": "response", "status": "completed", "model": "gpt-4.1",
        "output": [{"id": "msg_9", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "refusal", "refusal": "I can't help with that."}]}],
        "usage": {"input_tokens": 20, "output_tokens": 7, "total_tokens": 27,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }
    assert responses.parse_response(body) == canonical.Response(
        "resp_9", "gpt-4.1", (TextPart("I can't help with that."),), StopReason.REFUSAL,
        Usage(20, 7))
