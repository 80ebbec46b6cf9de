"""The load test runs on uvloop, the loop ``hopbase serve`` installs in production."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    """Every test in this folder gets a uvloop event loop (the plain loop if uvloop is absent)."""
    try:
        import uvloop
    except ImportError:
        import asyncio

        return {"asyncio": asyncio.new_event_loop}
    return {"uvloop": uvloop.new_event_loop}
