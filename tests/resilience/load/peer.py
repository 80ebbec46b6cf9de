"""The other ends of the load test, each run in its own process so HopBase has its loop alone.

    python -m tests.resilience.load.peer upstream EVENTS DELAY_S
        serves the fake upstream (every answer: a Chat stream of EVENTS events, DELAY_S
        apart), prints its port on one line, and stops when its standard input closes.
    python -m tests.resilience.load.peer clients URL STREAMS EVENTS RAMP_S
        opens STREAMS concurrent Chat streams against URL (started over RAMP_S seconds),
        reads each whole, and prints one JSON line: how many were byte-identical to the
        upstream's stream, the statuses seen, and a few sample failures.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import orjson

from tests.fakes.upstream import FakeUpstream, Reply
from tests.resilience.support import MESSAGES, chat_events

BODY = {"model": "gpt", "messages": MESSAGES, "stream": True,
        "stream_options": {"include_usage": True}}


def stream_of(events: int) -> list[bytes]:
    """A Chat stream of exactly ``events`` events (role, content…, finish, usage, [DONE])."""
    return chat_events(events - 4)


async def serve_upstream(events: int, delay_s: float) -> None:
    async with FakeUpstream() as fake:
        fake.default("a", Reply.stream(stream_of(events), delay_s=delay_s))
        print(fake.url, flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)


async def one_stream(
    session: aiohttp.ClientSession, url: str, expected: bytes, delay_s: float
) -> tuple[int, bool, str]:
    await asyncio.sleep(delay_s)
    try:
        async with session.post(url + "/v1/chat/completions", json=BODY) as response:
            body = await response.read()
            return response.status, body == expected, "" if body == expected else body[-300:].hex()
    except (aiohttp.ClientError, OSError) as error:
        return 0, False, repr(error)


async def run_clients(url: str, streams: int, events: int, ramp_s: float) -> dict[str, Any]:
    expected = b"".join(stream_of(events))
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        results = await asyncio.gather(*(
            one_stream(session, url, expected, ramp_s * index / streams)
            for index in range(streams)
        ))
    return {
        "identical": sum(1 for _, same, _ in results if same),
        "statuses": dict(Counter(str(status) for status, _, _ in results)),
        "failures": [detail for _, same, detail in results if not same][:3],
    }


def main(arguments: list[str]) -> None:
    try:
        import uvloop

        run: Callable[[Coroutine[Any, Any, Any]], Any] = uvloop.run
    except ImportError:  # the plain loop only makes the peers slower, not the test wrong
        run = asyncio.run
    if arguments[0] == "upstream":
        run(serve_upstream(int(arguments[1]), float(arguments[2])))
    else:
        url, streams, events, ramp_s = arguments[1:5]
        result = run(run_clients(url, int(streams), int(events), float(ramp_s)))
        print(orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
