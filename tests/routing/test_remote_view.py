"""The remote view: other replicas' load, estimates and cooldowns in a pure router."""

from __future__ import annotations

from routing import (
    AllCoolingDown,
    AttemptReport,
    CooldownSettings,
    FakeClock,
    GroupPolicy,
    Lease,
    Load,
    NoCapacity,
    Outcome,
    SpeedEstimate,
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


def rate_limited(retry_after_s: float) -> AttemptReport:
    return AttemptReport(Outcome.RATE_LIMITED, status=429, retry_after_s=retry_after_s)


def test_other_replicas_slots_count_against_max_in_flight() -> None:
    router = make_router(deployment("a", max_in_flight=2))
    router.set_remote_load("a", Load(in_flight=1))

    first = router.acquire(GROUP)
    assert isinstance(first, Lease)
    assert router.acquire(GROUP) == NoCapacity(1.0)
    assert state_of(router, "a").in_flight == 2


def test_a_drop_in_remote_load_wakes_the_queue_and_frees_the_slot() -> None:
    router = make_router(deployment("a", max_in_flight=1))
    woken: list[str] = []
    router.add_release_listener(woken.append)
    router.set_remote_load("a", Load(in_flight=1))
    assert router.acquire(GROUP) == NoCapacity(1.0)
    router.set_remote_load("a", Load(in_flight=1, rpm=5))  # more load frees nothing
    assert woken == []

    router.set_remote_load("a", Load(in_flight=0, rpm=5))

    assert woken == [GROUP]
    assert isinstance(router.acquire(GROUP), Lease)


def test_other_replicas_attempts_count_against_rpm() -> None:
    clock = FakeClock()
    router = make_router(deployment("a", rpm=3), clock=clock)
    router.set_remote_load("a", Load(rpm=2))
    serve(router, "a", success())

    # only this replica's window can be seen expiring: 60 s until it is empty
    assert router.acquire(GROUP) == NoCapacity(60.0)
    router.set_remote_load("a", Load(rpm=3))
    clock.advance(60)
    # the others alone are at the ceiling: no prediction, suggest a second
    assert router.acquire(GROUP) == NoCapacity(1.0)


def test_other_replicas_tokens_count_against_tpm() -> None:
    router = make_router(deployment("a", tpm=1000))
    router.set_remote_load("a", Load(tpm=900))

    assert router.acquire(GROUP, estimated_tokens=101) == NoCapacity(1.0)
    lease = router.acquire(GROUP, estimated_tokens=100)
    assert isinstance(lease, Lease)


def test_other_replicas_failures_complete_the_window() -> None:
    router = make_router(deployment("a"), deployment("b"))
    events = record_cooldowns(router)
    router.set_remote_load("a", Load(failures_in_window=2))
    assert state_of(router, "a").failures_in_window == 2

    serve(router, "a", ERROR)

    assert [(e.deployment.id, e.reason, e.seconds, e.consecutive) for e in events] == [
        ("a", "failures", 30.0, 1)
    ]
    assert state_of(router, "a").cooldown_active is True


def test_an_imposed_cooldown_takes_the_deployment_out_without_an_echo() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), clock=clock)
    events = record_cooldowns(router)

    assert router.impose_cooldown("a", clock.now() + 42, "rate_limited", 1) is True

    assert router.acquire(GROUP) == AllCoolingDown(42.0)
    snapshot = state_of(router, "a")
    assert (snapshot.cooldown_active, snapshot.cooldown_reason, snapshot.consecutive_cooldowns,
            snapshot.cooldown_seconds_left) == (True, "rate_limited", 1, 42.0)
    assert events == []


def test_a_shorter_or_past_imposed_cooldown_changes_nothing() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), clock=clock)
    serve(router, "a", rate_limited(30))

    assert router.impose_cooldown("a", clock.now() + 10, "failures", 5) is False
    assert router.impose_cooldown("a", clock.now() - 1, "failures", 5) is False
    assert router.impose_cooldown("no-such-deployment", clock.now() + 99, "auth", 1) is False

    snapshot = state_of(router, "a")
    assert (snapshot.cooldown_reason, snapshot.cooldown_seconds_left,
            snapshot.consecutive_cooldowns) == ("rate_limited", 30.0, 1)


def test_a_longer_imposed_cooldown_lengthens_and_keeps_the_higher_count() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), clock=clock)
    serve(router, "a", rate_limited(30))

    assert router.impose_cooldown("a", clock.now() + 50, "failures", 3) is True

    snapshot = state_of(router, "a")
    assert (snapshot.cooldown_reason, snapshot.cooldown_seconds_left,
            snapshot.consecutive_cooldowns) == ("failures", 50.0, 3)


def test_a_failed_trial_after_an_imposed_cooldown_backs_off_from_its_count() -> None:
    clock = FakeClock()
    policy = GroupPolicy(cooldown=CooldownSettings(base_s=10, max_s=600))
    router = make_router(deployment("a"), policy=policy, clock=clock)
    events = record_cooldowns(router)
    router.impose_cooldown("a", clock.now() + 5, "failures", 3)
    clock.advance(5)

    trial = lease_on(router, "a")
    assert trial.trial is True
    trial.release(ERROR)

    assert [(e.reason, e.seconds, e.consecutive) for e in events] == [("trial_failed", 80.0, 4)]


def test_a_trial_that_started_before_an_imposed_cooldown_does_not_clear_it() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), clock=clock)
    serve(router, "a", rate_limited(10))
    clock.advance(10)
    trial = lease_on(router, "a")
    router.impose_cooldown("a", clock.now() + 20, "rate_limited", 2)

    trial.release(success())

    snapshot = state_of(router, "a")
    assert (snapshot.cooldown_active, snapshot.cooldown_seconds_left) == (True, 20.0)


def test_an_imposed_cooldown_spends_the_failures_counted_so_far() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), clock=clock)
    events = record_cooldowns(router)
    serve(router, "a", ERROR, times=2)
    router.impose_cooldown("a", clock.now() + 5, "failures", 1)
    clock.advance(5)
    serve(router, "a", success())  # the trial passes

    serve(router, "a", ERROR, times=2)

    assert state_of(router, "a").failures_in_window == 2
    assert events == []


def test_remote_estimates_fill_in_where_this_replica_has_measured_nothing() -> None:
    policy = GroupPolicy(strategy="latency", explore_ratio=0.0)
    router = make_router(deployment("a"), deployment("b"), policy=policy)
    router.set_remote_estimates("a", SpeedEstimate(first_output_s=2.0, tokens_per_s=50.0))
    router.set_remote_estimates("b", SpeedEstimate(first_output_s=0.2))

    assert pick_counts(router, 20) == {"a": 0, "b": 20}
    assert (state_of(router, "a").first_output_s, state_of(router, "a").tokens_per_s) == (2.0, 50.0)


def test_a_fresh_local_sample_wins_over_the_remote_estimate() -> None:
    policy = GroupPolicy(strategy="latency", explore_ratio=0.0)
    router = make_router(deployment("a"), deployment("b"), policy=policy)
    router.set_remote_estimates("a", SpeedEstimate(first_output_s=2.0))
    router.set_remote_estimates("b", SpeedEstimate(first_output_s=0.2))
    serve(router, "a", success(first_output_s=0.1))

    assert pick_counts(router, 20) == {"a": 20, "b": 0}
    assert state_of(router, "a").first_output_s == 0.1


def test_a_stale_local_sample_gives_way_to_the_remote_estimate() -> None:
    clock = FakeClock()
    policy = GroupPolicy(strategy="latency", explore_ratio=0.0, half_life_s=10)
    router = make_router(deployment("a"), deployment("b"), policy=policy, clock=clock)
    serve(router, "a", success(first_output_s=0.1))
    serve(router, "b", success(first_output_s=0.5))
    clock.advance(31)  # past three half-lives: neither sample is fresh
    router.set_remote_estimates("a", SpeedEstimate(first_output_s=3.0))
    router.set_remote_estimates("b", SpeedEstimate(first_output_s=1.0))

    assert pick_counts(router, 20) == {"a": 0, "b": 20}


def test_local_load_and_estimates_export_only_this_replica() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), deployment("b"), clock=clock)
    router.set_remote_load("a", Load(in_flight=7, rpm=7, tpm=7, failures_in_window=1))
    router.set_remote_estimates("b", SpeedEstimate(first_output_s=9.0))
    serve(router, "a", success(first_output_s=0.5, last_chunk_s=1.5, output_tokens=100,
                               input_tokens=20))
    serve(router, "a", ERROR)
    lease_on(router, "a", estimated_tokens=30)

    assert router.local_load() == {
        "a": Load(in_flight=1, rpm=3, tpm=150, failures_in_window=1),
        "b": Load(),
    }
    assert router.local_estimates() == {
        "a": SpeedEstimate(first_output_s=0.5, tokens_per_s=100.0),
        "b": SpeedEstimate(),
    }


def test_snapshots_add_the_other_replicas_counts() -> None:
    router = make_router(deployment("a", max_in_flight=10))
    serve(router, "a", success(input_tokens=10, output_tokens=20))
    lease_on(router, "a")
    router.set_remote_load("a", Load(in_flight=2, rpm=5, tpm=100, failures_in_window=1))

    snapshot = state_of(router, "a")
    assert (snapshot.in_flight, snapshot.rpm, snapshot.tpm, snapshot.failures_in_window) == (
        3, 7, 130, 1)


def test_clear_remote_forgets_the_other_replicas() -> None:
    router = make_router(deployment("a", max_in_flight=1))
    router.set_remote_load("a", Load(in_flight=1, rpm=4))
    router.set_remote_estimates("a", SpeedEstimate(first_output_s=1.0))

    router.clear_remote()

    snapshot = state_of(router, "a")
    assert (snapshot.in_flight, snapshot.rpm, snapshot.first_output_s) == (0, 0, None)
    assert isinstance(router.acquire(GROUP), Lease)


def test_running_cooldowns_list_local_and_imposed_ones_with_the_time_left() -> None:
    clock = FakeClock()
    router = make_router(deployment("a"), deployment("b"), deployment("c"), clock=clock)
    serve(router, "a", rate_limited(30))
    router.impose_cooldown("b", clock.now() + 50, "auth", 2)
    clock.advance(10)

    assert [(e.deployment.id, e.reason, e.seconds, e.consecutive)
            for e in router.running_cooldowns()] == [("a", "rate_limited", 20.0, 1),
                                                     ("b", "auth", 40.0, 2)]


def test_remote_load_survives_a_reload_only_for_surviving_deployments() -> None:
    router = make_router(deployment("a", max_in_flight=1), deployment("b", max_in_flight=1))
    router.set_remote_load("a", Load(in_flight=1))
    router.set_remote_load("b", Load(in_flight=1))

    router.reconfigure({GROUP: [deployment("a", max_in_flight=1), deployment("b2")]},
                       {GROUP: GroupPolicy()})
    router.set_remote_load("b", Load(in_flight=3))  # gone: ignored

    assert [(s.id, s.in_flight) for s in router.snapshot()] == [("a", 1), ("b2", 0)]


def test_loads_add_up_and_estimates_average_over_the_replicas_that_have_one() -> None:
    total = Load(1, 2, 3, 4) + Load(10, 20, 30, 40)
    speed = SpeedEstimate.mean([SpeedEstimate(1.0, None), SpeedEstimate(3.0, 10.0),
                                SpeedEstimate()])

    assert total == Load(in_flight=11, rpm=22, tpm=33, failures_in_window=44)
    assert speed == SpeedEstimate(first_output_s=2.0, tokens_per_s=10.0)
    assert SpeedEstimate.mean([]) == SpeedEstimate()
