"""One upstream attempt: send, classify the answer, read and observe its stream.

Timing is upstream-only: ``sent_at`` is stamped just before the upstream request
is sent and every chunk is stamped on receipt by the reader task, so a slow
client never makes a deployment look slow. The attempt's lease is released
exactly once, in `Attempt.finish`, with the outcome it earned.

Outcome classification (SPEC section 7):

    connect refused / reset / DNS / TLS / 3xx / 5xx / 529   error         retried
    no headers in time                                     timeout       retried
    429                                                    rate_limited  retried, cools
    401 / 403                                              error + auth  retried, cools max_s
    400 / 404 / 413 / 422 (and other 4xx)                  rejected      passed back
    no output for stuck_after_s                            stuck         retried before output
    stream ends without its terminal event                 error
    client gone                                            cancelled     never a failure
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import aiohttp
import attrs
import orjson

from hopbase import canonical, errors
from hopbase.config import DeploymentConfig
from hopbase.records import AttemptRecord
from hopbase.upstream import Transport, UpstreamResponse
from routing import AttemptReport, Lease, Outcome

REJECTED_STATUSES = frozenset({400, 404, 413, 422})
_ERROR_BODY_LIMIT = 65536


@attrs.frozen
class Failure:
    """Why an attempt ended without an answer, and what the client would be told."""

    outcome: Outcome
    error: errors.GatewayError
    retryable: bool
    status: int | None = None
    retry_after_s: float | None = None
    auth_failure: bool = False
    forwarded: bool = False  # the upstream's own error event already went to the client


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from a Retry-After (or retry-after-ms) header; None when absent or a date."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            return None
    return None


def upstream_message(body: bytes) -> str:
    """The human message inside an upstream error body (OpenAI or Anthropic shape)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:500].decode("utf-8", "replace") or "upstream error"
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(payload.get("message"), str):
            return str(payload["message"])
    return "upstream error"


def classify_status(
    status: int, headers: Mapping[str, str], body: bytes, redact: Callable[[str], str]
) -> Failure:
    """The `Failure` for a non-200 upstream answer."""
    message = redact(upstream_message(body))
    should_retry = headers.get("x-should-retry")
    retried_4xx = (401, 403, 408, 409, 429)
    if status in REJECTED_STATUSES or (400 <= status < 500 and status not in retried_4xx):
        error = errors.UpstreamRejected(message, status=status)
        return Failure(Outcome.REJECTED, error, retryable=False, status=status)
    failed = errors.UpstreamFailed(f"upstream answered {status}: {message}")
    retryable = should_retry != "false"
    if status == 429:
        return Failure(Outcome.RATE_LIMITED, failed, retryable, status, retry_after(headers))
    if status in (401, 403):
        failed = errors.UpstreamFailed(f"upstream answered {status}: deployment key refused")
        return Failure(Outcome.ERROR, failed, retryable, status, auth_failure=True)
    if status == 408:
        return Failure(Outcome.TIMEOUT, errors.UpstreamTimeout(message), retryable, status)
    return Failure(Outcome.ERROR, failed, retryable, status, retry_after(headers))


@attrs.define(eq=False)
class Attempt:
    """One try of one deployment for one request."""

    lease: Lease
    deployment: DeploymentConfig
    model_group: str
    protocol: ModuleType  # the upstream protocol module
    hedge: bool = False
    sent_at: float = 0.0
    first_output_at: float | None = None
    last_chunk_at: float | None = None
    ended_at: float | None = None
    usage: canonical.Usage = attrs.field(factory=canonical.Usage)
    response: UpstreamResponse | None = None
    failure: Failure | None = None
    outcome: Outcome | None = None
    output_started: bool = False

    @property
    def id(self) -> str:
        return self.deployment.id

    async def send(
        self,
        transport: Transport,
        body: dict[str, Any],
        client_headers: Mapping[str, str],
        headers_timeout_s: float,
        redact: Callable[[str], str],
    ) -> Failure | None:
        """Send the request; None when a 200 answer is ready to read, else the failure."""
        loop = asyncio.get_running_loop()
        self.sent_at = loop.time()
        try:
            response = await self.request(transport, body, client_headers, headers_timeout_s)
        except TimeoutError:
            timeout = errors.UpstreamTimeout("upstream did not answer in time")
            return self._fail(Outcome.TIMEOUT, timeout)
        except (aiohttp.ClientError, OSError) as error:
            message = redact(f"upstream connection failed: {type(error).__name__}")
            return self._fail(Outcome.ERROR, errors.UpstreamFailed(message))
        self.response = response
        if response.status == 200:
            return None
        try:
            async with asyncio.timeout(headers_timeout_s):
                body_bytes = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError):
            body_bytes = b""
        finally:
            response.close()
        self.failure = classify_status(
            response.status, response.headers, body_bytes[:_ERROR_BODY_LIMIT], redact
        )
        return self.failure

    async def request(
        self,
        transport: Transport,
        body: dict[str, Any],
        client_headers: Mapping[str, str],
        headers_timeout_s: float,
    ) -> UpstreamResponse:
        """Send this attempt's upstream request; subclasses for other endpoints override it."""
        return await transport.send(
            self.deployment, self.protocol.NAME, body, client_headers, headers_timeout_s
        )

    def _fail(self, outcome: Outcome, error: errors.GatewayError) -> Failure:
        self.failure = Failure(outcome, error, retryable=True)
        return self.failure

    def mark_output(self, at: float) -> None:
        if self.first_output_at is None:
            self.first_output_at = at
        self.output_started = True

    def close(self) -> None:
        """Drop the upstream connection at once (never drained)."""
        if self.response is not None:
            self.response.close()

    def finish(self, outcome: Outcome, at: float | None = None) -> None:
        """Close the upstream, release the lease with ``outcome``; later calls do nothing."""
        if self.outcome is not None:
            return
        self.outcome = outcome
        self.ended_at = at if at is not None else asyncio.get_running_loop().time()
        self.close()
        failure = self.failure
        self.lease.release(
            AttemptReport(
                outcome=outcome,
                status=failure.status if failure else (200 if self.response else None),
                retry_after_s=failure.retry_after_s if failure else None,
                auth_failure=failure.auth_failure if failure else False,
                first_output_s=self._since_sent(self.first_output_at),
                last_chunk_s=self._since_sent(self.last_chunk_at),
                input_tokens=self.usage.input_tokens,
                output_tokens=self.usage.output_tokens,
            )
        )

    def _since_sent(self, moment: float | None) -> float | None:
        return None if moment is None else max(0.0, moment - self.sent_at)

    def record(self) -> AttemptRecord:
        """This attempt as the request log and metrics see it."""
        failure = self.failure
        first = self._since_sent(self.first_output_at)
        last = self._since_sent(self.last_chunk_at)
        duration = self._since_sent(self.ended_at)
        return AttemptRecord(
            deployment=self.deployment.id,
            model_group=self.model_group,
            outcome=(self.outcome or Outcome.CANCELLED).value,
            status=failure.status if failure else (200 if self.response else None),
            duration_ms=None if duration is None else round(duration * 1000, 1),
            first_output_ms=None if first is None else round(first * 1000, 1),
            last_chunk_ms=None if last is None else round(last * 1000, 1),
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
            error_type=(
                failure.error.type if failure and self.outcome is not Outcome.SUCCESS else None
            ),
            hedge=self.hedge,
        )

