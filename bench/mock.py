"""A lean mock OpenAI Chat upstream for the benchmark: raw asyncio protocols, answers prepared once.

The mock shares a core with the load generator, so it must cost far less per
request than HopBase: it parses HTTP/1.1 by hand (keep-alive, ``Content-Length``
request bodies, no pipelining needed) and writes answers prepared at start-up.
``hopbase sim`` renders each answer through the protocol modules and runs on
aiohttp, which makes it the bottleneck of the direct runs (see README.md).

The request's ``model`` picks the behaviour:

- ``chat`` (and any unknown name): a non-streaming answer at once; a stream
  sends its role chunk at once, then ``chunks`` content chunks ``interval_ms``
  apart, the last with the finish chunk, the usage chunk (when asked) and ``[DONE]``.
- ``burst``: a stream whose first content chunk comes ``interval_ms`` after the
  request and all the rest right after it (time-to-first-token runs).
- ``slow``: a stream with its role and first content chunk at once, then one
  content chunk every `SLOW_INTERVAL_S` until the client leaves (memory runs).

Run it alone with ``python -m bench.mock --port 19090``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, cast

import attrs
import orjson

CREATED = 1735689600
SLOW_INTERVAL_S = 5.0
_WORDS = (
    "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
    "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua",
)
_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_LAST_CHUNK = b"0\r\n\r\n"
_HEALTH = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n" \
    b'{"status":"ok"}'
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk of the chunked transfer encoding."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def _words(count: int) -> list[str]:
    return [("" if index == 0 else " ") + _WORDS[index % len(_WORDS)] for index in range(count)]


@attrs.frozen
class Schedule:
    """A stream's framed chunks as (offset in seconds, bytes), and its repeating tail if any."""

    steps: tuple[tuple[float, bytes], ...]
    repeat: bytes | None = None


@attrs.define
class Answers:
    """The mock's prepared answers, built once per (model, kind) and then reused."""

    chunks: int = 20
    interval_s: float = 0.005
    _unary: dict[str, bytes] = attrs.field(factory=dict)
    _streams: dict[tuple[str, bool], Schedule] = attrs.field(factory=dict)

    def unary(self, model: str) -> bytes:
        """The whole HTTP response of a non-streaming answer naming ``model``."""
        answer = self._unary.get(model)
        if answer is None:
            answer = self._unary[model] = self._render_unary(model)
        return answer

    def stream(self, model: str, include_usage: bool) -> Schedule:
        """The chunk schedule of a streaming answer naming ``model``."""
        schedule = self._streams.get((model, include_usage))
        if schedule is None:
            schedule = self._streams[(model, include_usage)] = self._render_stream(
                model, include_usage
            )
        return schedule

    def _render_unary(self, model: str) -> bytes:
        body = orjson.dumps({
            "id": "chatcmpl-mock", "object": "chat.completion", "created": CREATED,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant",
                                                 "content": "".join(_words(self.chunks)),
                                                 "refusal": None},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": self._usage(),
        })
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        return head % len(body) + body

    def _usage(self) -> dict[str, int]:
        return {"prompt_tokens": 12, "completion_tokens": self.chunks,
                "total_tokens": 12 + self.chunks}

    def _render_stream(self, model: str, include_usage: bool) -> Schedule:
        def event(choices: list[Any], **extra: Any) -> bytes:
            chunk = {"id": "chatcmpl-mock", "object": "chat.completion.chunk",
                     "created": CREATED, "model": model, "choices": choices, **extra}
            return b"data: " + orjson.dumps(chunk) + b"\n\n"

        def delta(content: dict[str, Any], finish: str | None = None) -> bytes:
            return event([{"index": 0, "delta": content, "logprobs": None,
                           "finish_reason": finish}])

        role = delta({"role": "assistant", "content": ""})
        contents = [delta({"content": word}) for word in _words(self.chunks)]
        ending = delta({}, "stop")
        if include_usage:
            ending += event([], usage=self._usage())
        ending += b"data: [DONE]\n\n"
        if model == "slow":
            return Schedule(((0.0, _frame(role + contents[0])),), repeat=_frame(contents[1]))
        offsets = [self.interval_s * (index + 1) for index in range(self.chunks)]
        if model == "burst":
            offsets = [self.interval_s] * self.chunks
        payloads = [*contents[:-1], contents[-1] + ending]
        steps = [(0.0, _frame(role))]
        steps += [(at, _frame(payload)) for at, payload in zip(offsets, payloads, strict=True)]
        steps[-1] = (steps[-1][0], steps[-1][1] + _LAST_CHUNK)
        return Schedule(tuple(steps))


def _content_length(head: bytes) -> int:
    start = head.lower().find(b"\r\ncontent-length:")
    if start < 0:
        return 0
    end = head.find(b"\r\n", start + 2)
    return int(head[start + 17 : end if end >= 0 else len(head)])


class MockConnection(asyncio.Protocol):
    """One client connection: reads requests one at a time and writes prepared answers."""

    def __init__(self, answers: Answers) -> None:
        self._answers = answers
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._streaming = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, so no isinstance check.
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._serve_ready()

    def _serve_ready(self) -> None:
        # A stream occupies the connection; the next request waits in the buffer.
        while not self._streaming and self._transport is not None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buffer[:end])
            total = end + 4 + _content_length(head)
            if len(self._buffer) < total:
                return
            body = bytes(self._buffer[end + 4 : total])
            del self._buffer[:total]
            self._answer(head, body)

    def _answer(self, head: bytes, body: bytes) -> None:
        assert self._transport is not None
        if head.startswith(b"GET"):
            self._transport.write(_HEALTH)
            return
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            request = None
        if not isinstance(request, dict):
            self._transport.write(_BAD_REQUEST)
            return
        model = str(request.get("model") or "chat")
        if request.get("stream") is not True:
            self._transport.write(self._answers.unary(model))
            return
        options = request.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        self._start_stream(self._answers.stream(model, include_usage))

    def _start_stream(self, schedule: Schedule) -> None:
        assert self._transport is not None
        self._streaming = True
        self._transport.write(_STREAM_HEAD)
        loop = asyncio.get_running_loop()
        started = loop.time()
        last = len(schedule.steps) - 1
        for index, (offset, payload) in enumerate(schedule.steps):
            ends = index == last and schedule.repeat is None
            if offset <= 0:
                self._send(payload, ends)
            else:
                self._timers.append(loop.call_at(started + offset, self._send, payload, ends))
        if schedule.repeat is not None:
            self._timers.append(loop.call_later(SLOW_INTERVAL_S, self._again, schedule.repeat))

    def _send(self, payload: bytes, ends: bool) -> None:
        if self._transport is None:
            return
        self._transport.write(payload)
        if ends:
            self._timers.clear()
            self._streaming = False
            self._serve_ready()

    def _again(self, payload: bytes) -> None:
        if self._transport is None:
            return
        self._transport.write(payload)
        self._timers = [asyncio.get_running_loop().call_later(SLOW_INTERVAL_S, self._again,
                                                              payload)]


async def serve(host: str, port: int, answers: Answers) -> None:
    """Serve the mock on ``host``:``port`` until cancelled."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: MockConnection(answers), host, port, backlog=8192, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.mock``: serve the mock until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m bench.mock")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=19090)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    args = parser.parse_args(argv)
    answers = Answers(chunks=args.chunks, interval_s=args.interval_ms / 1000.0)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a HopBase dependency
        asyncio.run(serve(args.host, args.port, answers))
        return
    uvloop.run(serve(args.host, args.port, answers))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a person stops it
        main()
