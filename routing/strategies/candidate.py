"""What a strategy sees of one eligible deployment, and the shared choosing helpers."""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

from routing.deployment import Deployment


@attrs.frozen
class Candidate:
    """One eligible deployment with the estimates a strategy compares.

    Attributes:
        deployment: the deployment itself (its weight breaks ties).
        in_flight: attempts it is serving now.
        first_output_s: expected upstream seconds to first output, None when unmeasured.
        tokens_per_s: expected output tokens per second, None when unmeasured.
    """

    deployment: Deployment
    in_flight: int = 0
    first_output_s: float | None = None
    tokens_per_s: float | None = None


def weighted_choice(candidates: Sequence[Candidate], rng: random.Random) -> Candidate:
    """One candidate at random, in proportion to deployment weight.

    Raises:
        ValueError: ``candidates`` is empty.
    """
    if not candidates:
        raise ValueError("no candidates to choose from")
    total = sum(candidate.deployment.weight for candidate in candidates)
    point = rng.random() * total
    for candidate in candidates:
        point -= candidate.deployment.weight
        if point < 0:
            return candidate
    return candidates[-1]  # float rounding can leave the point at the very end


def choose_lowest(scored: Sequence[tuple[Candidate, float]], rng: random.Random,
                  tie_buffer: float) -> Candidate:
    """The candidate with the lowest score; near-ties (within ``tie_buffer``) go by weight.

    Raises:
        ValueError: ``scored`` is empty.
    """
    if not scored:
        raise ValueError("no candidates to choose from")
    best = min(score for _candidate, score in scored)
    ceiling = best + abs(best) * tie_buffer
    return weighted_choice([candidate for candidate, score in scored if score <= ceiling], rng)


def choose_highest(scored: Sequence[tuple[Candidate, float]], rng: random.Random,
                   tie_buffer: float) -> Candidate:
    """The candidate with the highest score; near-ties (within ``tie_buffer``) go by weight.

    Raises:
        ValueError: ``scored`` is empty.
    """
    # highest score = lowest negated score; the near-tie band is the same width
    return choose_lowest([(candidate, -score) for candidate, score in scored], rng, tie_buffer)
