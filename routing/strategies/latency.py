"""The ``latency`` strategy: the lowest expected upstream time to first output."""

from __future__ import annotations

import random
from collections.abc import Sequence

from routing.strategies.candidate import Candidate, choose_lowest


def choose(candidates: Sequence[Candidate], rng: random.Random, tie_buffer: float) -> Candidate:
    """The measured candidate expected to start answering soonest.

    Unmeasured candidates never win here; exploration gives them their turns.

    Raises:
        ValueError: no candidate has a first-output estimate.
    """
    scored = [(candidate, candidate.first_output_s) for candidate in candidates
              if candidate.first_output_s is not None]
    return choose_lowest(scored, rng, tie_buffer)
