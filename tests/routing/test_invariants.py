"""Property test: slots and trials stay consistent under any sequence of router operations."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from routing import (
    AttemptReport,
    CooldownSettings,
    FakeClock,
    GroupPolicy,
    Lease,
    Outcome,
    Router,
)
from tests.routing.support import GROUP, deployment

REPORTS = [
    AttemptReport(Outcome.SUCCESS, first_output_s=0.2, last_chunk_s=1.0, output_tokens=20),
    AttemptReport(Outcome.ERROR, status=500),
    AttemptReport(Outcome.TIMEOUT),
    AttemptReport(Outcome.RATE_LIMITED, status=429, retry_after_s=5),
    AttemptReport(Outcome.ERROR, status=401, auth_failure=True),
    AttemptReport(Outcome.REJECTED, status=400),
    AttemptReport(Outcome.CANCELLED, input_tokens=10),
]
IDS = ["a", "b", "c"]

operation = st.one_of(
    st.tuples(st.just("acquire"), st.frozensets(st.sampled_from(IDS)), st.integers(0, 400)),
    st.tuples(st.just("release"), st.integers(0, 50), st.integers(0, len(REPORTS) - 1)),
    st.tuples(st.just("advance"), st.floats(0, 20)),
    st.tuples(st.just("reconfigure"), st.sets(st.sampled_from(IDS), min_size=1)),
)


@settings(max_examples=150, deadline=None, database=None)
@given(st.lists(operation, max_size=60), st.sampled_from(["weighted", "latency", "least-busy"]))
def test_slots_and_trials_stay_consistent(operations: list[tuple], strategy: str) -> None:
    def build(ids: set[str] | list[str]) -> dict[str, list]:
        return {GROUP: [deployment(i, max_in_flight=2, tpm=1000) for i in sorted(ids)]}

    clock = FakeClock()
    policy = GroupPolicy(strategy=strategy, cooldown=CooldownSettings(allowed_fails=2,
                                                                      base_s=3, max_s=10))
    router = Router(build(IDS), {GROUP: policy}, clock, random.Random(3))
    outstanding: list[Lease] = []
    orphans: list[Lease] = []
    for step in operations:
        if step[0] == "acquire":
            result = router.acquire(GROUP, step[1], step[2])
            if isinstance(result, Lease):
                outstanding.append(result)
        elif step[0] == "release" and outstanding:
            lease = outstanding.pop(step[1] % len(outstanding))
            assert lease.release(REPORTS[step[2]]) is True
        elif step[0] == "advance":
            clock.advance(step[1])
        elif step[0] == "reconfigure":
            router.reconfigure(build(step[1]), {GROUP: policy})
            # Leases of removed deployments still release, but into state nobody sees.
            orphans += [lease for lease in outstanding if lease.deployment.id not in step[1]]
            outstanding = [lease for lease in outstanding if lease.deployment.id in step[1]]
        for snapshot in router.snapshot():
            mine = [lease for lease in outstanding if lease.deployment.id == snapshot.id]
            assert snapshot.in_flight == len(mine) <= 2
            assert sum(lease.trial for lease in mine) <= 1
    assert [lease.release(REPORTS[0]) for lease in orphans] == [True] * len(orphans)
