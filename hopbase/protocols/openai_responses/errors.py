"""Responses error bodies, and the canonical reading of an upstream's error object."""

from __future__ import annotations

from typing import Any

from hopbase import canonical, errors

_OPENAI_ERROR_TYPES = {
    "invalid_request_error": "invalid_request_error", "not_found_error": "invalid_request_error",
    "request_too_large": "invalid_request_error", "authentication_error": "authentication_error",
    "permission_error": "permission_error", "rate_limit_error": "rate_limit_error",
}
_STATUS_ERROR_TYPES = {401: "authentication_error", 403: "permission_error",
                       429: "rate_limit_error"}
# Responses error codes -> canonical (Anthropic) error words; anything else is api_error.
_CANONICAL_ERROR_TYPES = {
    "rate_limit_exceeded": "rate_limit_error", "server_error": "api_error",
    "invalid_prompt": "invalid_request_error", "vector_store_timeout": "timeout_error",
}


def render_error(error: errors.GatewayError) -> dict[str, Any]:
    """The OpenAI error body for ``error``, sent before any stream starts."""
    if isinstance(error, errors.UpstreamRejected):
        kind = "invalid_request_error"
    elif error.status >= 500:
        kind = "server_error"
    else:
        kind = _STATUS_ERROR_TYPES.get(error.status, _OPENAI_ERROR_TYPES.get(
            error.type, "invalid_request_error"))
    return {"error": {"message": error.message, "type": kind, "param": None, "code": error.code}}


def stream_error(error: Any) -> canonical.Error:
    """A canonical error from a Responses ``error`` object (``code`` and ``message``)."""
    if not isinstance(error, dict):
        return canonical.Error("api_error", "upstream stream failed")
    code, message = error.get("code"), error.get("message")
    kind = _CANONICAL_ERROR_TYPES.get(code, "api_error") if isinstance(code, str) else "api_error"
    return canonical.Error(kind, message if isinstance(message, str) else "upstream stream failed")
