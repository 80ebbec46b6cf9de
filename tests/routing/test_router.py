"""The router's contract: slots, rpm/tpm windows, refusals, exclusion, leases, reloads."""

from __future__ import annotations

import random

import pytest

from routing import (
    AllCoolingDown,
    AttemptReport,
    CooldownSettings,
    Deployment,
    DeploymentSnapshot,
    FakeClock,
    GroupPolicy,
    Lease,
    NoCapacity,
    Outcome,
    Router,
)
from tests.routing.support import (
    ERROR,
    GROUP,
    deployment,
    lease_on,
    make_router,
    pick_counts,
    record_cooldowns,
    serve,
    state_of,
    success,
)

CANCELLED = AttemptReport(Outcome.CANCELLED)


def rate_limited(retry_after_s: float) -> AttemptReport:
    return AttemptReport(Outcome.RATE_LIMITED, status=429, retry_after_s=retry_after_s)


def test_the_in_flight_ceiling_gives_no_capacity_until_a_release() -> None:
    router = make_router(deployment("a", max_in_flight=1), deployment("b", max_in_flight=1))
    first, second = router.acquire(GROUP), router.acquire(GROUP)
    assert isinstance(first, Lease) and isinstance(second, Lease)
    assert {first.deployment.id, second.deployment.id} == {"a", "b"}

    assert router.acquire(GROUP) == NoCapacity(1.0)

    first.release(success())
    third = router.acquire(GROUP)
    assert isinstance(third, Lease)
    assert third.deployment.id == first.deployment.id


def test_rpm_counts_attempts_in_a_sliding_minute() -> None:
    clock = FakeClock()
    router = make_router(deployment("a", rpm=2), clock=clock)
    serve(router, "a", success())
    clock.advance(30)
    serve(router, "a", ERROR)

    assert router.acquire(GROUP) == NoCapacity(30.0)
    clock.advance(29.5)
    assert router.acquire(GROUP) == NoCapacity(1.0)  # never suggests less than a second
    clock.advance(0.5)
    assert isinstance(router.acquire(GROUP), Lease)
    assert router.acquire(GROUP) == NoCapacity(30.0)


def test_tpm_counts_reported_tokens_plus_the_estimate_in_a_sliding_minute() -> None:
    clock = FakeClock()
    router = make_router(deployment("a", tpm=1000), clock=clock)
    serve(router, "a", success(input_tokens=400, output_tokens=400))

    assert router.acquire(GROUP, estimated_tokens=201) == NoCapacity(60.0)
    small = router.acquire(GROUP, estimated_tokens=200)
    assert isinstance(small, Lease)
    small.release(CANCELLED)
    clock.advance(60)
    assert isinstance(router.acquire(GROUP, estimated_tokens=900), Lease)


def test_tpm_reserves_the_estimates_of_attempts_in_flight() -> None:
    router = make_router(deployment("a", tpm=1000))
    first = router.acquire(GROUP, estimated_tokens=600)
    assert isinstance(first, Lease)

    assert router.acquire(GROUP, estimated_tokens=600) == NoCapacity(1.0)
    first.release(success(input_tokens=300, output_tokens=200))
    assert router.acquire(GROUP, estimated_tokens=501) == NoCapacity(60.0)
    assert isinstance(router.acquire(GROUP, estimated_tokens=500), Lease)


def test_tpm_admits_one_oversized_attempt_on_an_idle_minute() -> None:
    router = make_router(deployment("a", tpm=1000))

    assert isinstance(router.acquire(GROUP, estimated_tokens=5000), Lease)
    assert router.acquire(GROUP, estimated_tokens=1) == NoCapacity(1.0)


def test_tokens_of_cancelled_attempts_still_count_towards_tpm() -> None:
    router = make_router(deployment("a", tpm=1000))

    serve(router, "a", AttemptReport(Outcome.CANCELLED, input_tokens=500, output_tokens=50))

    assert state_of(router, "a").tpm == 550


def test_all_cooling_down_retry_after_is_the_time_to_the_first_return() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), deployment("b"), clock=clock)
    serve(router, "a", rate_limited(30))
    clock.advance(5)
    serve(router, "b", rate_limited(50))

    assert router.acquire(GROUP) == AllCoolingDown(25.0)


def test_a_cooling_deployment_is_skipped_while_another_is_eligible() -> None:
    router = make_router(deployment("a"), deployment("b"), policy=GroupPolicy("weighted"))
    serve(router, "a", rate_limited(30))

    assert pick_counts(router, 200) == {"a": 0, "b": 200}


def test_cooling_plus_full_is_no_capacity_not_all_cooling() -> None:
    router = make_router(deployment("a"), deployment("b", max_in_flight=1))
    serve(router, "a", rate_limited(30))
    held = lease_on(router, "b")

    assert router.acquire(GROUP) == NoCapacity(1.0)
    assert not held.released


def test_excluded_deployments_are_never_chosen() -> None:
    router = make_router(deployment("a"), deployment("b"), deployment("c"),
                         policy=GroupPolicy("weighted"))

    chosen = set()
    for _ in range(300):
        lease = router.acquire(GROUP, frozenset({"a", "c"}))
        assert isinstance(lease, Lease)
        chosen.add(lease.deployment.id)
        lease.release(CANCELLED)

    assert chosen == {"b"}


def test_excluding_every_deployment_is_no_capacity() -> None:
    router = make_router(deployment("a"), deployment("b"))

    assert router.acquire(GROUP, frozenset({"a", "b"})) == NoCapacity(1.0)


def test_all_cooling_down_only_considers_deployments_not_excluded() -> None:
    router = make_router(deployment("a"), deployment("b"))
    serve(router, "a", rate_limited(40))

    assert router.acquire(GROUP, frozenset({"b"})) == AllCoolingDown(40.0)


def test_a_lease_released_twice_applies_once() -> None:
    router = make_router(deployment("a"),
                         policy=GroupPolicy(cooldown=CooldownSettings(allowed_fails=1)))
    releases: list[str] = []
    router.add_release_listener(releases.append)
    events = record_cooldowns(router)
    lease = lease_on(router, "a")

    assert (lease.released, lease.release(success())) == (False, True)
    assert (lease.released, lease.release(ERROR)) == (True, False)

    snapshot = state_of(router, "a")
    assert (snapshot.in_flight, snapshot.failures_in_window) == (0, 0)
    assert (releases, events) == ([GROUP], [])


def test_release_listeners_hear_the_group_and_cooldown_listeners_the_event() -> None:
    router = make_router(deployment("a"))
    releases: list[str] = []
    router.add_release_listener(releases.append)
    events = record_cooldowns(router)

    serve(router, "a", rate_limited(12))

    assert releases == [GROUP]
    assert [(e.deployment, e.reason, e.seconds, e.consecutive) for e in events] == [
        (deployment("a"), "rate_limited", 12.0, 1)
    ]


def test_reconfigure_keeps_surviving_state_and_old_leases_release_safely() -> None:
    router = make_router(deployment("gone"), deployment("kept", weight=1))
    events = record_cooldowns(router)
    serve(router, "kept", success(first_output_s=0.8))
    kept_lease = lease_on(router, "kept")
    serve(router, "kept", rate_limited(30))
    gone_lease = lease_on(router, "gone")

    router.reconfigure({GROUP: [deployment("kept", weight=4), deployment("new")]},
                       {GROUP: GroupPolicy()})

    kept = state_of(router, "kept")
    assert (kept.in_flight, kept.cooldown_active, kept.cooldown_seconds_left,
            kept.first_output_s) == (1, True, 30.0, 0.8)
    assert [s.id for s in router.snapshot()] == ["kept", "new"]
    assert router.deployments(GROUP)[0].weight == 4
    assert gone_lease.release(AttemptReport(Outcome.ERROR, auth_failure=True)) is True
    assert gone_lease.release(ERROR) is False
    assert kept_lease.release(ERROR) is True
    assert [(e.deployment.id, e.reason) for e in events] == [("kept", "rate_limited")]
    assert [s.in_flight for s in router.snapshot()] == [0, 0]


def test_a_lease_outstanding_across_reconfigure_frees_its_slot() -> None:
    router = make_router(deployment("a", max_in_flight=1))
    lease = lease_on(router, "a")
    router.reconfigure({GROUP: [deployment("a", max_in_flight=1)]}, {})

    assert router.acquire(GROUP) == NoCapacity(1.0)
    lease.release(success())
    assert isinstance(router.acquire(GROUP), Lease)


def test_a_deployment_removed_and_added_again_starts_fresh() -> None:
    router = make_router(deployment("a"))
    old = lease_on(router, "a")
    router.reconfigure({GROUP: []}, {})
    router.reconfigure({GROUP: [deployment("a")]}, {})

    old.release(ERROR)

    assert state_of(router, "a").in_flight == 0
    assert state_of(router, "a").failures_in_window == 0


def test_unknown_groups_raise_key_error() -> None:
    router = make_router(deployment("a"))

    with pytest.raises(KeyError):
        router.acquire("no-such-model")
    with pytest.raises(KeyError):
        router.deployments("no-such-model")


def test_groups_and_deployments_list_the_config_in_order() -> None:
    router = Router({"m1": [Deployment("x", "m1")],
                     "m2": [Deployment("y", "m2"), Deployment("z", "m2")]},
                    {}, FakeClock(), random.Random(1))

    assert router.groups() == ["m1", "m2"]
    assert [d.id for d in router.deployments("m2")] == ["y", "z"]


def test_misplaced_and_duplicate_deployments_are_refused() -> None:
    with pytest.raises(ValueError, match="listed under 'other'.*used more than once"):
        Router({"other": [deployment("a")], GROUP: [deployment("a")]}, {},
               FakeClock(), random.Random(1))


def test_a_failed_reconfigure_keeps_the_old_config() -> None:
    router = make_router(deployment("a"))

    with pytest.raises(ValueError, match="used more than once"):
        router.reconfigure({GROUP: [deployment("a"), deployment("a")]}, {})

    assert [s.id for s in router.snapshot()] == ["a"]


def test_snapshot_reports_the_live_state() -> None:
    clock = FakeClock()
    router = make_router(deployment("a", max_in_flight=8), clock=clock)
    serve(router, "a", success(first_output_s=0.4, last_chunk_s=2.4, input_tokens=10,
                               output_tokens=100))
    serve(router, "a", ERROR)
    held = lease_on(router, "a")
    clock.advance(1)

    assert router.snapshot() == [DeploymentSnapshot(
        model_group=GROUP, id="a", in_flight=1, max_in_flight=8, cooldown_active=False,
        cooldown_reason=None, cooldown_seconds_left=0.0, consecutive_cooldowns=0,
        failures_in_window=1, first_output_s=0.4, tokens_per_s=50.0, rpm=3, tpm=110,
    )]
    assert held.acquired_at == 1000.0


def test_first_output_percentile_reads_recent_successes_only() -> None:
    router = make_router(deployment("a"))
    for millis in range(1, 101):
        serve(router, "a", success(first_output_s=millis / 100))
    serve(router, "a", AttemptReport(Outcome.TIMEOUT, first_output_s=99.0))

    assert router.first_output_percentile("a", 95) == 0.95
    assert router.first_output_percentile("a", 50) == 0.5
    assert router.first_output_percentile("a", 100) == 1.0
    assert router.first_output_percentile("no-such-deployment", 95) is None


def test_first_output_percentile_keeps_only_the_last_two_hundred_samples() -> None:
    router = make_router(deployment("a"))
    for index in range(250):
        serve(router, "a", success(first_output_s=float(index)))

    assert router.first_output_percentile("a", 0) == 50.0


def test_first_output_percentile_is_none_before_any_sample() -> None:
    router = make_router(deployment("a"))

    assert router.first_output_percentile("a", 95) is None


def test_negative_token_estimates_are_refused() -> None:
    router = make_router(deployment("a"))

    with pytest.raises(ValueError, match="estimated_tokens"):
        router.acquire(GROUP, estimated_tokens=-1)
