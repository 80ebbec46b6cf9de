"""Every client protocol against every upstream kind, through the official SDKs (issue 4).

The upstream plays recorded streams (tests/fakes/golden) with a tool call whose
arguments arrive over several deltas, and a reasoning block; each client must read
the right text, reasoning, tool call JSON, stop reason, usage and model name.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import attrs
import openai
import pytest

from tests.conftest import StartHopbase, anthropic_deployment, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply

PROMPT = "What's the weather in Paris?"
TOOL = {
    "name": "get_weather",
    "description": "Weather for a place",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
}


@attrs.frozen
class Answer:
    """What a client read, in protocol-neutral words."""

    model: str
    text: str
    reasoning: str
    tool_calls: tuple[tuple[str, Any], ...]
    stop: str  # end_turn | tool_use
    input_tokens: int
    output_tokens: int


async def chat_client(url: str, stream: bool) -> Answer:
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk:
        tools = [{"type": "function", "function": TOOL}]
        messages = [{"role": "user", "content": PROMPT}]
        if not stream:
            done = await sdk.chat.completions.create(model="group", messages=messages, tools=tools)
            message = done.choices[0].message
            calls = tuple(
                (c.function.name, json.loads(c.function.arguments))
                for c in message.tool_calls or []
            )
            reasoning = (message.model_extra or {}).get("reasoning") or ""
            stop = "tool_use" if done.choices[0].finish_reason == "tool_calls" else "end_turn"
            assert done.usage is not None
            return Answer(
                done.model,
                message.content or "",
                reasoning,
                calls,
                stop,
                done.usage.prompt_tokens,
                done.usage.completion_tokens,
            )
        chunks = [
            c
            async for c in await sdk.chat.completions.create(
                model="group",
                messages=messages,
                tools=tools,
                stream=True,
                stream_options={"include_usage": True},
            )
        ]
    return chat_answer(chunks)


def chat_answer(chunks: list[Any]) -> Answer:
    text, reasoning, finish = [], [], "stop"
    calls: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            text.append(delta.content or "")
            reasoning.append((delta.model_extra or {}).get("reasoning") or "")
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", ""])
                entry[0] += (call.function.name or "") if call.function else ""
                entry[1] += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    return Answer(
        chunks[0].model,
        "".join(text),
        "".join(reasoning),
        tuple((name, json.loads(args)) for name, args in calls.values()),
        "tool_use" if finish == "tool_calls" else "end_turn",
        usage.prompt_tokens,
        usage.completion_tokens,
    )


async def responses_client(url: str, stream: bool) -> Answer:
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk:
        tools = [{"type": "function", **TOOL}]
        if stream:
            async with sdk.responses.stream(model="group", input=PROMPT, tools=tools) as events:
                async for _ in events:
                    pass
                response = await events.get_final_response()
        else:
            response = await sdk.responses.create(model="group", input=PROMPT, tools=tools)
    text, reasoning, calls = [], [], []
    for item in response.output:
        if item.type == "message":
            text += [part.text for part in item.content if part.type == "output_text"]
        elif item.type == "reasoning":
            reasoning += [summary.text for summary in item.summary]
        elif item.type == "function_call":
            calls.append((item.name, json.loads(item.arguments)))
    assert response.usage is not None
    return Answer(
        response.model,
        "".join(text),
        "".join(reasoning),
        tuple(calls),
        "tool_use" if calls else "end_turn",
        response.usage.input_tokens,
        response.usage.output_tokens,
    )


async def messages_client(url: str, stream: bool) -> Answer:
    async with anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0) as sdk:
        tools = [
            {
                "name": TOOL["name"],
                "description": TOOL["description"],
                "input_schema": TOOL["parameters"],
            }
        ]
        arguments = {
            "model": "group",
            "max_tokens": 1024,
            "tools": tools,
            "messages": [{"role": "user", "content": PROMPT}],
        }
        if stream:
            async with sdk.messages.stream(**arguments) as events:
                message = await events.get_final_message()
        else:
            message = await sdk.messages.create(**arguments)
    text = "".join(block.text for block in message.content if block.type == "text")
    reasoning = "".join(block.thinking for block in message.content if block.type == "thinking")
    calls = tuple((b.name, b.input) for b in message.content if b.type == "tool_use")
    return Answer(
        message.model,
        text,
        reasoning,
        calls,
        str(message.stop_reason),
        message.usage.input_tokens,
        message.usage.output_tokens,
    )


CLIENTS: dict[str, Callable[[str, bool], Awaitable[Answer]]] = {
    "chat": chat_client,
    "responses": responses_client,
    "messages": messages_client,
}
UPSTREAM_FILE_PREFIX = {  # which recorded stream the upstream plays, by (client, upstream kind)
    ("chat", "openai"): "chat",
    ("responses", "openai"): "responses",
    ("messages", "openai"): "chat",
    ("chat", "anthropic"): "messages",
    ("responses", "anthropic"): "messages",
    ("messages", "anthropic"): "messages",
}
TOOL_USAGE = {"chat": (81, 17), "responses": (62, 18), "messages": (472, 89)}
CALL = (("get_weather", {"location": "Paris, France"}),)


async def start(fake: FakeUpstream, hopbase: StartHopbase, kind: str) -> str:
    make = openai_deployment if kind == "openai" else anthropic_deployment
    running = await hopbase({"group": {"deployments": [make(fake, "up")]}})
    return running.url


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("client", ["chat", "responses", "messages"])
async def test_streamed_tool_call(
    fake: FakeUpstream, hopbase: StartHopbase, client: str, kind: str
) -> None:
    prefix = UPSTREAM_FILE_PREFIX[(client, kind)]
    fake.default("up", Reply.golden(f"{prefix}_tool.sse"))
    answer = await CLIENTS[client](await start(fake, hopbase, kind), True)
    assert answer.tool_calls == CALL
    assert answer.stop == "tool_use"
    assert (answer.input_tokens, answer.output_tokens) == TOOL_USAGE[prefix]
    same_protocol = (client, kind) in {
        ("chat", "openai"),
        ("responses", "openai"),
        ("messages", "anthropic"),
    }
    assert (answer.model == "group") is not same_protocol


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("client", ["chat", "responses", "messages"])
async def test_streamed_reasoning_and_text(
    fake: FakeUpstream, hopbase: StartHopbase, client: str, kind: str
) -> None:
    prefix = UPSTREAM_FILE_PREFIX[(client, kind)]
    fake.default(
        "up", Reply.golden(f"{prefix}_{'thinking' if prefix == 'messages' else 'reasoning'}.sse")
    )
    answer = await CLIENTS[client](await start(fake, hopbase, kind), True)
    assert answer.text == "2 + 2 = 4."
    assert "2 + 2" in answer.reasoning
    assert answer.stop == "end_turn"
    assert answer.tool_calls == ()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("client", ["chat", "responses", "messages"])
async def test_text_answer(
    fake: FakeUpstream, hopbase: StartHopbase, client: str, kind: str, stream: bool
) -> None:
    answer = await CLIENTS[client](await start(fake, hopbase, kind), stream)
    assert answer.text == "Hello from up"
    assert answer.stop == "end_turn"
    assert answer.input_tokens > 0 and answer.output_tokens > 0
    sent = fake.requests("up")[0]
    expected_path = {
        "openai": {
            "chat": "/v1/chat/completions",
            "responses": "/v1/responses",
            "messages": "/v1/chat/completions",
        },
        "anthropic": dict.fromkeys(CLIENTS, "/v1/messages"),
    }[kind][client]
    assert sent.path == expected_path
    assert sent.body["model"] == "up-model"
