"""Routing strategies, one pure function each, and the exploration that wraps them.

Each strategy module offers ``choose(candidates, rng, tie_buffer) -> Candidate``
over the eligible deployments. `choose` here adds exploration for the
estimate-based strategies, so that deployments without recent measurements
still get a bounded share of traffic and are measured again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from routing.strategies import latency, least_busy, throughput, weighted
from routing.strategies.candidate import Candidate, weighted_choice

Strategy = Callable[[Sequence[Candidate], random.Random, float], Candidate]

STRATEGIES: dict[str, Strategy] = {
    "weighted": weighted.choose,
    "latency": latency.choose,
    "throughput": throughput.choose,
    "least-busy": least_busy.choose,
}

_ESTIMATES: dict[str, Callable[[Candidate], float | None]] = {
    "latency": lambda candidate: candidate.first_output_s,
    "throughput": lambda candidate: candidate.tokens_per_s,
}


def choose(strategy: str, candidates: Sequence[Candidate], rng: random.Random, *,
           explore_ratio: float, tie_buffer: float) -> Candidate:
    """Pick one of ``candidates`` by ``strategy``, exploring unmeasured ones now and then.

    For ``latency`` and ``throughput``: when every candidate is unmeasured the
    pick goes by weight; when some are, they get the pick (by weight) with
    probability ``explore_ratio`` and otherwise never win.

    Raises:
        KeyError: ``strategy`` is unknown.
        ValueError: ``candidates`` is empty.
    """
    chooser = STRATEGIES[strategy]
    estimate = _ESTIMATES.get(strategy)
    if estimate is None:
        return chooser(candidates, rng, tie_buffer)
    measured = [candidate for candidate in candidates if estimate(candidate) is not None]
    unmeasured = [candidate for candidate in candidates if estimate(candidate) is None]
    if not measured:
        return weighted_choice(unmeasured, rng)
    if unmeasured and rng.random() < explore_ratio:
        return weighted_choice(unmeasured, rng)
    return chooser(measured, rng, tie_buffer)


__all__ = ["STRATEGIES", "Candidate", "Strategy", "choose", "weighted_choice"]
