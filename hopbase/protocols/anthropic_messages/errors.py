"""The Messages error body, answered before a stream starts."""

from __future__ import annotations

from typing import Any

from hopbase import errors


def render_error(error: errors.GatewayError) -> dict[str, Any]:
    """The Messages error body for ``error`` (answers before a stream starts)."""
    return {"type": "error", "error": {"type": error.type, "message": error.message}}
