"""One exception tree for everything HopBase answers with an error.

    HopbaseError
    ├── ConfigError             the configuration has problems (listed, with paths)
    ├── LogStoreError           the request log's database cannot be opened or migrated
    └── GatewayError            an HTTP error answer, rendered in the client's protocol
        ├── InvalidRequest        400  malformed JSON, missing model, wrong types
        ├── Unauthorized          401  missing or unknown client key
        ├── Forbidden             403  a client key on /admin/*, or admin disabled
        ├── ModelNotFound         404  unknown model group
        ├── BodyTooLarge          413  body over server.max_body_bytes
        ├── RateLimited           429  no capacity past queue_timeout_s (Retry-After)
        ├── AllCoolingDown        503  every deployment cooling (Retry-After)
        ├── UpstreamRejected      the upstream's own 400/404/413/422, passed back
        ├── UpstreamFailed        502  attempts exhausted on upstream failures
        └── UpstreamTimeout       504  ... and the last failure was a timeout

``type`` uses Anthropic's error-type words; ``code`` is the OpenAI ``error.code``.
Each protocol module renders a `GatewayError` into its own error body.
"""

from __future__ import annotations


class HopbaseError(Exception):
    """Base of every HopBase exception."""


class ConfigError(HopbaseError):
    """The configuration is invalid; ``problems`` lists each one with its dotted path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


class LogStoreError(HopbaseError):
    """The request log's database cannot be opened or migrated (an operator's mistake)."""


class GatewayError(HopbaseError):
    """An error answer: HTTP ``status``, protocol-neutral ``type``, OpenAI ``code``."""

    status = 500
    type = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code
        self.retry_after_s = retry_after_s


class InvalidRequest(GatewayError):
    status, type, code = 400, "invalid_request_error", "invalid_request"


class Unauthorized(GatewayError):
    status, type, code = 401, "authentication_error", "invalid_api_key"


class Forbidden(GatewayError):
    status, type, code = 403, "permission_error", "forbidden"


class ModelNotFound(GatewayError):
    status, type, code = 404, "not_found_error", "model_not_found"


class BodyTooLarge(GatewayError):
    status, type, code = 413, "request_too_large", "request_too_large"


class RateLimited(GatewayError):
    status, type, code = 429, "rate_limit_error", "rate_limit_exceeded"


class AllCoolingDown(GatewayError):
    status, type, code = 503, "overloaded_error", "all_deployments_cooling_down"


class UpstreamRejected(GatewayError):
    type, code = "invalid_request_error", "upstream_rejected"


class UpstreamFailed(GatewayError):
    status, type, code = 502, "api_error", "upstream_error"


class UpstreamTimeout(GatewayError):
    status, type, code = 504, "timeout_error", "upstream_timeout"


def status_type(status: int) -> type[GatewayError]:
    """The `GatewayError` class that answers with ``status``."""
    for cls in (InvalidRequest, Unauthorized, Forbidden, ModelNotFound, BodyTooLarge,
                RateLimited, AllCoolingDown, UpstreamFailed, UpstreamTimeout):
        if cls.status == status:
            return cls
    return UpstreamRejected
