"""Deployments: the static description from the config, and their live routing state."""

from __future__ import annotations

import enum
import math

import attrs

from routing.cooldown import CooldownStart, CooldownState, Phase, Ticket
from routing.outcome import AttemptReport
from routing.policy import CooldownSettings, GroupPolicy
from routing.remote import Load, SpeedEstimate
from routing.stats import Estimates
from routing.window import SlidingWindow

# How long to suggest waiting when only a release can free capacity (a full
# slot ceiling, a running half-open trial): releases are not predictable.
UNKNOWN_WAIT_S = 1.0


def _positive_weight(_instance: object, _attribute: object, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"weight must be a finite number > 0, got {value}")


def _positive_or_none(_instance: object, attribute: attrs.Attribute[int | None],
                      value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be > 0 when set, got {value}")


@attrs.frozen
class Deployment:
    """One deployment within one model group, as the config describes it.

    Attributes:
        id: unique within the whole config.
        model_group: the model group it serves.
        weight: share of traffic under ``weighted``, tie-breaker elsewhere.
        max_in_flight: concurrent attempts it may serve; 0 means unlimited.
        rpm: attempts it may start per sliding minute, or None for no ceiling.
        tpm: input + output tokens per sliding minute, or None for no ceiling.
    """

    id: str
    model_group: str
    weight: float = attrs.field(default=1.0, validator=_positive_weight)
    max_in_flight: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    rpm: int | None = attrs.field(default=None, validator=_positive_or_none)
    tpm: int | None = attrs.field(default=None, validator=_positive_or_none)


class Availability(enum.Enum):
    """Whether a deployment can take an attempt right now."""

    ELIGIBLE = "eligible"
    COOLING = "cooling"
    BUSY = "busy"  # at a slot, rpm or tpm ceiling, or its half-open trial is out


@attrs.frozen
class Check:
    """A deployment's availability and, unless eligible, how long until that may change."""

    availability: Availability
    wait_s: float = 0.0


@attrs.frozen
class StartedAttempt:
    """What a deployment's state remembers about one attempt until its release."""

    ticket: Ticket
    estimated_tokens: int


@attrs.frozen
class DeploymentSnapshot:
    """The live state of one deployment, for ``GET /admin/deployments`` and metrics.

    ``cooldown_reason`` stays set while half-open (cooldown over, trial not yet
    passed); estimates are None until measured. With a shared state backend the
    counts include what the other replicas last reported, and an estimate this
    replica has not measured recently is theirs.
    """

    model_group: str
    id: str
    in_flight: int
    max_in_flight: int
    cooldown_active: bool
    cooldown_reason: str | None
    cooldown_seconds_left: float
    consecutive_cooldowns: int
    failures_in_window: int
    first_output_s: float | None
    tokens_per_s: float | None
    rpm: int
    tpm: int


@attrs.define
class DeploymentState:
    """The live state of one deployment: slots, cooldown, estimates and rate windows.

    It changes only through `start` and `finish`, which the router calls when a
    lease is acquired and released, and through the remote view: the other
    replicas' load and estimates (`set_remote_load`, `set_remote_estimates`) and
    the cooldowns they started (`impose_cooldown`).
    """

    deployment: Deployment
    _in_flight: int = attrs.field(default=0, init=False)
    _reserved_tokens: int = attrs.field(default=0, init=False)
    _cooldown: CooldownState = attrs.field(factory=CooldownState, init=False)
    _estimates: Estimates = attrs.field(factory=Estimates, init=False)
    _requests: SlidingWindow = attrs.field(factory=SlidingWindow, init=False)
    _tokens: SlidingWindow = attrs.field(factory=SlidingWindow, init=False)
    _remote_load: Load = attrs.field(factory=Load, init=False)
    _remote_speed: SpeedEstimate = attrs.field(factory=SpeedEstimate, init=False)

    @property
    def in_flight(self) -> int:
        """Attempts holding a slot now, on this replica and (as last reported) the others."""
        return self._in_flight + self._remote_load.in_flight

    def check(self, now: float, estimated_tokens: int) -> Check:
        """Whether an attempt of about ``estimated_tokens`` tokens could start now."""
        phase = self._cooldown.phase(now)
        if phase is Phase.COOLING:
            return Check(Availability.COOLING, self._cooldown.seconds_left(now))
        waits = [
            UNKNOWN_WAIT_S if phase is Phase.HALF_OPEN and self._cooldown.trial_in_flight else 0.0,
            UNKNOWN_WAIT_S if 0 < self.deployment.max_in_flight <= self.in_flight else 0.0,
            self._rpm_wait(now),
            self._tpm_wait(now, estimated_tokens),
        ]
        if max(waits) > 0:
            return Check(Availability.BUSY, max(waits))
        return Check(Availability.ELIGIBLE)

    def start(self, now: float, estimated_tokens: int) -> StartedAttempt:
        """Take a slot for one attempt (the half-open trial, if one is due)."""
        self._in_flight += 1
        self._reserved_tokens += estimated_tokens
        self._requests.add(now, 1)
        return StartedAttempt(self._cooldown.begin(now), estimated_tokens)

    def finish(self, attempt: StartedAttempt, report: AttemptReport, now: float,
               policy: GroupPolicy) -> CooldownStart | None:
        """Give the slot back and learn from the outcome; returns a cooldown it started."""
        self._in_flight -= 1
        self._reserved_tokens -= attempt.estimated_tokens
        # The upstream counts tokens however the attempt ended, so the tpm window does too.
        used = report.input_tokens + report.output_tokens
        if used:
            self._tokens.add(now, used)
        self._estimates.record(report, now, policy.half_life_s)
        return self._cooldown.finish(attempt.ticket, report, now, policy.cooldown,
                                     self._remote_load.failures_in_window)

    def impose_cooldown(self, now: float, until: float, reason: str, consecutive: int) -> bool:
        """Cool down until ``until`` as another replica decided; True when that lengthened it."""
        return self._cooldown.impose(now, until, reason, consecutive)

    def set_remote_load(self, load: Load) -> bool:
        """Replace the other replicas' load; True when that frees capacity."""
        previous, self._remote_load = self._remote_load, load
        return load.frees_capacity_of(previous)

    def set_remote_estimates(self, speed: SpeedEstimate) -> None:
        """Replace the other replicas' fresh estimates."""
        self._remote_speed = speed

    def local_load(self, now: float, settings: CooldownSettings) -> Load:
        """This replica's own use of the deployment, for the other replicas."""
        return Load(
            in_flight=self._in_flight,
            rpm=round(self._requests.total(now)),
            tpm=round(self._tokens.total(now)) + self._reserved_tokens,
            failures_in_window=self._cooldown.failures_in_window(now, settings),
        )

    def local_estimates(self, now: float, half_life_s: float) -> SpeedEstimate:
        """This replica's own fresh estimates, for the other replicas."""
        return SpeedEstimate(
            first_output_s=self._estimates.first_output.fresh_value(now, half_life_s),
            tokens_per_s=self._estimates.tokens_per_s.fresh_value(now, half_life_s),
        )

    def running_cooldown(self, now: float) -> CooldownStart | None:
        """The cooldown running now (``seconds`` = seconds left), or None."""
        cooldown = self._cooldown
        if cooldown.phase(now) is not Phase.COOLING or cooldown.reason is None:
            return None
        return CooldownStart(cooldown.reason, cooldown.seconds_left(now), cooldown.consecutive)

    def first_output_estimate(self, now: float, half_life_s: float) -> float | None:
        """Expected seconds to first output, None without a recent measurement anywhere."""
        local = self._estimates.first_output.fresh_value(now, half_life_s)
        return self._remote_speed.first_output_s if local is None else local

    def tokens_per_s_estimate(self, now: float, half_life_s: float) -> float | None:
        """Expected output tokens per second, None without a recent measurement anywhere."""
        local = self._estimates.tokens_per_s.fresh_value(now, half_life_s)
        return self._remote_speed.tokens_per_s if local is None else local

    def first_output_percentile(self, percentile: float) -> float | None:
        """A percentile (0-100) of recent successful first-output times."""
        return self._estimates.first_output_percentile(percentile)

    def snapshot(self, now: float, policy: GroupPolicy) -> DeploymentSnapshot:
        """The state as a value, for the admin API and metrics."""
        cooldown = self._cooldown
        remote = self._remote_load
        return DeploymentSnapshot(
            model_group=self.deployment.model_group,
            id=self.deployment.id,
            in_flight=self.in_flight,
            max_in_flight=self.deployment.max_in_flight,
            cooldown_active=cooldown.phase(now) is Phase.COOLING,
            cooldown_reason=cooldown.reason,
            cooldown_seconds_left=cooldown.seconds_left(now),
            consecutive_cooldowns=cooldown.consecutive,
            failures_in_window=cooldown.failures_in_window(now, policy.cooldown)
            + remote.failures_in_window,
            first_output_s=_shown(self.first_output_estimate(now, policy.half_life_s),
                                  self._estimates.first_output.value),
            tokens_per_s=_shown(self.tokens_per_s_estimate(now, policy.half_life_s),
                                self._estimates.tokens_per_s.value),
            rpm=round(self._requests.total(now)) + remote.rpm,
            tpm=round(self._tokens.total(now)) + remote.tpm,
        )

    def _rpm_wait(self, now: float) -> float:
        if self.deployment.rpm is None:
            return 0.0
        limit = self.deployment.rpm - 1 - self._remote_load.rpm
        wait = self._requests.seconds_until_at_most(limit, now)
        return UNKNOWN_WAIT_S if wait is None else wait

    def _tpm_wait(self, now: float, estimated_tokens: int) -> float:
        tpm = self.deployment.tpm
        if tpm is None:
            return 0.0
        # Only this replica's window can be seen draining: reservations and the
        # other replicas' tokens are fixed until they report again.
        fixed = self._reserved_tokens + self._remote_load.tpm
        committed = self._tokens.total(now) + fixed
        # An idle minute admits any single attempt, however large: otherwise a
        # prompt bigger than the whole tpm ceiling could never be served.
        if committed == 0 or committed + estimated_tokens <= tpm:
            return 0.0
        if fixed:
            limit: float = tpm - fixed - estimated_tokens
        else:
            limit = max(0, tpm - estimated_tokens)
        wait = self._tokens.seconds_until_at_most(limit, now)
        return UNKNOWN_WAIT_S if wait is None else wait


def _shown(fresh: float | None, last: float | None) -> float | None:
    """The estimate to show: the fresh one (this replica's or the others'), else the last."""
    return last if fresh is None else fresh
