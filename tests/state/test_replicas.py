"""Two HopBase replicas on one Redis (issue 7, SPEC section 11).

Both replicas run in this process as separate applications with separate
gateways and routers; they share only the Redis server and the fake upstream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import attrs
import orjson
import pytest

from hopbase.config import CacheConfig
from tests.conftest import Running, StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply
from tests.state.conftest import StartReplica
from tests.state.support import RedisServer, free_port, state_section, until

CHAT = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}
STREAM = {**CHAT, "stream": True}
# Streams held open for seconds must not count as stuck.
ROUTING = {"stuck_after_s": 30.0}


def question(number: int) -> dict[str, Any]:
    """A non-stream chat request of its own, so the shared cache cannot answer it."""
    return {"model": "gpt", "messages": [{"role": "user", "content": f"question {number}"}]}


def preferring_a(fake: FakeUpstream, **a_fields: Any) -> dict[str, Any]:
    """Group ``gpt``: deployment a is (all but) always chosen first, b is the fallback."""
    return {"gpt": {"deployments": [
        openai_deployment(fake, "a", weight=1_000_000, **a_fields),
        openai_deployment(fake, "b", weight=0.000001),
    ]}}


async def post(url: str, body: dict[str, Any], path: str = "/v1/chat/completions",
               ) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body) as response:
        return response.status, dict(response.headers), await response.read()


async def readyz(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(url + "/readyz") as response:
        return response.status, orjson.loads(await response.read())


async def hold_stream(url: str) -> None:
    """Stream a chat answer and keep reading until cancelled (which disconnects)."""
    async with aiohttp.ClientSession() as session, session.post(
        url + "/v1/chat/completions", json=STREAM
    ) as response:
        assert response.status == 200
        async for _chunk in response.content.iter_any():
            pass


async def hang_up(streams: list[asyncio.Task[None]]) -> None:
    for stream in streams:
        stream.cancel()
    await asyncio.wait(streams)


def stalled_stream() -> Reply:
    """An upstream stream that sends output, then nothing until the client goes away."""
    return Reply.golden("chat_text.sse", count=3, then="stall")


async def test_a_429_on_one_replica_cools_the_deployment_on_the_other_within_a_second(
    fake: FakeUpstream, replica: StartReplica
) -> None:
    one: Running = await replica(preferring_a(fake))
    two: Running = await replica(preferring_a(fake))
    fake.script("a", Reply.status(429, retry_after=30))

    status, _, body = await post(one.url, CHAT)
    assert (status, b"Hello from b" in body) == (200, True)
    took = await until(lambda: two.snapshot("a").cooldown_active, timeout=1.0)

    assert took < 1.0
    snapshot = two.snapshot("a")
    assert snapshot.cooldown_reason == "rate_limited"
    assert 29.0 < snapshot.cooldown_seconds_left <= 30.0
    for number in range(3):
        status, _, body = await post(two.url, question(number))
        assert (status, b"Hello from b" in body) == (200, True)
    assert len(fake.requests("a")) == 1


async def test_in_flight_counts_add_up_so_the_other_replica_goes_elsewhere(
    fake: FakeUpstream, replica: StartReplica
) -> None:
    one = await replica(preferring_a(fake, max_in_flight=2), routing=ROUTING)
    two = await replica(preferring_a(fake, max_in_flight=2), routing=ROUTING)
    fake.script("a", stalled_stream(), stalled_stream())
    streams = [asyncio.create_task(hold_stream(one.url)) for _ in range(2)]
    await until(lambda: two.snapshot("a").in_flight == 2)

    status, _, body = await post(two.url, question(1))

    assert (status, b"Hello from b" in body) == (200, True)
    assert (one.snapshot("a").in_flight, len(fake.requests("a"))) == (2, 2)
    await hang_up(streams)
    await until(lambda: two.snapshot("a").in_flight == 0)
    status, _, body = await post(two.url, question(2))
    assert (status, b"Hello from a" in body) == (200, True)


async def test_a_request_queued_on_one_replica_takes_the_slot_the_other_frees(
    fake: FakeUpstream, replica: StartReplica
) -> None:
    solo = {"gpt": {"deployments": [openai_deployment(fake, "a", max_in_flight=2)]}}
    routing = {**ROUTING, "queue_timeout_s": 10.0}
    one = await replica(solo, routing=routing)
    two = await replica(solo, routing=routing)
    fake.script("a", stalled_stream(), stalled_stream())
    streams = [asyncio.create_task(hold_stream(one.url)) for _ in range(2)]
    await until(lambda: two.snapshot("a").in_flight == 2)
    queued = asyncio.create_task(post(two.url, CHAT))
    await until(lambda: two.gateway.admission.waiting("gpt") == 1)

    hung_up_at = time.monotonic()
    await hang_up(streams)
    status, _, body = await queued

    # woken by the other replica's report, far within the queue timeout
    assert time.monotonic() - hung_up_at < 2.0
    assert (status, b"Hello from a" in body) == (200, True)
    assert len(fake.requests("a")) == 3


async def test_every_replica_at_capacity_answers_429_after_the_queue_timeout(
    fake: FakeUpstream, replica: StartReplica
) -> None:
    solo = {"gpt": {"deployments": [openai_deployment(fake, "a", max_in_flight=2)]}}
    routing = {**ROUTING, "queue_timeout_s": 0.3}
    one = await replica(solo, routing=routing)
    two = await replica(solo, routing=routing)
    fake.script("a", stalled_stream(), stalled_stream())
    streams = [asyncio.create_task(hold_stream(one.url)) for _ in range(2)]
    await until(lambda: two.snapshot("a").in_flight == 2)

    status, headers, body = await post(two.url, CHAT)

    assert status == 429
    assert headers["Retry-After"] == "1"
    assert orjson.loads(body)["error"]["type"] == "rate_limit_error"
    assert len(fake.requests("a")) == 2
    await hang_up(streams)


async def test_a_cache_entry_written_by_one_replica_is_a_hit_on_the_other(
    fake: FakeUpstream, replica: StartReplica, redis_server: RedisServer
) -> None:
    one = await replica(preferring_a(fake))
    two = await replica(preferring_a(fake))

    first = await post(one.url, CHAT)
    second = await post(two.url, CHAT)

    assert (first[0], first[1]["x-hopbase-cache"]) == (200, "miss")
    assert (second[0], second[1]["x-hopbase-cache"]) == (200, "hit")
    assert second[2] == first[2]
    assert len(fake.requests()) == 1
    with redis_server.client() as client:
        [key] = client.scan_iter(match="hopbase:cache:*")
        assert 599_000 < client.pttl(key) <= 600_000


async def test_without_redis_both_replicas_serve_and_say_degraded_then_converge_again(
    fake: FakeUpstream, replica: StartReplica, redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="hopbase.state")
    one = await replica(preferring_a(fake))
    two = await replica(preferring_a(fake))
    assert await readyz(one.url) == (200, {"status": "ok"})

    redis_server.stop()
    await until(lambda: not one.gateway.state.connected and not two.gateway.state.connected)

    degraded = (200, {"status": "degraded", "reason": "redis unreachable"})
    for running in (one, two):
        assert await readyz(running.url) == degraded
        status, headers, body = await post(running.url, CHAT)
        assert (status, headers["x-hopbase-cache"], b"Hello from a" in body) == (200, "miss", True)
        status, _, body = await post(running.url, STREAM)
        assert (status, b"[DONE]" in body) == (200, True)

    redis_server.start()
    await until(lambda: one.gateway.state.connected and two.gateway.state.connected,
                timeout=4.0)
    assert await readyz(two.url) == (200, {"status": "ok"})
    fake.script("a", Reply.status(429, retry_after=30))
    status, _, body = await post(one.url, question(1))
    assert (status, b"Hello from b" in body) == (200, True)
    await until(lambda: two.snapshot("a").cooldown_active, timeout=1.0)
    messages = [record.getMessage() for record in caplog.records if record.name == "hopbase.state"]
    assert [m.split(":")[0] for m in messages] == [
        "redis unreachable", "redis unreachable", "redis reachable again", "redis reachable again"]


async def test_a_replica_starting_without_redis_serves_at_once_and_says_degraded(
    fake: FakeUpstream, hopbase: StartHopbase,
) -> None:
    nowhere = state_section(f"redis://127.0.0.1:{free_port()}/0")
    started_at = time.monotonic()
    running = await hopbase(preferring_a(fake), state=nowhere)

    assert time.monotonic() - started_at < 1.0  # a refused connection is not waited for
    assert await readyz(running.url) == (200, {"status": "degraded", "reason": "redis unreachable"})
    status, headers, body = await post(running.url, CHAT)
    assert (status, headers["x-hopbase-cache"], b"Hello from a" in body) == (200, "miss", True)


async def test_a_reload_that_changes_the_cache_keeps_it_in_redis(
    fake: FakeUpstream, replica: StartReplica,
) -> None:
    one = await replica(preferring_a(fake))
    two = await replica(preferring_a(fake))
    await post(one.url, question(1))

    two.gateway.reload(attrs.evolve(two.config, cache=CacheConfig(ttl_s=60.0)))

    status, headers, _ = await post(two.url, question(1))
    assert (status, headers["x-hopbase-cache"]) == (200, "hit")
    assert len(fake.requests()) == 1
