"""Chat error bodies: before a stream starts, and inside one (``data: {"error": …}``)."""

from __future__ import annotations

from typing import Any

import orjson

from hopbase import canonical, errors, sse

# Canonical (Anthropic) error words -> OpenAI error type words; anything else is server_error.
OPENAI_ERROR_TYPES = {
    "invalid_request_error": "invalid_request_error", "not_found_error": "invalid_request_error",
    "request_too_large": "invalid_request_error", "authentication_error": "authentication_error",
    "permission_error": "permission_error", "rate_limit_error": "rate_limit_error",
}
_CANONICAL_ERROR_TYPES = frozenset({*OPENAI_ERROR_TYPES, "api_error", "overloaded_error",
                                    "timeout_error"})
_STATUS_ERROR_TYPES = {401: "authentication_error", 403: "permission_error",
                       429: "rate_limit_error"}


def render_error(error: errors.GatewayError) -> dict[str, Any]:
    """The OpenAI error body for ``error``, sent before any stream starts."""
    if isinstance(error, errors.UpstreamRejected):
        kind = "invalid_request_error"
    elif error.status >= 500:
        kind = "server_error"
    else:
        kind = _STATUS_ERROR_TYPES.get(error.status, "invalid_request_error")
    code = error.code or ("rate_limit_exceeded" if error.status == 429 else None)
    return {"error": {"message": error.message, "type": kind, "param": None, "code": code}}


def stream_error(error: Any) -> canonical.Error:
    """The canonical error of an in-stream ``error`` object (its ``code`` wins when canonical)."""
    if not isinstance(error, dict):
        return canonical.Error("api_error", str(error))
    code, kind, message = error.get("code"), error.get("type"), error.get("message")
    if isinstance(code, str) and code in _CANONICAL_ERROR_TYPES:
        kind = code
    elif not isinstance(kind, str) or kind not in OPENAI_ERROR_TYPES:
        kind = "api_error"
    return canonical.Error(kind, message if isinstance(message, str) else str(error))


def stream_error_event(error: canonical.Error) -> bytes:
    """OpenAI's in-stream error (``data: {"error": …}``, no ``event:``), then ``[DONE]``."""
    body = {"error": {"message": error.message,
                      "type": OPENAI_ERROR_TYPES.get(error.type, "server_error"),
                      "code": error.type}}
    return sse.encode(orjson.dumps(body)) + sse.DONE
