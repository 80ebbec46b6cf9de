"""Decaying per-deployment estimates of first-output time and output tokens per second.

Only successful attempts feed them: a timeout or a failure says nothing about how
fast the deployment answers when it works, and cooldowns handle failures.
"""

from __future__ import annotations

import collections
import math

import attrs

from routing.outcome import AttemptReport, Outcome

STALE_AFTER_HALF_LIVES = 3.0
PERCENTILE_SAMPLES = 200


@attrs.define
class DecayingAverage:
    """An average whose samples lose half their weight every half-life.

    After a quiet spell the old samples weigh almost nothing, so the first new
    sample dominates: a recovered deployment's estimate recovers at once.
    """

    _value: float = attrs.field(default=0.0, init=False)
    _weight: float = attrs.field(default=0.0, init=False)
    _updated_at: float | None = attrs.field(default=None, init=False)

    @property
    def value(self) -> float | None:
        """The current average, or None before the first sample."""
        return None if self._updated_at is None else self._value

    @property
    def updated_at(self) -> float | None:
        """When the latest sample arrived, or None before the first."""
        return self._updated_at

    def add(self, sample: float, now: float, half_life_s: float) -> None:
        """Blend ``sample`` in, after decaying the weight of everything before it."""
        weight = 0.0
        if self._updated_at is not None:
            elapsed = max(0.0, now - self._updated_at)
            weight = self._weight * 0.5 ** (elapsed / half_life_s)
        weight += 1.0
        self._value += (sample - self._value) / weight
        self._weight = weight
        self._updated_at = now

    def fresh_value(self, now: float, half_life_s: float) -> float | None:
        """The average, or None when there is no sample from the last three half-lives."""
        if self._updated_at is None:
            return None
        if now - self._updated_at > STALE_AFTER_HALF_LIVES * half_life_s:
            return None
        return self._value


@attrs.define
class Estimates:
    """What routing knows about one deployment's speed."""

    first_output: DecayingAverage = attrs.field(factory=DecayingAverage, init=False)
    tokens_per_s: DecayingAverage = attrs.field(factory=DecayingAverage, init=False)
    _recent_first_outputs: collections.deque[float] = attrs.field(
        factory=lambda: collections.deque(maxlen=PERCENTILE_SAMPLES), init=False
    )

    def record(self, report: AttemptReport, now: float, half_life_s: float) -> None:
        """Learn from a finished attempt; anything but a success is ignored."""
        if report.outcome is not Outcome.SUCCESS:
            return
        if report.first_output_s is not None:
            self.first_output.add(report.first_output_s, now, half_life_s)
            self._recent_first_outputs.append(report.first_output_s)
        throughput = _throughput(report)
        if throughput is not None:
            self.tokens_per_s.add(throughput, now, half_life_s)

    def first_output_percentile(self, percentile: float) -> float | None:
        """The nearest-rank ``percentile`` (0-100) of recent first-output times.

        Raises:
            ValueError: ``percentile`` is outside 0-100.
        """
        if not 0.0 <= percentile <= 100.0:
            raise ValueError(f"percentile must be within 0-100, got {percentile}")
        if not self._recent_first_outputs:
            return None
        ordered = sorted(self._recent_first_outputs)
        rank = max(1, math.ceil(percentile / 100.0 * len(ordered)))
        return ordered[rank - 1]


def _throughput(report: AttemptReport) -> float | None:
    """Output tokens per second of streaming, from first output to last chunk."""
    if report.first_output_s is None or report.last_chunk_s is None:
        return None
    span = report.last_chunk_s - report.first_output_s
    if span <= 0 or report.output_tokens <= 0:
        return None
    return report.output_tokens / span
