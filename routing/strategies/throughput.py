"""The ``throughput`` strategy: the highest expected output tokens per second."""

from __future__ import annotations

import random
from collections.abc import Sequence

from routing.strategies.candidate import Candidate, choose_highest


def choose(candidates: Sequence[Candidate], rng: random.Random, tie_buffer: float) -> Candidate:
    """The measured candidate expected to stream fastest, even if it starts later.

    Unmeasured candidates never win here; exploration gives them their turns.

    Raises:
        ValueError: no candidate has a throughput estimate.
    """
    scored = [(candidate, candidate.tokens_per_s) for candidate in candidates
              if candidate.tokens_per_s is not None]
    return choose_highest(scored, rng, tie_buffer)
