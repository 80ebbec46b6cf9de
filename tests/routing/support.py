"""Builders shared by the routing tests: routers on a fake clock, leases on a chosen deployment."""

from __future__ import annotations

import random

from routing import (
    AttemptReport,
    CooldownStarted,
    Deployment,
    DeploymentSnapshot,
    FakeClock,
    GroupPolicy,
    Lease,
    Outcome,
    Router,
)

GROUP = "model-x"


def deployment(deployment_id: str, **fields: object) -> Deployment:
    """A deployment of `GROUP`."""
    return Deployment(id=deployment_id, model_group=GROUP, **fields)  # type: ignore[arg-type]


def make_router(*deployments: Deployment, policy: GroupPolicy | None = None,
                clock: FakeClock | None = None, seed: int = 7) -> Router:
    """A router over one group `GROUP` with a fixed seed."""
    return Router({GROUP: deployments}, {GROUP: policy or GroupPolicy()},
                  clock or FakeClock(), random.Random(seed))


def record_cooldowns(router: Router) -> list[CooldownStarted]:
    """Collect every cooldown the router announces."""
    events: list[CooldownStarted] = []
    router.add_cooldown_listener(events.append)
    return events


def lease_on(router: Router, deployment_id: str, estimated_tokens: int = 0) -> Lease:
    """A lease on exactly ``deployment_id`` (every other deployment is excluded)."""
    others = frozenset(d.id for d in router.deployments(GROUP) if d.id != deployment_id)
    lease = router.acquire(GROUP, others, estimated_tokens)
    assert isinstance(lease, Lease), lease
    assert lease.deployment.id == deployment_id
    return lease


def success(first_output_s: float = 0.5, last_chunk_s: float = 1.5,
            output_tokens: int = 100, input_tokens: int = 0) -> AttemptReport:
    """A successful attempt's report."""
    return AttemptReport(Outcome.SUCCESS, status=200, first_output_s=first_output_s,
                         last_chunk_s=last_chunk_s, input_tokens=input_tokens,
                         output_tokens=output_tokens)


ERROR = AttemptReport(Outcome.ERROR, status=500)


def serve(router: Router, deployment_id: str, report: AttemptReport, times: int = 1) -> None:
    """Run ``times`` attempts on ``deployment_id`` that end with ``report``."""
    for _ in range(times):
        assert lease_on(router, deployment_id).release(report)


def pick_counts(router: Router, picks: int) -> dict[str, int]:
    """How often each deployment is chosen over ``picks`` acquisitions (released at once)."""
    counts = {d.id: 0 for d in router.deployments(GROUP)}
    for _ in range(picks):
        lease = router.acquire(GROUP)
        assert isinstance(lease, Lease), lease
        counts[lease.deployment.id] += 1
        lease.release(AttemptReport(Outcome.CANCELLED))
    return counts


def state_of(router: Router, deployment_id: str) -> DeploymentSnapshot:
    """The snapshot of one deployment."""
    return next(s for s in router.snapshot() if s.id == deployment_id)
