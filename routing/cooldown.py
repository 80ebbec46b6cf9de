"""The cooldown policy: when failures take a deployment out of rotation, and how it returns.

A deployment cools down when

- ``allowed_fails`` failures (errors, timeouts, stuck streams, 429s) fall inside
  ``window_s``: ``base_s * 2 ** (consecutive - 1)`` seconds, capped at ``max_s``,
  and at least the upstream's Retry-After when the last failure carried one;
- the upstream answers 429: at once, for its Retry-After (capped at ``max_s``),
  or without one for the doubling cooldown above;
- the upstream refuses the deployment's key (401/403): at once, for ``max_s``.

These never cool a deployment down, never count as failures and only give the
in-flight slot back:

- a success;
- a client disconnect, and any other client-side cancellation (including the
  losing attempt of a hedge);
- an upstream rejection of the request itself, 400/404/413/422 (``REJECTED``):
  the request is at fault, not the deployment.

When a cooldown ends the deployment is half-open: exactly one trial attempt may
be in flight. A successful trial clears the failure count and the consecutive
counter; a failed trial starts the next, longer cooldown. A trial that is
cancelled or rejected proves nothing, so the deployment stays half-open.

A cooldown only ever grows: a later, shorter Retry-After never shortens it.
Failures of attempts that started before the running cooldown (stragglers) are
stale evidence: they may lengthen it (429 Retry-After, refused key) but never
count towards the next one.

With several replicas, a cooldown another replica started is imposed here as it
is (`CooldownState.impose`): it may lengthen the running one, never shorten it,
and it makes attempts already in flight stragglers, a half-open trial included.
Failures the other replicas counted in their windows add to this one's count.
"""

from __future__ import annotations

import collections
import enum

import attrs

from routing.outcome import AttemptReport, Outcome
from routing.policy import CooldownSettings

_MAX_DOUBLINGS = 60  # 2**60 times any sane base_s is past any max_s; avoids huge ints


class Phase(enum.Enum):
    """Where a deployment stands in the cooldown cycle."""

    HEALTHY = "healthy"
    COOLING = "cooling"
    HALF_OPEN = "half_open"


@attrs.frozen
class CooldownStart:
    """A cooldown that just began (or, after a failed trial, the next one)."""

    reason: str
    seconds: float
    consecutive: int


@attrs.frozen
class Ticket:
    """What the cooldown state needs to remember about one attempt it let through."""

    trial: bool
    epoch: int


def backoff_seconds(consecutive: int, settings: CooldownSettings) -> float:
    """The length of the ``consecutive``-th cooldown in a row: doubling, capped."""
    doublings = min(max(consecutive - 1, 0), _MAX_DOUBLINGS)
    return min(settings.max_s, settings.base_s * 2**doublings)


@attrs.define
class CooldownState:
    """The failure window, running cooldown and half-open trial of one deployment."""

    _failures: collections.deque[float] = attrs.field(factory=collections.deque, init=False)
    _consecutive: int = attrs.field(default=0, init=False)
    _until: float = attrs.field(default=float("-inf"), init=False)
    _reason: str | None = attrs.field(default=None, init=False)
    _awaiting_trial: bool = attrs.field(default=False, init=False)
    _trial_in_flight: bool = attrs.field(default=False, init=False)
    # Bumped by each cooldown, so attempts started before it can be told apart.
    _epoch: int = attrs.field(default=0, init=False)

    @property
    def consecutive(self) -> int:
        """Cooldowns in a row since the last successful trial."""
        return self._consecutive

    @property
    def reason(self) -> str | None:
        """Why the running or last uncleared cooldown started; None when healthy."""
        return self._reason

    @property
    def trial_in_flight(self) -> bool:
        """True while the half-open trial attempt is out."""
        return self._trial_in_flight

    def phase(self, now: float) -> Phase:
        """Healthy, cooling, or half-open (cooldown over, trial not yet passed)."""
        if now < self._until:
            return Phase.COOLING
        return Phase.HALF_OPEN if self._awaiting_trial else Phase.HEALTHY

    def seconds_left(self, now: float) -> float:
        """Seconds until the running cooldown ends; 0 when none runs."""
        return max(0.0, self._until - now)

    def failures_in_window(self, now: float, settings: CooldownSettings) -> int:
        """Failures counted towards the next cooldown (on this replica)."""
        self._forget_old_failures(now, settings)
        return len(self._failures)

    def begin(self, now: float) -> Ticket:
        """Let one attempt through; when half-open it becomes the one trial."""
        trial = self.phase(now) is Phase.HALF_OPEN
        if trial:
            self._trial_in_flight = True
        return Ticket(trial=trial, epoch=self._epoch)

    def finish(self, ticket: Ticket, report: AttemptReport, now: float,
               settings: CooldownSettings, remote_failures: int = 0) -> CooldownStart | None:
        """Apply one attempt's outcome; returns the cooldown it started, if any.

        ``remote_failures`` are the failures other replicas count in their windows.
        """
        if ticket.trial:
            self._trial_in_flight = False
        if not report.outcome.is_failure:
            # a trial that started before an imposed cooldown says nothing about it
            if ticket.trial and report.outcome is Outcome.SUCCESS and ticket.epoch == self._epoch:
                self._clear()
            return None
        if ticket.trial:
            seconds = max(backoff_seconds(self._consecutive + 1, settings),
                          _demanded_seconds(report, settings) or 0.0)
            return self._start(now, "auth" if report.auth_failure else "trial_failed", seconds)
        if ticket.epoch != self._epoch and self.phase(now) is not Phase.HEALTHY:
            self._lengthen(now, _demanded_seconds(report, settings))
            return None
        return self._fail(report, now, settings, remote_failures)

    def impose(self, now: float, until: float, reason: str, consecutive: int) -> bool:
        """Cool down until ``until``, as another replica decided; True when that lengthened it.

        Nothing changes when the running cooldown already lasts as long; otherwise the
        cooldown counts as this deployment's ``consecutive``-th in a row (or more) and
        the failures counted so far are spent on it.
        """
        if until <= max(now, self._until):
            return False
        self._consecutive = max(self._consecutive, consecutive)
        self._epoch += 1
        self._until = until
        self._reason = reason
        self._awaiting_trial = True
        self._failures.clear()
        return True

    def _fail(self, report: AttemptReport, now: float, settings: CooldownSettings,
              remote_failures: int) -> CooldownStart | None:
        """A failure of an attempt on a healthy deployment."""
        demanded = _demanded_seconds(report, settings)
        if report.auth_failure:
            return self._start(now, "auth", settings.max_s)
        if report.outcome is Outcome.RATE_LIMITED:
            if demanded is None:
                demanded = backoff_seconds(self._consecutive + 1, settings)
            return self._start(now, "rate_limited", demanded)
        self._forget_old_failures(now, settings)
        self._failures.append(now)
        if len(self._failures) + remote_failures < settings.allowed_fails:
            return None
        seconds = max(backoff_seconds(self._consecutive + 1, settings), demanded or 0.0)
        return self._start(now, "failures", seconds)

    def _start(self, now: float, reason: str, seconds: float) -> CooldownStart:
        self._consecutive += 1
        self._epoch += 1
        self._until = max(self._until, now + seconds)
        self._reason = reason
        self._awaiting_trial = True
        self._failures.clear()
        return CooldownStart(reason, self._until - now, self._consecutive)

    def _lengthen(self, now: float, seconds: float | None) -> None:
        if seconds is not None:
            self._until = max(self._until, now + seconds)

    def _clear(self) -> None:
        # The trial was sent after every straggler, so its success outweighs a
        # straggler's Retry-After that lengthened the cooldown meanwhile.
        self._until = float("-inf")
        self._failures.clear()
        self._consecutive = 0
        self._reason = None
        self._awaiting_trial = False

    def _forget_old_failures(self, now: float, settings: CooldownSettings) -> None:
        while self._failures and self._failures[0] <= now - settings.window_s:
            self._failures.popleft()


def _demanded_seconds(report: AttemptReport, settings: CooldownSettings) -> float | None:
    """The cooldown the upstream itself asked for: max_s for a refused key, or Retry-After."""
    if report.auth_failure:
        return settings.max_s
    if report.retry_after_s is not None:
        return min(report.retry_after_s, settings.max_s)
    return None
