"""The retry budget: ratio times first attempts plus a floor, over a sliding window."""

from __future__ import annotations

import pytest

from routing import FakeClock, RetryBudget


def spend_all(budget: RetryBudget, limit: int = 100) -> int:
    granted = 0
    while granted < limit and budget.try_spend():
        granted += 1
    return granted


def test_a_quiet_gateway_may_still_spend_the_floor() -> None:
    budget = RetryBudget(ratio=0.2, clock=FakeClock(), floor=3)

    assert spend_all(budget) == 3


def test_first_attempts_earn_ratio_extra_attempts() -> None:
    budget = RetryBudget(ratio=0.2, clock=FakeClock(), floor=3)
    for _ in range(20):
        budget.record_first_attempt()

    assert spend_all(budget) == 7  # 0.2 * 20 + 3


def test_the_budget_refills_as_the_window_slides() -> None:
    clock = FakeClock()
    budget = RetryBudget(ratio=0.5, clock=clock, window_s=10.0, floor=1)
    for _ in range(4):
        budget.record_first_attempt()
    assert spend_all(budget) == 3

    clock.advance(9.9)
    assert budget.try_spend() is False
    clock.advance(0.1)
    assert spend_all(budget) == 1  # the first attempts expired too: the floor only


def test_a_refused_spend_is_not_counted() -> None:
    budget = RetryBudget(ratio=1.0, clock=FakeClock(), floor=0)
    assert budget.try_spend() is False

    budget.record_first_attempt()

    assert (budget.try_spend(), budget.try_spend()) == (True, False)


def test_nonsense_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="ratio"):
        RetryBudget(ratio=-0.1, clock=FakeClock())
