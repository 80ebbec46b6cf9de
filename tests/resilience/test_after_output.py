"""Faults after output reached the client: one error event, no retry, nothing leaked (issue 8).

Client bodies are decoded with the ``openai`` SDK's own SSE decoder, the ground
truth of what an SDK user sees, so framing differences that the SDK ignores do
not count and everything it would see does.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest
from openai._streaming import SSEDecoder

from hopbase import sse
from tests.conftest import Running, StartHopbase, anthropic_deployment, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events
from tests.resilience.support import (
    MESSAGES,
    MESSAGES_PATH,
    assert_settled,
    events_of,
    post,
    read_records,
)

CHAT_STREAM = {"model": "gpt", "messages": MESSAGES, "stream": True,
               "stream_options": {"include_usage": True}}
MESSAGES_STREAM = {"model": "gpt", "max_tokens": 100, "messages": MESSAGES, "stream": True}
CHAT = golden_events("chat_text.sse")
ANTHROPIC = golden_events("messages_text.sse")
CHAT_OUTPUT = CHAT[:3]  # role chunk, "The", " capital"
MESSAGES_OUTPUT = ANTHROPIC[:5]  # message_start … two text deltas
MESSAGES_INTERRUPTED = (
    b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
    b'"message":"Response stream interrupted, please retry"}}\n\n'
)


def chat_error(message: str, code: str = "api_error") -> list[bytes]:
    """The Chat in-stream error event HopBase writes, then ``[DONE]``."""
    body = {"error": {"message": message, "type": "server_error", "code": code}}
    return [sse.encode(orjson.dumps(body)), sse.DONE]


def decoded(body: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of every event the openai SDK decodes from ``body``."""
    return [(event.event, event.data) for event in SSEDecoder().iter_bytes(iter([body]))]


def pair(fake: FakeUpstream, deployment: Any = openai_deployment) -> dict[str, Any]:
    return {"gpt": {"deployments": [deployment(fake, "a", weight=1_000_000),
                                    deployment(fake, "b", weight=0.000001)]}}


async def ends_without_retry(running: Running, fake: FakeUpstream) -> None:
    """The failure stayed a's: b never asked, a failed once, nothing leaked."""
    assert fake.requests("b") == []
    record = (await read_records(running))[0]
    assert [(a["deployment"], a["outcome"]) for a in record["attempts"]] == [("a", "error")]
    assert running.snapshot("a").failures_in_window == 1
    await assert_settled(running)


@pytest.mark.parametrize("then", ["reset", "eof"])
async def test_chat_break_after_output_ends_with_error_event(
    fake: FakeUpstream, hopbase: StartHopbase, then: str
) -> None:
    fake.script("a", Reply.stream(CHAT_OUTPUT, then=then))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, CHAT_STREAM)
    assert status == 200
    assert events_of(body) == CHAT_OUTPUT + chat_error("Response stream interrupted, please retry")
    await ends_without_retry(running, fake)


@pytest.mark.parametrize("then", ["reset", "eof"])
async def test_messages_break_after_output_ends_with_interrupted_error(
    fake: FakeUpstream, hopbase: StartHopbase, then: str
) -> None:
    fake.script("a", Reply.stream(MESSAGES_OUTPUT, then=then))
    running = await hopbase(pair(fake, anthropic_deployment))
    status, _, body = await post(running.url, MESSAGES_STREAM, MESSAGES_PATH)
    assert status == 200
    assert events_of(body) == MESSAGES_OUTPUT + [MESSAGES_INTERRUPTED]
    await ends_without_retry(running, fake)


async def test_upstream_error_event_is_passed_through_verbatim(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    overloaded = (b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
                  b'"message":"Overloaded"},"request_id":"req_011CXYZ"}\n\n')
    fake.script("a", Reply.stream([*MESSAGES_OUTPUT, overloaded]))
    running = await hopbase(pair(fake, anthropic_deployment))
    status, _, body = await post(running.url, MESSAGES_STREAM, MESSAGES_PATH)
    assert status == 200
    assert body == b"".join(MESSAGES_OUTPUT) + overloaded
    await ends_without_retry(running, fake)


async def test_line_without_colon_is_ignored_like_the_sdk_does(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    stray = [CHAT[0], b"this line has no colon\n" + CHAT[1], b"nor does this one\n\n", *CHAT[2:]]
    fake.script("a", Reply.stream(stray))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, CHAT_STREAM)
    assert status == 200
    assert decoded(body) == decoded(b"".join(CHAT))
    assert running.snapshot("a").failures_in_window == 0
    await assert_settled(running)


@pytest.mark.parametrize(
    "bad_event",
    [b'data: {"choices":[{"index":0,"delta":{"content":"\xff\xfe"}}]}\n\n',
     b'data: {"choices": [{"index": 0, "delta": {"content": "unterminated\n\n',
     b"data: not json at all\n\n"],
    ids=["invalid-utf8", "truncated-json", "not-json"],
)
async def test_undecodable_event_after_output_ends_with_error_event(
    fake: FakeUpstream, hopbase: StartHopbase, bad_event: bytes
) -> None:
    fake.script("a", Reply.stream([*CHAT_OUTPUT, bad_event, *CHAT[3:]]))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, CHAT_STREAM)
    assert status == 200
    assert events_of(body) == CHAT_OUTPUT + chat_error("invalid JSON from upstream")
    await ends_without_retry(running, fake)


async def test_over_long_line_ends_with_error_event_and_memory_stays_bounded(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    line_cap = 64 * 1024
    huge = b'data: {"choices":[{"delta":{"content":"' + b"x" * (8 << 20)
    fake.script("a", Reply.chunked(b"".join(CHAT_OUTPUT) + huge, chunk_size=16 * 1024))
    running = await hopbase(pair(fake), server={"max_sse_line_bytes": line_cap})
    tracemalloc.start()
    try:
        status, _, body = await post(running.url, CHAT_STREAM)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 200
    assert events_of(body) == CHAT_OUTPUT + chat_error("upstream sent an over-long SSE line")
    assert peak < 2 << 20, f"peak {peak} bytes while an 8 MiB line arrived"
    await fake.wait_closed("a")
    await ends_without_retry(running, fake)


CLEAN = b"".join(CHAT)
FRAMINGS = {
    "crlf": (CLEAN.replace(b"\n", b"\r\n"), 4096),
    "lone-cr": (CLEAN.replace(b"\n", b"\r"), 4096),
    "bom": (b"\xef\xbb\xbf" + CLEAN, 4096),
    "one-byte-chunks": (CLEAN, 1),
    "crlf-split-across-chunks": (CLEAN.replace(b"\n", b"\r\n"), 1),
    "crlf-odd-chunks": (CLEAN.replace(b"\n", b"\r\n"), 7),
    "bom-split-cr-one-byte": (b"\xef\xbb\xbf" + CLEAN.replace(b"\n", b"\r"), 1),
}


@pytest.mark.parametrize("framing", list(FRAMINGS))
async def test_framing_oddities_give_identical_client_events(
    fake: FakeUpstream, hopbase: StartHopbase, framing: str
) -> None:
    raw, chunk_size = FRAMINGS[framing]
    fake.script("a", Reply.chunked(raw, chunk_size=chunk_size))
    running = await hopbase(pair(fake))
    status, _, body = await post(running.url, CHAT_STREAM)
    assert status == 200
    assert decoded(body) == decoded(CLEAN)
    assert fake.requests("b") == []
    assert running.snapshot("a").failures_in_window == 0
    await assert_settled(running)
