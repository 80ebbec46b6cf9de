"""RedisState against a real redis-server: routers of two replicas kept in sync.

The routers run on fake clocks (their windows and cooldowns are exact); only the
meeting in Redis is real, so the tests wait for it with `until`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import attrs
import pytest

from hopbase.config import StateConfig
from hopbase.state import RedisState
from hopbase.state.wire import COOLDOWN_CHANNEL, CooldownNotice, LoadReport, replica_key
from routing import (
    AttemptReport,
    CooldownSettings,
    FakeClock,
    GroupPolicy,
    Load,
    NoCapacity,
    Outcome,
    Router,
    SpeedEstimate,
)
from tests.routing.support import (
    ERROR,
    GROUP,
    deployment,
    lease_on,
    make_router,
    record_cooldowns,
    serve,
    state_of,
    success,
)
from tests.state.support import LEASE_S, SYNC_INTERVAL_S, RedisServer, free_port, until

POLICY = GroupPolicy(cooldown=CooldownSettings(allowed_fails=3, base_s=30, max_s=600))


def rate_limited(retry_after_s: float) -> AttemptReport:
    return AttemptReport(Outcome.RATE_LIMITED, status=429, retry_after_s=retry_after_s)


def settings(url: str) -> StateConfig:
    return StateConfig(backend="redis", redis_url=url, sync_interval_s=SYNC_INTERVAL_S,
                       lease_s=LEASE_S)


def new_router() -> Router:
    return make_router(deployment("a", max_in_flight=4), deployment("b"), policy=POLICY,
                       clock=FakeClock())


@attrs.define
class Replicas:
    """Builds RedisStates on the test's Redis and closes them after the test."""

    server: RedisServer
    built: list[RedisState] = attrs.field(factory=list)

    async def start(self, router: Router, replica_id: str, url: str | None = None) -> RedisState:
        state = RedisState.from_config(settings(url or self.server.url), router, FakeClock(),
                                       replica_id)
        self.built.append(state)
        await state.start()
        return state

    def keys(self, pattern: str) -> list[str]:
        with self.server.client() as client:
            return sorted(key.decode() for key in client.scan_iter(match=pattern))


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[Replicas]:
    built = Replicas(redis_server)
    yield built
    for state in built.built:
        await state.close()


async def test_a_cooldown_reaches_the_other_replica_at_once_and_is_not_echoed(
    replicas: Replicas,
) -> None:
    one, two = new_router(), new_router()
    announced_by_one, announced_by_two = record_cooldowns(one), record_cooldowns(two)
    await replicas.start(one, "one")
    await replicas.start(two, "two")

    serve(one, "a", rate_limited(30))
    took = await until(lambda: state_of(two, "a").cooldown_active, timeout=1.0)

    snapshot = state_of(two, "a")
    assert (snapshot.cooldown_reason, snapshot.consecutive_cooldowns) == ("rate_limited", 1)
    assert 29.0 < snapshot.cooldown_seconds_left <= 30.0
    assert took < SYNC_INTERVAL_S * 4  # pushed over pub/sub, not polled
    assert len(announced_by_one) == 1
    assert announced_by_two == []
    assert state_of(one, "a").cooldown_seconds_left == 30.0  # nothing came back to lengthen it
    assert replicas.keys("hopbase:cooldown:*") == ["hopbase:cooldown:a:one"]


async def test_in_flight_counts_add_up_and_a_closed_replica_withdraws_at_once(
    replicas: Replicas,
) -> None:
    one, two = new_router(), new_router()
    state_one = await replicas.start(one, "one")
    await replicas.start(two, "two")

    leases = [lease_on(one, "a") for _ in range(3)]
    lease_on(two, "a")
    await until(lambda: state_of(two, "a").in_flight == 4)
    await until(lambda: state_of(one, "a").in_flight == 4)
    assert two.acquire(GROUP, frozenset({"b"})) == NoCapacity(1.0)

    leases[0].release(success())
    await until(lambda: state_of(two, "a").in_flight == 3)
    await state_one.close()
    # withdrawn at close, long before the lease would have expired
    await until(lambda: state_of(two, "a").in_flight == 1, timeout=LEASE_S / 2)
    assert replicas.keys("hopbase:replica:*") == ["hopbase:replica:two"]


async def test_a_report_stops_counting_when_its_lease_expires(
    replicas: Replicas, redis_server: RedisServer
) -> None:
    two = new_router()
    await replicas.start(two, "two")
    ghost = LoadReport({"a": Load(in_flight=3)}, {})
    with redis_server.client() as client:
        client.set(replica_key("ghost"), ghost.encode(), px=300)

    await until(lambda: state_of(two, "a").in_flight == 3)
    await until(lambda: state_of(two, "a").in_flight == 0, timeout=1.0)
    assert replicas.keys("hopbase:replica:*") == ["hopbase:replica:two"]


async def test_failures_on_both_replicas_fill_one_window(replicas: Replicas) -> None:
    one, two = new_router(), new_router()
    announced_by_one = record_cooldowns(one)
    await replicas.start(one, "one")
    await replicas.start(two, "two")

    serve(two, "a", ERROR, times=2)
    await until(lambda: state_of(one, "a").failures_in_window == 2)
    serve(one, "a", ERROR)

    assert [(e.deployment.id, e.reason) for e in announced_by_one] == [("a", "failures")]
    await until(lambda: state_of(two, "a").cooldown_active, timeout=1.0)
    # the cooldown spent the failures on both replicas
    await until(lambda: state_of(one, "a").failures_in_window == 0)
    await until(lambda: state_of(two, "a").failures_in_window == 0)


async def test_estimates_travel_to_a_replica_that_measured_nothing(replicas: Replicas) -> None:
    one, two = new_router(), new_router()
    await replicas.start(one, "one")
    await replicas.start(two, "two")

    serve(one, "a", success(first_output_s=0.25, last_chunk_s=1.25, output_tokens=80))

    await until(lambda: state_of(two, "a").first_output_s == 0.25)
    assert state_of(two, "a").tokens_per_s == 80.0
    assert two.local_estimates()["a"] == SpeedEstimate()


async def test_a_replica_that_starts_later_learns_the_running_cooldowns(
    replicas: Replicas,
) -> None:
    one, late = new_router(), new_router()
    await replicas.start(one, "one")
    serve(one, "b", rate_limited(60))
    await until(lambda: replicas.keys("hopbase:cooldown:*") == ["hopbase:cooldown:b:one"])

    await replicas.start(late, "late")

    snapshot = state_of(late, "b")
    assert (snapshot.cooldown_active, snapshot.cooldown_reason) == (True, "rate_limited")
    assert 59.0 < snapshot.cooldown_seconds_left <= 60.0


async def test_malformed_notices_and_reports_are_ignored(
    replicas: Replicas, redis_server: RedisServer
) -> None:
    one, two = new_router(), new_router()
    await replicas.start(one, "one")
    await replicas.start(two, "two")
    with redis_server.client() as client:
        client.set(replica_key("broken"), b"not json", px=5000)
        client.set(replica_key("negative"), b'{"a": {"in_flight": -1}}', px=5000)
        client.publish(COOLDOWN_CHANNEL, b'{"replica": "x"}')
        client.publish(COOLDOWN_CHANNEL, b"[1, 2]")
    lease_on(one, "a")

    serve(one, "b", rate_limited(20))

    await until(lambda: state_of(two, "b").cooldown_active, timeout=1.0)
    await until(lambda: state_of(two, "a").in_flight == 1)
    assert replicas.keys("hopbase:replica:*") == [
        "hopbase:replica:broken", "hopbase:replica:negative",
        "hopbase:replica:one", "hopbase:replica:two"]


async def test_a_notice_for_an_unknown_deployment_changes_nothing(
    replicas: Replicas, redis_server: RedisServer
) -> None:
    two = new_router()
    await replicas.start(two, "two")
    notice = CooldownNotice("one", "not-here", time.time() + 30, "auth", 1)
    known = CooldownNotice("one", "a", time.time() + 30, "auth", 1)
    with redis_server.client() as client:
        client.publish(COOLDOWN_CHANNEL, notice.encode())
        client.publish(COOLDOWN_CHANNEL, known.encode())

    await until(lambda: state_of(two, "a").cooldown_active, timeout=1.0)
    assert [s.id for s in two.snapshot() if s.cooldown_active] == ["a"]


async def test_without_redis_a_replica_serves_on_local_state_and_warns_once(
    replicas: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hopbase.state")
    router = new_router()
    nowhere = f"redis://127.0.0.1:{free_port()}/0"

    state = await replicas.start(router, "alone", url=nowhere)
    await until(lambda: state.retry_pause_s >= SYNC_INTERVAL_S * 4)  # several attempts made

    assert state.connected is False
    serve(router, "a", rate_limited(10))
    assert state_of(router, "a").cooldown_active is True
    lost = [r.getMessage() for r in caplog.records if r.name == "hopbase.state"]
    assert len(lost) == 1
    assert lost[0].startswith("redis unreachable: ")


async def test_a_redis_that_never_answers_delays_the_start_only_briefly_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="hopbase.state")
    accepted: list[asyncio.StreamWriter] = []

    async def never_answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    router = new_router()
    state = RedisState.from_config(settings(f"redis://127.0.0.1:{port}/0"), router,
                                   FakeClock(), "waiting")
    try:
        started_at = time.monotonic()
        await state.start(wait_s=0.1)
        assert time.monotonic() - started_at < 0.5
        await until(lambda: state.retry_pause_s > 0)  # the first attempt timed out

        assert state.connected is False
        lost = [r.getMessage() for r in caplog.records if r.name == "hopbase.state"]
        assert len(lost) == 1
        assert lost[0].startswith("redis did not answer within 0.1 s")
    finally:
        await state.close()
        for writer in accepted:
            writer.close()
        silent.close()
        await silent.wait_closed()
