"""What one request and each of its upstream attempts looked like, for observers.

The proxy builds one `RequestRecord` per request and hands it, finished, to the
observers (metrics, request log). Observers watch and never steer: nothing in
here feeds back into routing.

All times are milliseconds. ``first_output_ms`` and ``last_chunk_ms`` are
upstream-only: measured from sending the upstream request to receiving the
upstream chunk, never to when the client finished reading.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class AttemptRecord:
    """One upstream attempt: where it went and how it ended."""

    deployment: str
    model_group: str
    outcome: str  # success | error | timeout | rate_limited | stuck | rejected | cancelled
    status: int | None = None
    duration_ms: float | None = None
    first_output_ms: float | None = None
    last_chunk_ms: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error_type: str | None = None
    hedge: bool = False


@attrs.frozen
class RequestRecord:
    """One client request from arrival to its last byte."""

    id: str
    created_at: float  # unix seconds
    # chat.completions | responses | messages | images.generations | audio.transcriptions
    endpoint: str
    model: str  # the model group the client asked for
    key: str | None  # the client key's name, never the key
    stream: bool
    status: int
    duration_s: float
    client_disconnected: bool = False
    cache: str | None = None  # hit | miss | bypass | None when not cacheable
    deployment: str | None = None  # the deployment that served
    served_by_group: str | None = None  # differs from model after a fallback
    first_output_ms: float | None = None
    last_chunk_ms: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    attempts: tuple[AttemptRecord, ...] = ()
    error_type: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
