"""The response cache: whole non-streaming answers, shared by identical requests.

Only complete, successful (200), non-streaming, tool-free, stateless requests are
cacheable. A Responses request is stateless when its body says ``"store": false``
(the API stores by default) and names no ``previous_response_id``, ``conversation``
or stored ``prompt``. ``Cache-Control: no-cache`` (or ``no-store``) from the
client bypasses the cache: no read, no write.

The key is the endpoint, the model group, the client key's name (tenants never
share answers) and the client's body in canonical JSON (sorted keys), hashed with
BLAKE2b. A value is the final response body with its content type and the
``x-hopbase-fallback`` header, if any; errors and interrupted answers are never
stored.

Single-flight: while one cacheable request (the leader) is in flight, identical
requests (followers) wait for its answer instead of calling a provider; they are
counted as hits. When the leader fails or its client goes away, each follower runs
its own request: errors are never shared, and nobody is left waiting.

Values live behind `Store` (``get`` / ``set``): `MemoryStore` is the in-process LRU
with a TTL, an entry limit and a byte budget; `RedisStore` shares answers between
replicas (``state.backend: redis``). Single-flight stays per replica.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import orjson
from aiohttp import web

from hopbase.config import CacheConfig
from routing import Clock

if TYPE_CHECKING:
    from hopbase.proxy.flow import Exchange

log = logging.getLogger("hopbase.cache")

CACHE_HEADER = "x-hopbase-cache"
FALLBACK_HEADER = "x-hopbase-fallback"
HIT, MISS, BYPASS = "hit", "miss", "bypass"

# Responses fields that make the answer depend on state kept by the provider.
_STATEFUL_FIELDS = ("previous_response_id", "conversation", "prompt")
_TOOL_FIELDS = ("tools", "functions")
_BYPASS_DIRECTIVES = frozenset({"no-cache", "no-store"})

Produce = Callable[[], Awaitable[web.StreamResponse]]


@attrs.frozen
class CachedAnswer:
    """A whole successful answer as the client received it."""

    body: bytes
    content_type: str
    fallback: str | None = None

    @property
    def size(self) -> int:
        """Bytes this answer holds, for the byte budget."""
        return len(self.body) + len(self.content_type) + len(self.fallback or "")

    @classmethod
    def of(cls, response: web.StreamResponse) -> CachedAnswer | None:
        """The storable form of ``response``, or None when it must not be stored."""
        if response.status != 200 or not isinstance(response, web.Response):
            return None
        body = response.body
        if not isinstance(body, bytes):
            return None
        content_type = response.headers.get("Content-Type", "application/json")
        return cls(body, content_type, response.headers.get(FALLBACK_HEADER))

    def response(self) -> web.Response:
        """A new response carrying this answer (a response object is sent only once)."""
        headers = {"Content-Type": self.content_type}
        if self.fallback is not None:
            headers[FALLBACK_HEADER] = self.fallback
        return web.Response(body=self.body, headers=headers)


class Store(Protocol):
    """Where cached answers live: in this process or shared between replicas."""

    async def get(self, key: str) -> CachedAnswer | None:
        """The live answer stored under ``key``, or None."""
        ...

    async def set(self, key: str, answer: CachedAnswer) -> None:
        """Store ``answer`` under ``key`` for the store's time to live."""
        ...


@attrs.frozen
class _Entry:
    answer: CachedAnswer
    expires_at: float
    size: int


@attrs.define
class MemoryStore:
    """An in-process LRU store with a time to live, an entry limit and a byte budget.

    The least recently used entries are evicted first when either limit is passed;
    an answer larger than the whole byte budget is not stored at all.
    """

    _ttl_s: float
    _max_entries: int
    _max_bytes: int
    _clock: Clock
    _entries: OrderedDict[str, _Entry] = attrs.field(init=False, factory=OrderedDict)
    _bytes: int = attrs.field(init=False, default=0)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_used(self) -> int:
        """Bytes held by the stored entries (keys included)."""
        return self._bytes

    async def get(self, key: str) -> CachedAnswer | None:
        """The answer under ``key`` unless it expired; a read makes it most recent."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock.now() >= entry.expires_at:
            self._remove(key)
            return None
        self._entries.move_to_end(key)
        return entry.answer

    async def set(self, key: str, answer: CachedAnswer) -> None:
        """Store ``answer`` as the most recent entry, evicting the least recent as needed."""
        size = answer.size + len(key)
        if key in self._entries:
            self._remove(key)
        if size > self._max_bytes:
            return
        self._entries[key] = _Entry(answer, self._clock.now() + self._ttl_s, size)
        self._bytes += size
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            self._remove(next(iter(self._entries)))

    def _remove(self, key: str) -> None:
        self._bytes -= self._entries.pop(key).size


def cache_key(
    endpoint: str, model_group: str, key_name: str | None, body: Mapping[str, Any]
) -> str:
    """The cache key of a request: same endpoint, group, tenant and canonical body."""
    canonical = orjson.dumps([endpoint, model_group, key_name, body], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=32).hexdigest()


def cacheable(exchange: Exchange) -> bool:
    """Whether the exchange's answer may be stored: non-streaming, tool-free, stateless."""
    body = exchange.body
    if exchange.request.stream or exchange.request.tools:
        return False
    if any(body.get(field) for field in _TOOL_FIELDS):
        return False
    if exchange.endpoint == "responses":
        return body.get("store") is False and not any(body.get(f) for f in _STATEFUL_FIELDS)
    return True


def bypass_requested(headers: Mapping[str, str]) -> bool:
    """Whether the client's ``Cache-Control`` asks not to use the cache."""
    value = headers.get("Cache-Control", "")
    directives = {part.split("=", 1)[0].strip().lower() for part in value.split(",")}
    return not directives.isdisjoint(_BYPASS_DIRECTIVES)


@attrs.define(eq=False)
class ResponseCache:
    """The cache in front of non-streaming exchanges, with single-flight.

    ``store`` is None when the cache is disabled: answers then carry no cache header.
    """

    _store: Store | None
    _in_flight: dict[str, asyncio.Future[CachedAnswer | None]] = attrs.field(factory=dict)
    _waiting: int = 0

    @classmethod
    def build(cls, settings: CacheConfig, clock: Clock) -> ResponseCache:
        """The cache the config asks for (in memory; disabled when ``enabled`` is false)."""
        if not settings.enabled:
            return cls(None)
        return cls(MemoryStore(settings.ttl_s, settings.max_entries, settings.max_bytes, clock))

    @property
    def enabled(self) -> bool:
        """Whether answers go through the cache at all."""
        return self._store is not None

    @property
    def waiting(self) -> int:
        """Requests now waiting for an identical request in flight to answer."""
        return self._waiting

    async def respond(
        self, exchange: Exchange, headers: Mapping[str, str], produce: Produce
    ) -> web.StreamResponse:
        """Answer ``exchange`` from the cache, from an identical request in flight, or live.

        ``produce`` runs the exchange against the providers.

        Sets ``exchange.cache`` (hit, miss, bypass) before anything can fail, so the
        request log and an error answer can say it; the answer carries ``x-hopbase-cache``.
        """
        if self._store is None:
            return await produce()
        if not cacheable(exchange) or bypass_requested(headers):
            exchange.cache = BYPASS
            return _labelled(await produce(), BYPASS)
        key = cache_key(exchange.endpoint, exchange.model_group, exchange.key_name, exchange.body)
        exchange.cache = MISS
        answer = await self._store.get(key)
        if answer is None:
            pending = self._in_flight.get(key)
            if pending is None:
                return _labelled(await self._lead(key, produce), MISS)
            answer = await self._follow(pending)
        if answer is None:
            # the leader failed or its client left: run our own request, errors are not shared
            response, _ = await self._produce_and_store(key, produce)
            return _labelled(response, MISS)
        exchange.cache = HIT
        return _labelled(answer.response(), HIT)

    async def _follow(self, pending: asyncio.Future[CachedAnswer | None]) -> CachedAnswer | None:
        """The answer of the identical request in flight, or None when it failed."""
        self._waiting += 1
        try:
            # shielded: a follower whose client leaves must not cancel the leader's future
            return await asyncio.shield(pending)
        finally:
            self._waiting -= 1

    async def _lead(self, key: str, produce: Produce) -> web.StreamResponse:
        future: asyncio.Future[CachedAnswer | None] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        answer: CachedAnswer | None = None
        try:
            response, answer = await self._produce_and_store(key, produce)
            return response
        finally:
            # on an error or a cancelled leader the followers get None and run their own
            future.set_result(answer)
            del self._in_flight[key]

    async def _produce_and_store(
        self, key: str, produce: Produce
    ) -> tuple[web.StreamResponse, CachedAnswer | None]:
        response = await produce()
        answer = CachedAnswer.of(response)
        if answer is not None and self._store is not None:
            await self._store.set(key, answer)
        return response, answer


def _labelled(response: web.StreamResponse, result: str) -> web.StreamResponse:
    response.headers[CACHE_HEADER] = result
    return response
