"""The retry budget: retries and hedges together stay within a share of first attempts."""

from __future__ import annotations

from routing.clock import Clock
from routing.window import SlidingWindow


class RetryBudget:
    """Allows at most ``ratio`` extra attempts per first attempt, over a sliding window.

    The ``floor`` lets a quiet gateway still retry a few times: without it the
    first failure after an idle spell could never be retried.
    """

    def __init__(self, ratio: float, clock: Clock, window_s: float = 10.0,
                 floor: int = 3) -> None:
        """A budget of ``ratio * first attempts + floor`` extra attempts per ``window_s``.

        Raises:
            ValueError: ``ratio`` or ``floor`` is negative, or ``window_s`` is not positive.
        """
        if ratio < 0 or floor < 0 or window_s <= 0:
            raise ValueError(f"need ratio >= 0, floor >= 0, window_s > 0; got "
                             f"{ratio}, {floor}, {window_s}")
        self._ratio = ratio
        self._floor = floor
        self._clock = clock
        self._first_attempts = SlidingWindow(span_s=window_s)
        self._spent = SlidingWindow(span_s=window_s)

    def record_first_attempt(self) -> None:
        """Count a request's first attempt, which earns budget for retries."""
        self._first_attempts.add(self._clock.now(), 1)

    def try_spend(self) -> bool:
        """Ask for one retry or hedge; True (and counted) when the budget allows it."""
        now = self._clock.now()
        allowed = self._ratio * self._first_attempts.total(now) + self._floor
        if self._spent.total(now) + 1 > allowed:
            return False
        self._spent.add(now, 1)
        return True
