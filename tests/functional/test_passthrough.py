"""Same-protocol passthrough, byte for byte, and mid-stream resets per client protocol."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from hopbase import sse
from tests.conftest import StartHopbase, anthropic_deployment, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events

ROUTES = {
    "chat": ("/v1/chat/completions", openai_deployment,
             {"messages": [{"role": "user", "content": "hi"}],
              "stream_options": {"include_usage": True}}),
    "responses": ("/v1/responses", openai_deployment, {"input": "hi"}),
    "messages": ("/v1/messages", anthropic_deployment,
                 {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}),
}


async def stream(url: str, client: str) -> bytes:
    path, _, body = ROUTES[client]
    async with aiohttp.ClientSession() as session, session.post(
        url + path, json={"model": "group", "stream": True, **body}
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return (await response.read()).replace(sse.KEEPALIVE, b"")


async def start(fake: FakeUpstream, hopbase: StartHopbase, client: str) -> str:
    deployment = ROUTES[client][1]
    running = await hopbase({"group": {"deployments": [deployment(fake, "up")]}})
    return running.url


@pytest.mark.parametrize(
    ("client", "golden"),
    [("chat", "chat_text.sse"), ("chat", "chat_tool.sse"), ("chat", "chat_reasoning.sse"),
     ("responses", "responses_text.sse"), ("responses", "responses_tool.sse"),
     ("responses", "responses_reasoning.sse"),
     ("messages", "messages_text.sse"), ("messages", "messages_tool.sse"),
     ("messages", "messages_thinking.sse")],
)
async def test_passthrough_bytes_equal_upstream_bytes(
    fake: FakeUpstream, hopbase: StartHopbase, client: str, golden: str
) -> None:
    fake.default("up", Reply.golden(golden))
    received = await stream(await start(fake, hopbase, client), client)
    expected = b"".join(golden_events(golden))
    if client == "responses":
        expected += sse.DONE  # the upstream sends none; HopBase appends it after the terminal event
    assert received == expected


MESSAGES_INTERRUPTED = (
    b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
    b'"message":"Response stream interrupted, please retry"}}\n\n'
)


@pytest.mark.parametrize("client", ["chat", "responses", "messages"])
async def test_mid_stream_reset_ends_with_the_protocols_error_event(
    fake: FakeUpstream, hopbase: StartHopbase, client: str
) -> None:
    golden = {"chat": "chat_text.sse", "responses": "responses_text.sse",
              "messages": "messages_text.sse"}[client]
    events = golden_events(golden)
    fake.default("up", Reply.stream(events[:6], then="reset"))
    received = await stream(await start(fake, hopbase, client), client)
    assert received.startswith(b"".join(events[:6]))
    tail = received[len(b"".join(events[:6])):]
    if client == "messages":
        assert tail == MESSAGES_INTERRUPTED
    elif client == "chat":
        error, done = tail.split(b"\n\n")[:2]
        payload = orjson.loads(error.removeprefix(b"data: "))
        assert payload["error"]["message"] == "Response stream interrupted, please retry"
        assert done + b"\n\n" == sse.DONE
    else:
        assert tail.startswith(b"event: response.failed\ndata: ")
        payload = orjson.loads(tail.split(b"\n")[1].removeprefix(b"data: "))
        assert payload["type"] == "response.failed"
        assert payload["response"]["status"] == "failed"
        assert b"response.completed" not in received
