"""Shared checks the protocol request parsers use on client JSON.

Every problem becomes `errors.InvalidRequest` naming the field's path, so a client
mistake is a 400 in its protocol's own error shape, never a 500.
"""

from __future__ import annotations

from typing import Any, NoReturn

from hopbase import errors


def fail(path: str, problem: str) -> NoReturn:
    """Reject the request: ``path`` is the field, ``problem`` what is wrong with it."""
    raise errors.InvalidRequest(f"{path}: {problem}")


def string(value: Any, path: str) -> str:
    """``value`` when it is a string, else the request is rejected."""
    if not isinstance(value, str):
        fail(path, "must be a string")
    return value
