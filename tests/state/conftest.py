"""A private redis-server for the shared-state tests, and HopBase replicas that share it.

The server runs once per session on a free loopback port, without persistence;
each test starts from an empty database. A test may stop and restart it
(`RedisServer.stop`, `RedisServer.start`): the next test finds it running again.
Without ``redis-server`` on the PATH the tests fail (they are never skipped).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Running, StartHopbase
from tests.state.support import RedisServer, free_port, state_section


@pytest.fixture(scope="session")
def redis_server_session() -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: the shared-state tests need it "
                    "(apt-get install redis-server, or make test-tools)", pytrace=False)
    server = RedisServer(free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(redis_server_session: RedisServer) -> RedisServer:
    """The session's redis-server, running and empty."""
    if not redis_server_session.running:
        redis_server_session.start()
    redis_server_session.flush()
    return redis_server_session


StartReplica = Callable[..., Any]


@pytest.fixture
def replica(hopbase: StartHopbase, redis_server: RedisServer, tmp_path: Path) -> StartReplica:
    """Start a HopBase replica sharing the test's Redis; each has its own request log."""
    count = 0

    async def start(models: dict[str, Any], **sections: Any) -> Running:
        nonlocal count
        count += 1
        logs = {"path": str(tmp_path / f"replica-{count}.db"), **sections.pop("logs", {})}
        return await hopbase(models, state=state_section(redis_server.url), logs=logs, **sections)

    return start
