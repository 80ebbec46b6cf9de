"""What replicas tell each other about a deployment: its load and its speed.

With a shared state backend every replica routes on its own `DeploymentState`
and adds what the other replicas last reported (the *remote view*), which a
background task outside routing keeps in sync. These are the plain values that
travel: routing never learns where they came from.
"""

from __future__ import annotations

from collections.abc import Iterable
from statistics import fmean

import attrs

_non_negative = attrs.validators.ge(0)


@attrs.frozen
class Load:
    """One or more replicas' use of one deployment.

    Attributes:
        in_flight: attempts holding a slot.
        rpm: attempts started during the last minute.
        tpm: tokens used during the last minute, plus those reserved by attempts
            in flight (so a ceiling also counts what is about to be used).
        failures_in_window: failures counted towards the next cooldown.
    """

    in_flight: int = attrs.field(default=0, validator=_non_negative)
    rpm: int = attrs.field(default=0, validator=_non_negative)
    tpm: int = attrs.field(default=0, validator=_non_negative)
    failures_in_window: int = attrs.field(default=0, validator=_non_negative)

    def __add__(self, other: Load) -> Load:
        """The combined load of two sets of replicas."""
        return Load(
            in_flight=self.in_flight + other.in_flight,
            rpm=self.rpm + other.rpm,
            tpm=self.tpm + other.tpm,
            failures_in_window=self.failures_in_window + other.failures_in_window,
        )

    def frees_capacity_of(self, previous: Load) -> bool:
        """Whether moving from ``previous`` to this load frees a slot, rpm or tpm."""
        return (self.in_flight < previous.in_flight or self.rpm < previous.rpm
                or self.tpm < previous.tpm)


@attrs.frozen
class SpeedEstimate:
    """Fresh estimates of one deployment's speed; None where nothing recent was measured.

    Attributes:
        first_output_s: expected upstream seconds to the first output.
        tokens_per_s: expected output tokens per second.
    """

    first_output_s: float | None = None
    tokens_per_s: float | None = None

    @classmethod
    def mean(cls, estimates: Iterable[SpeedEstimate]) -> SpeedEstimate:
        """The mean of each estimate over the replicas that have one."""
        chosen = list(estimates)
        first_outputs = [e.first_output_s for e in chosen if e.first_output_s is not None]
        speeds = [e.tokens_per_s for e in chosen if e.tokens_per_s is not None]
        return cls(
            first_output_s=fmean(first_outputs) if first_outputs else None,
            tokens_per_s=fmean(speeds) if speeds else None,
        )
