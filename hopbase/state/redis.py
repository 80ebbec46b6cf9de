"""Routing state shared by replicas through Redis, kept off the request path.

`RedisState` runs one background task per replica. Requests never talk to Redis
for routing: the router keeps routing on its local state plus a *remote view*
(what the other replicas last reported), and this task keeps that view in sync:

- every ``sync_interval_s`` it writes this replica's load and fresh estimates
  under ``hopbase:replica:<id>`` with an expiry of ``lease_s``, reads every other
  live replica's report, and hands their sums to the router;
- each cooldown the router starts is published on ``hopbase:cooldowns`` at once
  (and kept under a key until it ends), and the cooldowns the other replicas
  announce are imposed on the router as they arrive.

When Redis is out of reach the replica serves on its local state alone: it forgets
the other replicas' load (stale counts must not block capacity), logs one warning,
reports itself degraded (`RedisState.connected`), and retries with a growing pause.
When Redis answers again it logs that once, imposes the cooldowns still running,
republishes its own, and reports its load again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections import defaultdict
from collections.abc import Coroutine, Sequence
from typing import Any

import attrs
import redis.asyncio
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from hopbase.config import StateConfig
from hopbase.state.wire import (
    COOLDOWN_CHANNEL,
    COOLDOWN_PREFIX,
    REPLICA_PREFIX,
    CooldownNotice,
    LoadReport,
    WireError,
    cooldown_key,
    replica_key,
)
from routing import Clock, CooldownStarted, Load, Router, SpeedEstimate

log = logging.getLogger("hopbase.state")

# Errors that mean "Redis is out of reach", as opposed to a bug in this module.
REDIS_ERRORS = (RedisError, OSError, TimeoutError)
MAX_PAUSE_S = 5.0  # the longest pause between two attempts to reach Redis again
FIRST_CONNECT_WAIT_S = 2.0  # start() waits this long for Redis before serving without it
_LISTEN_POLL_S = 1.0
_CANCEL_POLL_S = 0.1


def new_replica_id() -> str:
    """A replica id unique across hosts, processes and restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def redis_client(url: str, timeout_s: float) -> redis.asyncio.Redis:
    """A Redis client that gives up on a silent server after ``timeout_s``.

    One retry on a fresh connection covers a pooled connection that a Redis
    restart left dead; anything beyond that is the caller's to handle.
    """
    return redis.asyncio.Redis.from_url(
        url,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1),
    )


@attrs.define(eq=False)
class RedisState:
    """One replica's link to the shared routing state in Redis.

    Build it with `RedisState.from_config`, call `start` once the event loop runs
    and `close` at shutdown. ``client`` may be shared (the response cache uses it).
    """

    _client: redis.asyncio.Redis
    _router: Router
    _clock: Clock
    _replica_id: str
    _sync_interval_s: float
    _lease_s: float
    _connected: bool = attrs.field(default=False, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _warned: bool = attrs.field(default=False, init=False)
    _pause_s: float = attrs.field(default=0.0, init=False)
    _outbox: asyncio.Queue[CooldownNotice] = attrs.field(factory=asyncio.Queue, init=False)
    _first_attempt: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _task: asyncio.Task[None] | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._router.add_cooldown_listener(self._cooldown_started)

    @classmethod
    def from_config(cls, settings: StateConfig, router: Router, clock: Clock,
                    replica_id: str | None = None) -> RedisState:
        """The shared state ``settings`` describe, for ``router`` (which runs on ``clock``)."""
        # A silent Redis must be noticed well within one lease.
        timeout_s = min(1.0, settings.lease_s / 2)
        return cls(
            client=redis_client(settings.redis_url, timeout_s),
            router=router,
            clock=clock,
            replica_id=replica_id or new_replica_id(),
            sync_interval_s=settings.sync_interval_s,
            lease_s=settings.lease_s,
        )

    @property
    def client(self) -> redis.asyncio.Redis:
        """The Redis client, for other shared stores."""
        return self._client

    @property
    def replica_id(self) -> str:
        """This replica's id in Redis."""
        return self._replica_id

    @property
    def retry_pause_s(self) -> float:
        """The pause before the next attempt to reach Redis; 0 while connected."""
        return self._pause_s

    @property
    def connected(self) -> bool:
        """True while Redis answers; False before the first contact and while it is lost."""
        return self._connected

    async def start(self, wait_s: float = FIRST_CONNECT_WAIT_S) -> None:
        """Start the background task and wait up to ``wait_s`` for its first contact.

        It never fails: without Redis the replica serves on local state meanwhile.
        """
        self._task = asyncio.create_task(self._run(), name="hopbase-redis-state")
        try:
            async with asyncio.timeout(wait_s):
                await self._first_attempt.wait()
        except TimeoutError:
            if not self._warned:
                log.warning("redis did not answer within %.1f s; serving on this replica's "
                            "state until it does", wait_s)
                self._warned = True  # one warning for the loss, one when Redis is back

    async def close(self) -> None:
        """Stop the task, withdraw this replica's load report and close the client."""
        self._closing = True
        task = self._task
        # The client may turn a cancellation that meets one of its own timeouts into
        # a Redis error, which the task survives; cancel until it has really ended.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=_CANCEL_POLL_S)
        if self._connected:
            try:
                async with asyncio.timeout(self._lease_s):
                    await self._client.delete(replica_key(self._replica_id))
            except REDIS_ERRORS as error:
                # the report then simply expires with its lease
                log.debug("could not withdraw the load report: %s", error)
        self._connected = False
        await self._client.aclose()

    async def _run(self) -> None:
        """Stay in sync with Redis for good, reconnecting after every loss."""
        while not self._closing:
            try:
                await self._session()
            except REDIS_ERRORS as error:
                if self._closing:
                    return
                self._lost(f"redis unreachable: {error}")
            except Exception:  # a bug here must not end shared state for good
                log.exception("shared state failed; reconnecting")
                self._lost("shared state failed")
            self._first_attempt.set()
            self._pause_s = min(MAX_PAUSE_S, max(self._sync_interval_s, self._pause_s * 2))
            await asyncio.sleep(self._pause_s)

    async def _session(self) -> None:
        """One connection's life: catch up, then sync, listen and publish until an error."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            # subscribe before catching up, so no cooldown falls between the two
            await pubsub.subscribe(COOLDOWN_CHANNEL)
            await self._catch_up()
            self._found()
            await _until_first_error([self._sync_forever(), self._listen(pubsub),
                                      self._publish_forever()])
        finally:
            await pubsub.aclose()

    def _found(self) -> None:
        self._connected = True
        self._pause_s = 0.0
        self._first_attempt.set()
        if self._warned:
            log.warning("redis reachable again: routing state is shared again")
            self._warned = False

    def _lost(self, reason: str) -> None:
        self._connected = False
        self._router.clear_remote()
        while not self._outbox.empty():
            self._outbox.get_nowait()  # caught up from the router when Redis is back
        if not self._warned:
            log.warning("%s; serving on this replica's state until it is back", reason)
            self._warned = True

    async def _catch_up(self) -> None:
        """Impose the cooldowns still running, republish this replica's, and sync once."""
        keys = [key async for key in self._client.scan_iter(match=COOLDOWN_PREFIX + "*",
                                                            count=1000)]
        if keys:
            for raw in await self._client.mget(keys):
                if raw is not None:
                    self._receive(raw)
        for event in self._router.running_cooldowns():
            await self._publish(self._notice(event))
        await self._sync()

    async def _sync_forever(self) -> None:
        while True:
            await asyncio.sleep(self._sync_interval_s)
            await self._sync()

    async def _sync(self) -> None:
        """Report this replica's load, and hand the others' sums to the router."""
        loads = self._router.local_load()
        report = LoadReport(loads, self._router.local_estimates())
        own_key = replica_key(self._replica_id)
        await self._client.set(own_key, report.encode(), px=max(1, round(self._lease_s * 1000)))
        keys = [key async for key in self._client.scan_iter(match=REPLICA_PREFIX + "*",
                                                            count=1000)
                if key.decode() != own_key]
        reports = await self._client.mget(keys) if keys else []
        self._apply(list(loads), [raw for raw in reports if raw is not None])

    def _apply(self, deployment_ids: Sequence[str], raw_reports: Sequence[bytes | str]) -> None:
        loads: defaultdict[str, Load] = defaultdict(Load)
        estimates: defaultdict[str, list[SpeedEstimate]] = defaultdict(list)
        for raw in raw_reports:
            try:
                report = LoadReport.decode(raw)
            except (WireError, ValueError) as error:
                log.debug("ignoring a malformed load report: %s", error)
                continue
            for deployment_id, load in report.loads.items():
                loads[deployment_id] += load
                estimates[deployment_id].append(report.estimates[deployment_id])
        for deployment_id in deployment_ids:
            self._router.set_remote_load(deployment_id, loads[deployment_id])
            self._router.set_remote_estimates(deployment_id,
                                              SpeedEstimate.mean(estimates[deployment_id]))

    async def _listen(self, pubsub: PubSub) -> None:
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True,
                                               timeout=_LISTEN_POLL_S)
            if message is not None and message.get("type") == "message":
                self._receive(message["data"])

    def _receive(self, raw: bytes | str) -> None:
        """Impose a cooldown another replica started."""
        try:
            notice = CooldownNotice.decode(raw)
        except (WireError, ValueError) as error:
            log.debug("ignoring a malformed cooldown notice: %s", error)
            return
        if notice.replica == self._replica_id:
            return
        until = self._clock.now() + (notice.until - time.time())
        if self._router.impose_cooldown(notice.deployment, until, notice.reason,
                                        notice.consecutive):
            log.info("deployment %s cools down for %.1f s (%s, started by replica %s)",
                     notice.deployment, until - self._clock.now(), notice.reason, notice.replica)

    def _cooldown_started(self, event: CooldownStarted) -> None:
        """Router listener: queue the cooldown for the other replicas."""
        if self._connected:
            self._outbox.put_nowait(self._notice(event))

    def _notice(self, event: CooldownStarted) -> CooldownNotice:
        return CooldownNotice(self._replica_id, event.deployment.id, time.time() + event.seconds,
                              event.reason, event.consecutive)

    async def _publish_forever(self) -> None:
        while True:
            await self._publish(await self._outbox.get())

    async def _publish(self, notice: CooldownNotice) -> None:
        ttl_ms = round((notice.until - time.time()) * 1000)
        if ttl_ms <= 0:
            return
        raw = notice.encode()
        async with self._client.pipeline(transaction=False) as pipeline:
            pipeline.set(cooldown_key(notice.deployment, notice.replica), raw, px=ttl_ms)
            pipeline.publish(COOLDOWN_CHANNEL, raw)
            await pipeline.execute()


async def _until_first_error(coroutines: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run endless ``coroutines`` together until one fails; re-raise its error."""
    tasks = [asyncio.create_task(coroutine) for coroutine in coroutines]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
