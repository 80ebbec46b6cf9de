"""Responses error bodies (the same as Chat's) and the canonical reading of upstream errors."""

from __future__ import annotations

from typing import Any

from hopbase import canonical
from hopbase.protocols.openai_chat.errors import render_error

__all__ = ["render_error", "stream_error"]

# Responses error codes -> canonical (Anthropic) error words; anything else is api_error.
_CANONICAL_ERROR_TYPES = {
    "rate_limit_exceeded": "rate_limit_error", "server_error": "api_error",
    "invalid_prompt": "invalid_request_error", "vector_store_timeout": "timeout_error",
}


def stream_error(error: Any) -> canonical.Error:
    """A canonical error from a Responses ``error`` object (``code`` and ``message``)."""
    if not isinstance(error, dict):
        return canonical.Error("api_error", "upstream stream failed")
    code, message = error.get("code"), error.get("message")
    kind = _CANONICAL_ERROR_TYPES.get(code, "api_error") if isinstance(code, str) else "api_error"
    return canonical.Error(kind, message if isinstance(message, str) else "upstream stream failed")
