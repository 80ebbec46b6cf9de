"""The ``weighted`` strategy: at random, in proportion to each deployment's weight."""

from __future__ import annotations

import random
from collections.abc import Sequence

from routing.strategies.candidate import Candidate, weighted_choice


def choose(candidates: Sequence[Candidate], rng: random.Random, tie_buffer: float) -> Candidate:
    """One candidate in proportion to weight; ``tie_buffer`` plays no part here."""
    return weighted_choice(candidates, rng)
