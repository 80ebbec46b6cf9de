"""A sliding-window sum (requests or tokens per minute) in bounded memory."""

from __future__ import annotations

import collections

import attrs

RATE_WINDOW_S = 60.0


@attrs.define
class _Bucket:
    """Amounts added within one resolution step; it expires with its latest addition."""

    first_at: float
    last_at: float
    amount: float


@attrs.define
class SlidingWindow:
    """The sum of amounts added during the last ``span_s`` seconds.

    Additions within ``resolution_s`` of each other share one bucket, which
    expires with its latest addition: memory stays bounded at a few buckets per
    second of span, and an amount is never forgotten early, so a ceiling checked
    against this sum is never exceeded.
    """

    span_s: float = RATE_WINDOW_S
    resolution_s: float = 0.25
    _buckets: collections.deque[_Bucket] = attrs.field(factory=collections.deque, init=False)
    _total: float = attrs.field(default=0.0, init=False)

    def add(self, now: float, amount: float) -> None:
        """Count ``amount`` at time ``now``."""
        self._expire(now)
        last = self._buckets[-1] if self._buckets else None
        if last is not None and now - last.first_at < self.resolution_s:
            last.last_at = max(last.last_at, now)
            last.amount += amount
        else:
            self._buckets.append(_Bucket(now, now, amount))
        self._total += amount

    def total(self, now: float) -> float:
        """The sum of what was added during the last ``span_s`` seconds."""
        self._expire(now)
        return self._total

    def seconds_until_at_most(self, limit: float, now: float) -> float | None:
        """How long until the sum drops to ``limit`` or below; None if it never will."""
        self._expire(now)
        if self._total <= limit:
            return 0.0
        if limit < 0:
            return None
        remaining = self._total
        for bucket in self._buckets:
            remaining -= bucket.amount
            if remaining <= limit:
                return bucket.last_at + self.span_s - now
        return None

    def _expire(self, now: float) -> None:
        while self._buckets and self._buckets[0].last_at + self.span_s <= now:
            self._total -= self._buckets.popleft().amount
        if not self._buckets:
            self._total = 0.0  # drop float drift once the window is empty
