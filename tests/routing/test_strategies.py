"""Strategies and exploration, driven through the router with a seeded generator."""

from __future__ import annotations

import random

import pytest

from routing import FakeClock, GroupPolicy, Lease
from routing.strategies import Candidate, choose
from tests.routing.support import (
    GROUP,
    deployment,
    lease_on,
    make_router,
    pick_counts,
    serve,
    success,
)

PICKS = 10_000


def test_latency_picks_the_faster_of_two_after_samples() -> None:
    router = make_router(deployment("slow"), deployment("fast"),
                         policy=GroupPolicy(strategy="latency"))
    serve(router, "slow", success(first_output_s=2.0), times=5)
    serve(router, "fast", success(first_output_s=0.5), times=5)

    assert pick_counts(router, 200) == {"slow": 0, "fast": 200}


def test_throughput_picks_higher_tokens_per_second_even_when_it_starts_slower() -> None:
    router = make_router(deployment("quick-start"), deployment("fast-stream"),
                         policy=GroupPolicy(strategy="throughput"))
    # 100 tokens over 5 s = 20 tokens/s, first output after 0.2 s.
    serve(router, "quick-start", success(first_output_s=0.2, last_chunk_s=5.2), times=5)
    # 100 tokens over 1 s = 100 tokens/s, first output after 1.0 s.
    serve(router, "fast-stream", success(first_output_s=1.0, last_chunk_s=2.0), times=5)

    assert pick_counts(router, 200) == {"quick-start": 0, "fast-stream": 200}


def test_a_decayed_estimate_lets_a_recovered_deployment_win_back_traffic() -> None:
    clock = FakeClock()
    router = make_router(deployment("recovering"), deployment("steady"),
                         policy=GroupPolicy(strategy="latency", half_life_s=60), clock=clock)
    serve(router, "recovering", success(first_output_s=5.0), times=10)
    serve(router, "steady", success(first_output_s=1.0), times=10)
    assert pick_counts(router, 100) == {"recovering": 0, "steady": 100}

    clock.advance(600)  # ten half-lives: the old samples weigh 1/1024 each
    serve(router, "steady", success(first_output_s=1.0))
    serve(router, "recovering", success(first_output_s=0.5))

    # An undecayed mean would still be (10 * 5.0 + 0.5) / 11 = 4.6 s and lose.
    assert pick_counts(router, 100) == {"recovering": 100, "steady": 0}


def test_exploration_share_stays_within_its_bound_over_ten_thousand_picks() -> None:
    router = make_router(deployment("measured"), deployment("new"),
                         policy=GroupPolicy(strategy="latency", explore_ratio=0.05))
    serve(router, "measured", success(first_output_s=3.0))

    explored = pick_counts(router, PICKS)["new"]

    # Binomial(10 000, 0.05): mean 500, standard deviation 22.
    assert 430 <= explored <= 570


def test_unmeasured_deployments_never_win_without_exploration() -> None:
    router = make_router(deployment("measured"), deployment("new"),
                         policy=GroupPolicy(strategy="throughput", explore_ratio=0.0))
    serve(router, "measured", success(first_output_s=0.1, last_chunk_s=10.1, output_tokens=10))

    assert pick_counts(router, 1000) == {"measured": 1000, "new": 0}


def test_a_stale_measurement_counts_as_unmeasured() -> None:
    clock = FakeClock()
    router = make_router(deployment("stale"), deployment("fresh"),
                         policy=GroupPolicy(strategy="latency", explore_ratio=0.0,
                                            half_life_s=60), clock=clock)
    serve(router, "stale", success(first_output_s=0.1))
    clock.advance(181)  # just past three half-lives
    serve(router, "fresh", success(first_output_s=2.0))

    assert pick_counts(router, 500) == {"stale": 0, "fresh": 500}


def test_all_unmeasured_candidates_are_picked_by_weight() -> None:
    router = make_router(deployment("light", weight=1), deployment("heavy", weight=3),
                         policy=GroupPolicy(strategy="latency"))

    share = pick_counts(router, PICKS)["heavy"] / PICKS

    assert abs(share - 0.75) <= 0.03


def test_weighted_split_follows_weights_within_three_percent() -> None:
    router = make_router(deployment("a", weight=1), deployment("b", weight=2),
                         deployment("c", weight=5), policy=GroupPolicy(strategy="weighted"))

    counts = pick_counts(router, PICKS)

    shares = [counts[name] / PICKS for name in ("a", "b", "c")]
    expected = [1 / 8, 2 / 8, 5 / 8]
    assert all(abs(share - want) <= 0.03 for share, want in zip(shares, expected, strict=True))


def test_near_ties_are_shared_by_weight() -> None:
    router = make_router(deployment("a"), deployment("b"),
                         policy=GroupPolicy(strategy="latency", tie_buffer=0.1))
    serve(router, "a", success(first_output_s=1.00))
    serve(router, "b", success(first_output_s=1.05))

    share = pick_counts(router, PICKS)["b"] / PICKS

    assert abs(share - 0.5) <= 0.03


def test_without_a_tie_buffer_the_best_takes_everything() -> None:
    router = make_router(deployment("a"), deployment("b"),
                         policy=GroupPolicy(strategy="latency", tie_buffer=0.0))
    serve(router, "a", success(first_output_s=1.00))
    serve(router, "b", success(first_output_s=1.05))

    assert pick_counts(router, 1000) == {"a": 1000, "b": 0}


def test_least_busy_picks_the_emptier_one() -> None:
    router = make_router(deployment("busy", max_in_flight=10),
                         deployment("idle", max_in_flight=10),
                         policy=GroupPolicy(strategy="least-busy"))
    held = [lease_on(router, "busy") for _ in range(5)] + [lease_on(router, "idle")]

    lease = router.acquire(GROUP)

    assert isinstance(lease, Lease)
    assert lease.deployment.id == "idle"
    assert len(held) == 6


def test_least_busy_counts_unlimited_slots_as_a_large_capacity() -> None:
    router = make_router(deployment("unlimited", max_in_flight=0),
                         deployment("small", max_in_flight=4),
                         policy=GroupPolicy(strategy="least-busy"))
    held = [lease_on(router, "unlimited") for _ in range(5)] + [lease_on(router, "small")]

    lease = router.acquire(GROUP)

    assert isinstance(lease, Lease)
    assert lease.deployment.id == "unlimited"
    assert len(held) == 6


def test_choose_rejects_an_empty_candidate_list() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        choose("weighted", [], random.Random(1), explore_ratio=0.05, tie_buffer=0.1)


def test_choose_throughput_prefers_the_highest_rate() -> None:
    slow = Candidate(deployment("slow"), tokens_per_s=10.0)
    fast = Candidate(deployment("fast"), tokens_per_s=50.0)

    chosen = choose("throughput", [slow, fast], random.Random(1), explore_ratio=0.0,
                    tie_buffer=0.1)

    assert chosen is fast
