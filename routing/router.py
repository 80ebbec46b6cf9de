"""The router: hands out leases on eligible deployments and keeps their live state.

Pure and synchronous: the async side calls `Router.acquire`, queues on
`NoCapacity`, and releases every lease in a ``finally``. Time and randomness are
injected, so every decision is reproducible in tests.

Replicas that share state keep routing local: a task outside routing exports this
replica's load and estimates (`Router.local_load`, `Router.local_estimates`) and
feeds back the sum of the others' (`Router.set_remote_load`,
`Router.set_remote_estimates`) and the cooldowns they started
(`Router.impose_cooldown`). No request waits on that exchange.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence

import attrs

from routing import strategies
from routing.clock import Clock
from routing.cooldown import CooldownStart
from routing.deployment import (
    UNKNOWN_WAIT_S,
    Availability,
    Check,
    Deployment,
    DeploymentSnapshot,
    DeploymentState,
    StartedAttempt,
)
from routing.lease import Lease
from routing.outcome import AttemptReport
from routing.policy import GroupPolicy
from routing.remote import Load, SpeedEstimate

_DEFAULT_POLICY = GroupPolicy()


@attrs.frozen
class NoCapacity:
    """Every usable deployment is at its slot, rpm or tpm ceiling (or all are excluded).

    Attributes:
        retry_after_s: best estimate of when capacity frees up, at least 1 s.
    """

    retry_after_s: float


@attrs.frozen
class AllCoolingDown:
    """Every deployment of the group that may still be tried is cooling down.

    Attributes:
        retry_after_s: seconds until the first of them returns.
    """

    retry_after_s: float


@attrs.frozen
class CooldownStarted:
    """A deployment just went into cooldown.

    Attributes:
        deployment: the deployment cooling down.
        reason: ``failures``, ``rate_limited``, ``auth`` or ``trial_failed``.
        seconds: how long it will cool down.
        consecutive: cooldowns in a row, this one included.
    """

    deployment: Deployment
    reason: str
    seconds: float
    consecutive: int


def _validate(groups: Mapping[str, Sequence[Deployment]]) -> None:
    """Raise ValueError listing every misplaced or duplicate deployment."""
    problems = []
    seen: set[str] = set()
    for group, deployments in groups.items():
        for deployment in deployments:
            if deployment.model_group != group:
                problems.append(f"deployment {deployment.id!r} names model_group "
                                f"{deployment.model_group!r} but is listed under {group!r}")
            if deployment.id in seen:
                problems.append(f"deployment id {deployment.id!r} is used more than once")
            seen.add(deployment.id)
    if problems:
        raise ValueError("; ".join(problems))


class Router:
    """Chooses deployments by each group's policy and tracks their live state."""

    def __init__(self, groups: Mapping[str, Sequence[Deployment]],
                 policies: Mapping[str, GroupPolicy], clock: Clock,
                 rng: random.Random) -> None:
        """Route over ``groups`` (model group -> its deployments).

        A group without an entry in ``policies`` uses `GroupPolicy` defaults.

        Raises:
            ValueError: a deployment is listed under a group other than its own,
                or an id appears twice.
        """
        self._clock = clock
        self._rng = rng
        self._groups: dict[str, tuple[Deployment, ...]] = {}
        self._policies: dict[str, GroupPolicy] = {}
        self._states: dict[str, DeploymentState] = {}
        self._release_listeners: list[Callable[[str], None]] = []
        self._cooldown_listeners: list[Callable[[CooldownStarted], None]] = []
        self.reconfigure(groups, policies)

    def reconfigure(self, groups: Mapping[str, Sequence[Deployment]],
                    policies: Mapping[str, GroupPolicy]) -> None:
        """Switch to a reloaded config.

        Deployments whose id survives keep their state (cooldown, estimates,
        windows, outstanding leases); removed ones vanish, and their outstanding
        leases still release safely without touching anything live.

        Raises:
            ValueError: as for the constructor; the old config then stays in force.
        """
        _validate(groups)
        states: dict[str, DeploymentState] = {}
        for deployments in groups.values():
            for deployment in deployments:
                state = self._states.get(deployment.id)
                if state is None:
                    state = DeploymentState(deployment)
                state.deployment = deployment
                states[deployment.id] = state
        self._groups = {group: tuple(deployments) for group, deployments in groups.items()}
        self._policies = dict(policies)
        self._states = states

    def acquire(self, model_group: str, exclude: frozenset[str] = frozenset(),
                estimated_tokens: int = 0) -> Lease | NoCapacity | AllCoolingDown:
        """A lease on an eligible deployment of ``model_group``, or why there is none.

        Args:
            model_group: the group to route within.
            exclude: ids of deployments that already failed in this request.
            estimated_tokens: expected input + output tokens, for tpm ceilings.

        Raises:
            KeyError: ``model_group`` is unknown.
            ValueError: ``estimated_tokens`` is negative.
        """
        if estimated_tokens < 0:
            raise ValueError(f"estimated_tokens must be >= 0, got {estimated_tokens}")
        deployments = self._groups[model_group]
        policy = self.policy(model_group)
        now = self._clock.now()
        eligible: list[DeploymentState] = []
        checks: list[Check] = []
        for deployment in deployments:
            if deployment.id in exclude:
                continue
            state = self._states[deployment.id]
            check = state.check(now, estimated_tokens)
            if check.availability is Availability.ELIGIBLE:
                eligible.append(state)
            checks.append(check)
        if not eligible:
            return _refusal(checks)
        chosen = self._choose(eligible, policy, now)
        return self._lease(chosen, now, estimated_tokens)

    def policy(self, model_group: str) -> GroupPolicy:
        """The policy in force for ``model_group`` (defaults when none was configured)."""
        return self._policies.get(model_group, _DEFAULT_POLICY)

    def groups(self) -> list[str]:
        """The configured model groups, in config order."""
        return list(self._groups)

    def deployments(self, model_group: str) -> Sequence[Deployment]:
        """The deployments of ``model_group``; KeyError when it is unknown."""
        return self._groups[model_group]

    def snapshot(self) -> list[DeploymentSnapshot]:
        """The live state of every deployment, in config order."""
        now = self._clock.now()
        return [self._states[deployment.id].snapshot(now, self.policy(group))
                for group, deployments in self._groups.items()
                for deployment in deployments]

    def first_output_percentile(self, deployment_id: str, percentile: float) -> float | None:
        """A percentile (0-100) of the deployment's recent successful first-output times.

        None when it has no samples yet or is not (any longer) configured.

        Raises:
            ValueError: ``percentile`` is outside 0-100.
        """
        state = self._states.get(deployment_id)
        if state is None:
            if not 0.0 <= percentile <= 100.0:
                raise ValueError(f"percentile must be within 0-100, got {percentile}")
            return None
        return state.first_output_percentile(percentile)

    def add_release_listener(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(model_group)`` whenever capacity may have freed up (must not raise).

        That is after every lease release, and when the other replicas' reported
        load of one of the group's deployments drops.
        """
        self._release_listeners.append(callback)

    def add_cooldown_listener(self, callback: Callable[[CooldownStarted], None]) -> None:
        """Call ``callback(event)`` whenever a deployment starts cooling down (must not raise)."""
        self._cooldown_listeners.append(callback)

    def impose_cooldown(self, deployment_id: str, until: float, reason: str,
                        consecutive: int) -> bool:
        """Cool a deployment down until ``until`` (router clock), as another replica decided.

        A cooldown that already lasts as long is left alone, so a later, shorter one
        never shortens it. The cooldown listeners are not called: the replica that
        started the cooldown announced it, and announcing it here would echo it back.

        Returns:
            True when a cooldown started or grew; False otherwise, and for an id
            this replica does not route to (its config may differ during a reload).
        """
        state = self._states.get(deployment_id)
        if state is None:
            return False
        return state.impose_cooldown(self._clock.now(), until, reason, consecutive)

    def set_remote_load(self, deployment_id: str, load: Load) -> None:
        """Set the other replicas' combined load of a deployment (unknown ids are ignored).

        It adds to this replica's own counts against ``max_in_flight``, ``rpm``, ``tpm``
        and ``allowed_fails``, and in snapshots. When it drops, the release listeners
        hear of the deployment's group, so requests queued for capacity try again.
        """
        state = self._states.get(deployment_id)
        if state is not None and state.set_remote_load(load):
            self._notify_release(state.deployment.model_group)

    def set_remote_estimates(self, deployment_id: str, speed: SpeedEstimate) -> None:
        """Set the other replicas' fresh estimates, used where this replica has none."""
        state = self._states.get(deployment_id)
        if state is not None:
            state.set_remote_estimates(speed)

    def clear_remote(self) -> None:
        """Forget every other replica's load and estimates (the shared state is out of reach)."""
        for deployment_id in list(self._states):
            self.set_remote_load(deployment_id, Load())
            self.set_remote_estimates(deployment_id, SpeedEstimate())

    def local_load(self) -> dict[str, Load]:
        """This replica's own load of every deployment, by id."""
        now = self._clock.now()
        return {
            deployment_id: state.local_load(now, self.policy(state.deployment.model_group).cooldown)
            for deployment_id, state in self._states.items()
        }

    def local_estimates(self) -> dict[str, SpeedEstimate]:
        """This replica's own fresh estimates of every deployment, by id."""
        now = self._clock.now()
        return {
            deployment_id: state.local_estimates(
                now, self.policy(state.deployment.model_group).half_life_s)
            for deployment_id, state in self._states.items()
        }

    def running_cooldowns(self) -> list[CooldownStarted]:
        """The cooldowns running now, wherever they started; ``seconds`` is the time left."""
        now = self._clock.now()
        running = []
        for state in self._states.values():
            cooldown = state.running_cooldown(now)
            if cooldown is not None:
                running.append(CooldownStarted(state.deployment, cooldown.reason,
                                               cooldown.seconds, cooldown.consecutive))
        return running

    def _notify_release(self, model_group: str) -> None:
        for listener in self._release_listeners:
            listener(model_group)

    def _choose(self, eligible: Sequence[DeploymentState], policy: GroupPolicy,
                now: float) -> DeploymentState:
        by_id = {state.deployment.id: state for state in eligible}
        candidates = [
            strategies.Candidate(
                deployment=state.deployment,
                in_flight=state.in_flight,
                first_output_s=state.first_output_estimate(now, policy.half_life_s),
                tokens_per_s=state.tokens_per_s_estimate(now, policy.half_life_s),
            )
            for state in eligible
        ]
        chosen = strategies.choose(policy.strategy, candidates, self._rng,
                                   explore_ratio=policy.explore_ratio,
                                   tie_buffer=policy.tie_buffer)
        return by_id[chosen.deployment.id]

    def _lease(self, state: DeploymentState, now: float, estimated_tokens: int) -> Lease:
        attempt = state.start(now, estimated_tokens)
        return Lease(
            deployment=state.deployment,
            acquired_at=now,
            trial=attempt.ticket.trial,
            apply=functools.partial(self._finish, state, attempt),
        )

    def _finish(self, state: DeploymentState, attempt: StartedAttempt,
                report: AttemptReport) -> None:
        deployment = state.deployment
        started = state.finish(attempt, report, self._clock.now(),
                               self.policy(deployment.model_group))
        live = self._states.get(deployment.id) is state
        if started is not None and live:
            self._announce(deployment, started)
        self._notify_release(deployment.model_group)

    def _announce(self, deployment: Deployment, started: CooldownStart) -> None:
        event = CooldownStarted(deployment, started.reason, started.seconds, started.consecutive)
        for listener in self._cooldown_listeners:
            listener(event)


def _refusal(checks: Sequence[Check]) -> NoCapacity | AllCoolingDown:
    """Why no deployment was eligible, given the checks of the non-excluded ones."""
    if not checks:
        return NoCapacity(UNKNOWN_WAIT_S)
    soonest = min(check.wait_s for check in checks)
    if all(check.availability is Availability.COOLING for check in checks):
        return AllCoolingDown(soonest)
    return NoCapacity(max(UNKNOWN_WAIT_S, soonest))
