"""How one upstream attempt ended, as the proxy reports it when it releases the lease."""

from __future__ import annotations

import enum

import attrs


class Outcome(enum.Enum):
    """The result of one upstream attempt; the values are the metric label values."""

    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    STUCK = "stuck"
    REJECTED = "rejected"
    CANCELLED = "cancelled"

    @property
    def is_failure(self) -> bool:
        """True when the attempt counts against the deployment's health.

        A rejected request (upstream 400/404/413/422) is the client's fault and a
        cancelled one is the client going away; neither says anything about the
        deployment.
        """
        return self in _FAILURES


_FAILURES = frozenset({Outcome.ERROR, Outcome.TIMEOUT, Outcome.RATE_LIMITED, Outcome.STUCK})


def _non_negative_or_none(_instance: object, attribute: attrs.Attribute[float | None],
                          value: float | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen
class AttemptReport:
    """What the proxy learned from one attempt, handed to `Lease.release`.

    Timings are upstream-only: seconds from sending the upstream request to the
    receipt of the first upstream chunk that carried output (``first_output_s``)
    and of the last upstream chunk (``last_chunk_s``), never to when the client
    finished reading.

    Attributes:
        outcome: how the attempt ended.
        status: the upstream HTTP status, if the upstream answered at all.
        retry_after_s: the upstream's Retry-After (on 429 or 503), in seconds.
        auth_failure: the upstream refused the deployment's key (401/403).
        first_output_s: seconds from send to the first output chunk.
        last_chunk_s: seconds from send to the last chunk.
        input_tokens: prompt tokens from the upstream's usage.
        output_tokens: completion tokens from the upstream's usage.
    """

    outcome: Outcome
    status: int | None = None
    retry_after_s: float | None = attrs.field(default=None, validator=_non_negative_or_none)
    auth_failure: bool = False
    first_output_s: float | None = attrs.field(default=None, validator=_non_negative_or_none)
    last_chunk_s: float | None = attrs.field(default=None, validator=_non_negative_or_none)
    input_tokens: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    output_tokens: int = attrs.field(default=0, validator=attrs.validators.ge(0))
