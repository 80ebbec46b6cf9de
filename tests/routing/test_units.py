"""Small units: clock, outcomes, settings, decaying averages, sliding windows, purity."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

import routing
from routing import (
    STRATEGY_NAMES,
    AttemptReport,
    CooldownSettings,
    Deployment,
    FakeClock,
    GroupPolicy,
    Outcome,
    SystemClock,
)
from routing.cooldown import backoff_seconds
from routing.stats import DecayingAverage
from routing.strategies import STRATEGIES
from routing.window import SlidingWindow

ROUTING_DIR = Path(routing.__file__).parent


def test_fake_clock_starts_at_1000_and_only_moves_forward() -> None:
    clock = FakeClock()
    clock.advance(2.5)

    assert (clock.now(), FakeClock(start=5.0).now()) == (1002.5, 5.0)
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)


def test_system_clock_is_monotonic() -> None:
    clock = SystemClock()
    first = clock.now()

    assert clock.now() >= first


def test_failure_outcomes() -> None:
    failures = {outcome for outcome in Outcome if outcome.is_failure}

    assert failures == {Outcome.ERROR, Outcome.TIMEOUT, Outcome.RATE_LIMITED, Outcome.STUCK}


def test_every_strategy_name_has_a_strategy() -> None:
    assert set(STRATEGIES) == STRATEGY_NAMES


@pytest.mark.parametrize(("build", "message"), [
    (lambda: GroupPolicy(strategy="fastest"), "strategy must be one of"),
    (lambda: CooldownSettings(base_s=60, max_s=30), "max_s"),
    (lambda: CooldownSettings(allowed_fails=0), "allowed_fails"),
    (lambda: GroupPolicy(explore_ratio=1.5), "explore_ratio"),
    (lambda: Deployment("a", "m", weight=0), "weight"),
    (lambda: Deployment("a", "m", rpm=0), "rpm"),
    (lambda: AttemptReport(Outcome.SUCCESS, output_tokens=-1), "output_tokens"),
])
def test_invalid_settings_are_refused(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_backoff_doubles_and_caps() -> None:
    settings = CooldownSettings(base_s=30, max_s=600)

    assert [backoff_seconds(n, settings) for n in (1, 2, 3, 5, 6, 1000)] == [
        30, 60, 120, 480, 600, 600]


def test_a_sample_one_half_life_old_weighs_half_as_much() -> None:
    average = DecayingAverage()
    average.add(1.0, now=0.0, half_life_s=60)
    average.add(4.0, now=60.0, half_life_s=60)

    # weights 0.5 and 1: (0.5 * 1 + 1 * 4) / 1.5
    assert average.value == pytest.approx(3.0)


def test_a_decaying_average_goes_stale_after_three_half_lives() -> None:
    average = DecayingAverage()
    average.add(2.0, now=0.0, half_life_s=10)

    assert (average.fresh_value(30.0, 10), average.fresh_value(30.1, 10)) == (2.0, None)


def test_a_sliding_window_forgets_after_its_span() -> None:
    window = SlidingWindow(span_s=60)
    window.add(0.0, 5)
    window.add(10.0, 7)

    assert (window.total(59.9), window.total(60.0), window.total(70.0)) == (12, 7, 0)


def test_a_sliding_window_says_when_it_drops_below_a_limit() -> None:
    window = SlidingWindow(span_s=60)
    window.add(0.0, 5)
    window.add(10.0, 7)

    assert window.seconds_until_at_most(7, now=20.0) == 40.0
    assert window.seconds_until_at_most(0, now=20.0) == 50.0
    assert window.seconds_until_at_most(12, now=20.0) == 0.0
    assert window.seconds_until_at_most(-1, now=20.0) is None


def test_close_additions_share_a_bucket_that_expires_with_the_latest() -> None:
    window = SlidingWindow(span_s=60, resolution_s=1.0)
    window.add(0.0, 1)
    window.add(0.5, 1)

    assert (window.total(60.0), window.total(60.5)) == (2, 0)


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", sorted(ROUTING_DIR.rglob("*.py")), ids=lambda p: p.name)
def test_routing_stays_pure(path: Path) -> None:
    imported = _imported_modules(path)
    allowed_time = {"time"} if path.name == "clock.py" else set()

    assert imported & ({"aiohttp", "asyncio", "hopbase", "time"} - allowed_time) == set()
