"""The response cache's Redis store: answers shared by every replica.

It lives beside the shared routing state so that redis-py is imported only when
``state.backend: redis`` is configured.
"""

from __future__ import annotations

import logging

import attrs
import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from hopbase.cache import CachedAnswer
from routing import Clock

log = logging.getLogger("hopbase.cache")


REDIS_CACHE_PREFIX = "hopbase:cache:"
REDIS_PAUSE_S = 1.0  # after a Redis error the cache leaves Redis alone this long


@attrs.define
class RedisStore:
    """Cached answers in Redis, shared by every replica (``SET key value PX ttl``).

    Redis evicts by its own ``maxmemory-policy``: ``max_entries`` and ``max_bytes``
    bound the memory store only. A Redis error is a miss, or a write skipped, never
    a failed request; after one, the store leaves Redis alone for `REDIS_PAUSE_S`,
    so a Redis that hangs delays at most the requests of that moment.
    """

    _client: Redis
    _ttl_s: float
    _clock: Clock
    _paused_until: float = attrs.field(init=False, default=float("-inf"))

    async def get(self, key: str) -> CachedAnswer | None:
        """The answer under ``key``; None when there is none, or Redis cannot say."""
        if self._paused():
            return None
        try:
            raw = await self._client.get(REDIS_CACHE_PREFIX + key)
        except (RedisError, OSError) as error:
            self._pause(error)
            return None
        if raw is None:
            return None
        try:
            return decode_answer(raw)
        except ValueError as error:
            log.warning("ignoring a malformed cache entry: %s", error)
            return None

    async def set(self, key: str, answer: CachedAnswer) -> None:
        """Store ``answer`` under ``key`` for the time to live (skipped when Redis fails)."""
        if self._paused():
            return
        try:
            await self._client.set(REDIS_CACHE_PREFIX + key, encode_answer(answer),
                                   px=max(1, round(self._ttl_s * 1000)))
        except (RedisError, OSError) as error:
            self._pause(error)

    def _paused(self) -> bool:
        return self._clock.now() < self._paused_until

    def _pause(self, error: Exception) -> None:
        # the shared state task logs the loss of Redis once; one line per request would flood
        log.debug("cache: redis failed (%s); not using it for %.1f s", error, REDIS_PAUSE_S)
        self._paused_until = self._clock.now() + REDIS_PAUSE_S


def encode_answer(answer: CachedAnswer) -> bytes:
    """``answer`` as bytes: a JSON header line (content type, fallback), then the body."""
    return orjson.dumps([answer.content_type, answer.fallback]) + b"\n" + answer.body


def decode_answer(raw: bytes | str) -> CachedAnswer:
    """The answer `encode_answer` wrote (str only from a client that decodes responses).

    Raises:
        ValueError: ``raw`` is not such an answer.
    """
    data = raw if isinstance(raw, bytes) else raw.encode()
    header, separator, body = data.partition(b"\n")
    if not separator:
        raise ValueError("no header line")
    fields = orjson.loads(header)
    if not (isinstance(fields, list) and len(fields) == 2 and isinstance(fields[0], str)
            and (fields[1] is None or isinstance(fields[1], str))):
        raise ValueError("the header is not [content type, fallback]")
    return CachedAnswer(body, fields[0], fields[1])
