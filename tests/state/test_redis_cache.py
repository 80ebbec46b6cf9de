"""RedisStore: cached answers shared through Redis; a Redis failure is a miss, never an error."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from hopbase.cache import CachedAnswer
from hopbase.state.cache import (
    REDIS_CACHE_PREFIX,
    REDIS_PAUSE_S,
    RedisStore,
    decode_answer,
    encode_answer,
)
from hopbase.state.redis import redis_client
from routing import FakeClock
from tests.state.support import RedisServer

ANSWER = CachedAnswer(b'{"answer": "Paris\\nFrance"}', "application/json", "claude-sonnet-5")


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[tuple[RedisStore, FakeClock]]:
    client = redis_client(redis_server.url, timeout_s=0.5)
    clock = FakeClock()
    yield RedisStore(client, 600.0, clock), clock
    await client.aclose()


async def test_an_answer_round_trips_with_the_time_to_live(
    store: tuple[RedisStore, FakeClock], redis_server: RedisServer
) -> None:
    cache, _ = store
    await cache.set("k1", ANSWER)

    assert await cache.get("k1") == ANSWER
    assert await cache.get("k2") is None
    with redis_server.client() as client:
        assert 599_000 < client.pttl(REDIS_CACHE_PREFIX + "k1") <= 600_000


async def test_a_malformed_entry_is_a_miss(
    store: tuple[RedisStore, FakeClock], redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache, _ = store
    with redis_server.client() as client:
        client.set(REDIS_CACHE_PREFIX + "no-header", b"just a body")
        client.set(REDIS_CACHE_PREFIX + "bad-header", b'{"a": 1}\nbody')

    assert await cache.get("no-header") is None
    assert await cache.get("bad-header") is None
    assert [r.levelno for r in caplog.records if r.name == "hopbase.cache"] == [
        logging.WARNING, logging.WARNING]


async def test_without_redis_reads_miss_writes_are_skipped_and_redis_rests_a_while(
    store: tuple[RedisStore, FakeClock], redis_server: RedisServer
) -> None:
    cache, clock = store
    redis_server.stop()

    assert await cache.get("k1") is None
    await cache.set("k1", ANSWER)

    redis_server.start()
    with redis_server.client() as client:
        client.set(REDIS_CACHE_PREFIX + "k1", encode_answer(ANSWER))
    assert await cache.get("k1") is None  # still resting: Redis is not asked
    clock.advance(REDIS_PAUSE_S)
    assert await cache.get("k1") == ANSWER


def test_the_encoding_keeps_bodies_with_newlines_and_answers_without_fallback() -> None:
    plain = CachedAnswer(b"line one\nline two\n", "text/plain")

    assert decode_answer(encode_answer(ANSWER)) == ANSWER
    assert decode_answer(encode_answer(plain)) == plain
    assert decode_answer(encode_answer(plain).decode()) == plain
    with pytest.raises(ValueError, match="header"):
        decode_answer(b'["text/plain", 7]\nbody')
