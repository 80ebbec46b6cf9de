"""Per model group routing settings: the strategy, its tuning and the cooldown rules."""

from __future__ import annotations

import math

import attrs

STRATEGY_NAMES = frozenset({"weighted", "latency", "throughput", "least-busy"})


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite number > 0, got {value}")


def _max_not_below_base(instance: CooldownSettings, _attribute: object, value: float) -> None:
    if value < instance.base_s:
        raise ValueError(f"max_s ({value}) must be >= base_s ({instance.base_s})")


@attrs.frozen
class CooldownSettings:
    """When failures take a deployment out of rotation, and for how long.

    Attributes:
        allowed_fails: failures inside ``window_s`` that start a cooldown.
        window_s: how far back failures are counted, in seconds.
        base_s: the first cooldown; each consecutive cooldown doubles it.
        max_s: the longest cooldown, also the cooldown for a refused key.
    """

    allowed_fails: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    window_s: float = attrs.field(default=60.0, validator=_positive)
    base_s: float = attrs.field(default=30.0, validator=_positive)
    max_s: float = attrs.field(default=600.0, validator=[_positive, _max_not_below_base])


def _known_strategy(_instance: object, _attribute: object, value: str) -> None:
    if value not in STRATEGY_NAMES:
        raise ValueError(f"strategy must be one of {sorted(STRATEGY_NAMES)}, got {value!r}")


@attrs.frozen
class GroupPolicy:
    """How one model group chooses among its deployments.

    Attributes:
        strategy: ``weighted``, ``latency``, ``throughput`` or ``least-busy``.
        cooldown: the group's cooldown rules.
        explore_ratio: the largest share of picks that go to deployments without
            recent measurements (latency and throughput only), so that a new or
            recovered deployment gets measured.
        tie_buffer: candidates within this fraction of the best estimate are
            near-ties, chosen among by weight so traffic does not herd onto one.
        half_life_s: how fast old samples lose weight. One minute averages over
            enough requests on a busy deployment to smooth out single slow answers,
            yet a deployment that degrades or recovers dominates its estimate
            within two or three minutes; it also matches the default failure
            window and the rpm/tpm window. A sample older than three half-lives
            (weight under 1/8) no longer counts as a measurement.
    """

    strategy: str = attrs.field(default="latency", validator=_known_strategy)
    cooldown: CooldownSettings = attrs.field(factory=CooldownSettings)
    explore_ratio: float = attrs.field(
        default=0.05, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    tie_buffer: float = attrs.field(default=0.1, validator=attrs.validators.ge(0.0))
    half_life_s: float = attrs.field(default=60.0, validator=_positive)
