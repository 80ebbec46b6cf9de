"""The ``least-busy`` strategy: fewest attempts in flight relative to the slot ceiling."""

from __future__ import annotations

import random
from collections.abc import Sequence

from routing.strategies.candidate import Candidate, choose_lowest

# An unlimited deployment is scored as if it had this many slots: busy only
# relative to a large capacity, yet more in flight still means busier.
UNLIMITED_SLOTS = 10_000


def load(candidate: Candidate) -> float:
    """The share of its slots a candidate is using."""
    slots = candidate.deployment.max_in_flight or UNLIMITED_SLOTS
    return candidate.in_flight / slots


def choose(candidates: Sequence[Candidate], rng: random.Random, tie_buffer: float) -> Candidate:
    """The candidate using the smallest share of its slots; near-ties go by weight.

    Raises:
        ValueError: ``candidates`` is empty.
    """
    return choose_lowest([(candidate, load(candidate)) for candidate in candidates],
                         rng, tie_buffer)
