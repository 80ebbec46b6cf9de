"""Injected time for routing: a protocol, the real monotonic clock and a fake one for tests."""

from __future__ import annotations

import time
from typing import Protocol

import attrs


class Clock(Protocol):
    """A source of monotonic seconds; routing never reads the wall clock itself."""

    def now(self) -> float:
        """Monotonic seconds; only differences between two readings mean anything."""
        ...


class SystemClock:
    """The process's monotonic clock (`time.monotonic`)."""

    def now(self) -> float:
        """Monotonic seconds from `time.monotonic`."""
        return time.monotonic()


@attrs.define
class FakeClock:
    """A clock that only moves when a test calls `advance`."""

    _now: float = attrs.field(default=1000.0, alias="start")

    def now(self) -> float:
        """The current fake time in seconds."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``.

        Raises:
            ValueError: ``seconds`` is negative; a monotonic clock never goes back.
        """
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        self._now += seconds
