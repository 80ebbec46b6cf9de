"""Cooldowns through the router: failure windows, doubling, Retry-After, keys, half-open trials."""

from __future__ import annotations

import attrs

from routing import (
    AllCoolingDown,
    AttemptReport,
    CooldownSettings,
    FakeClock,
    GroupPolicy,
    Lease,
    NoCapacity,
    Outcome,
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

SETTINGS = CooldownSettings(allowed_fails=2, window_s=60, base_s=10, max_s=35)
POLICY = GroupPolicy(strategy="weighted", cooldown=SETTINGS)


def rate_limited(retry_after_s: float | None) -> AttemptReport:
    return AttemptReport(Outcome.RATE_LIMITED, status=429, retry_after_s=retry_after_s)


def trial(router_acquire: Lease | NoCapacity | AllCoolingDown) -> Lease:
    assert isinstance(router_acquire, Lease), router_acquire
    assert router_acquire.trial
    return router_acquire


def test_allowed_fails_inside_the_window_start_a_cooldown_of_base_s() -> None:
    router = make_router(deployment("a"), policy=POLICY)
    events = record_cooldowns(router)

    serve(router, "a", ERROR)
    assert events == []
    serve(router, "a", AttemptReport(Outcome.TIMEOUT))

    assert [(e.deployment.id, e.reason, e.seconds, e.consecutive) for e in events] == [
        ("a", "failures", 10, 1)
    ]
    assert router.acquire(GROUP) == AllCoolingDown(10)


def test_failures_older_than_the_window_do_not_count() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    events = record_cooldowns(router)

    serve(router, "a", ERROR)
    clock.advance(60)
    serve(router, "a", AttemptReport(Outcome.STUCK))

    assert events == []
    assert state_of(router, "a").failures_in_window == 1


def test_consecutive_cooldowns_double_up_to_the_cap() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    events = record_cooldowns(router)
    serve(router, "a", ERROR, times=2)

    for seconds in (10, 20, 35):
        clock.advance(seconds)
        trial(router.acquire(GROUP)).release(ERROR)

    assert [(e.reason, e.seconds, e.consecutive) for e in events] == [
        ("failures", 10, 1), ("trial_failed", 20, 2), ("trial_failed", 35, 3),
        ("trial_failed", 35, 4),
    ]
    assert router.acquire(GROUP) == AllCoolingDown(35)


def test_retry_after_is_honoured_exactly() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    events = record_cooldowns(router)

    serve(router, "a", rate_limited(30))

    assert [(e.reason, e.seconds, e.consecutive) for e in events] == [("rate_limited", 30, 1)]
    clock.advance(29.5)
    assert router.acquire(GROUP) == AllCoolingDown(0.5)
    clock.advance(0.5)
    trial(router.acquire(GROUP))


def test_a_later_shorter_retry_after_never_shortens_a_running_cooldown() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    events = record_cooldowns(router)
    first, straggler = lease_on(router, "a"), lease_on(router, "a")

    first.release(rate_limited(30))
    clock.advance(10)
    straggler.release(rate_limited(5))

    assert router.acquire(GROUP) == AllCoolingDown(20)
    assert len(events) == 1


def test_a_stragglers_longer_retry_after_lengthens_the_cooldown_without_escalating() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    first, straggler = lease_on(router, "a"), lease_on(router, "a")

    first.release(rate_limited(30))
    clock.advance(10)
    straggler.release(rate_limited(32))

    assert router.acquire(GROUP) == AllCoolingDown(32)
    assert state_of(router, "a").consecutive_cooldowns == 1


def test_a_rate_limit_without_retry_after_cools_down_for_base_s() -> None:
    router = make_router(deployment("a"), policy=POLICY)
    events = record_cooldowns(router)

    serve(router, "a", rate_limited(None))

    assert [(e.reason, e.seconds) for e in events] == [("rate_limited", 10)]


def test_a_retry_after_beyond_max_s_is_capped() -> None:
    router = make_router(deployment("a"), policy=POLICY)

    serve(router, "a", rate_limited(3600))

    assert router.acquire(GROUP) == AllCoolingDown(35)


def test_a_failure_cooldown_lasts_at_least_the_upstreams_retry_after() -> None:
    router = make_router(deployment("a"), policy=POLICY)
    events = record_cooldowns(router)

    serve(router, "a", ERROR)
    serve(router, "a", AttemptReport(Outcome.ERROR, status=503, retry_after_s=25))

    assert [(e.reason, e.seconds) for e in events] == [("failures", 25)]


def test_a_refused_key_cools_down_for_max_s_at_once() -> None:
    router = make_router(deployment("a"), policy=POLICY)
    events = record_cooldowns(router)

    serve(router, "a", AttemptReport(Outcome.ERROR, status=401, auth_failure=True))

    assert [(e.reason, e.seconds, e.consecutive) for e in events] == [("auth", 35, 1)]
    assert router.acquire(GROUP) == AllCoolingDown(35)


def test_half_open_allows_exactly_one_trial() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    serve(router, "a", ERROR, times=2)
    clock.advance(10)

    first = trial(router.acquire(GROUP))

    assert router.acquire(GROUP) == NoCapacity(1.0)
    assert first.trial


def test_a_successful_trial_clears_the_failure_count_and_consecutive_counter() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    events = record_cooldowns(router)
    serve(router, "a", ERROR, times=2)
    clock.advance(10)
    trial(router.acquire(GROUP)).release(ERROR)
    clock.advance(20)

    trial(router.acquire(GROUP)).release(success())

    snapshot = state_of(router, "a")
    assert (snapshot.consecutive_cooldowns, snapshot.failures_in_window,
            snapshot.cooldown_reason, snapshot.cooldown_active) == (0, 0, None, False)
    after = [router.acquire(GROUP) for _ in range(2)]
    assert [isinstance(lease, Lease) and not lease.trial for lease in after] == [True, True]
    serve(router, "a", ERROR, times=2)
    assert (events[-1].reason, events[-1].seconds, events[-1].consecutive) == ("failures", 10, 1)


def test_a_failed_trial_starts_the_next_longer_cooldown() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    serve(router, "a", ERROR, times=2)
    clock.advance(10)

    trial(router.acquire(GROUP)).release(AttemptReport(Outcome.TIMEOUT))

    assert router.acquire(GROUP) == AllCoolingDown(20)
    assert state_of(router, "a").cooldown_reason == "trial_failed"


def test_a_cancelled_trial_leaves_the_deployment_half_open() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    serve(router, "a", ERROR, times=2)
    clock.advance(10)

    trial(router.acquire(GROUP)).release(AttemptReport(Outcome.CANCELLED))

    trial(router.acquire(GROUP))
    assert state_of(router, "a").consecutive_cooldowns == 1


def test_client_disconnects_and_rejections_change_nothing_but_the_slot() -> None:
    router = make_router(deployment("a"), policy=POLICY)
    events = record_cooldowns(router)
    before = state_of(router, "a")

    serve(router, "a", AttemptReport(Outcome.CANCELLED, first_output_s=0.1), times=5)
    serve(router, "a", AttemptReport(Outcome.REJECTED, status=400, first_output_s=0.1,
                                     last_chunk_s=0.2), times=5)

    after = state_of(router, "a")
    assert events == []
    assert after == attrs.evolve(before, rpm=10)  # rpm counts attempts, whatever their end


def test_stragglers_failing_during_a_cooldown_do_not_escalate_it() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    events = record_cooldowns(router)
    leases = [lease_on(router, "a") for _ in range(5)]

    for lease in leases:
        lease.release(ERROR)

    assert [(e.reason, e.consecutive) for e in events] == [("failures", 1)]
    clock.advance(10)
    trial(router.acquire(GROUP))


def test_failures_and_timeouts_never_feed_the_estimates() -> None:
    router = make_router(deployment("a"), policy=POLICY)

    serve(router, "a", AttemptReport(Outcome.TIMEOUT, first_output_s=0.1, last_chunk_s=0.5,
                                     output_tokens=10))

    snapshot = state_of(router, "a")
    assert (snapshot.first_output_s, snapshot.tokens_per_s) == (None, None)


def test_a_failed_trial_never_shortens_a_cooldown_a_straggler_lengthened() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    events = record_cooldowns(router)
    straggler = lease_on(router, "a")
    serve(router, "a", ERROR, times=2)
    clock.advance(10)
    half_open_trial = trial(router.acquire(GROUP))

    straggler.release(rate_limited(30))
    half_open_trial.release(ERROR)

    assert router.acquire(GROUP) == AllCoolingDown(30)
    assert [(e.reason, e.seconds, e.consecutive) for e in events][-1] == ("trial_failed", 30, 2)


def test_a_successful_trial_outweighs_a_stragglers_retry_after() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), policy=POLICY, clock=clock)
    straggler = lease_on(router, "a")
    serve(router, "a", ERROR, times=2)
    clock.advance(10)
    half_open_trial = trial(router.acquire(GROUP))

    straggler.release(rate_limited(30))
    half_open_trial.release(success())

    lease = router.acquire(GROUP)
    assert isinstance(lease, Lease) and not lease.trial
