"""Helpers of the shared-state tests: a redis-server subprocess, fast replica timings, waiting."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import redis

READY_TIMEOUT_S = 5.0
# Short enough that every test runs in a few seconds, long enough for a busy machine.
SYNC_INTERVAL_S = 0.05
LEASE_S = 1.0


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@attrs.define
class RedisServer:
    """A redis-server subprocess on a fixed loopback port."""

    port: int
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (on the same port as before) and wait until it answers."""
        self._process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"redis-server did not start on port {self.port}", pytrace=False)
            time.sleep(0.01)  # a real process starting: nothing to fake

    def stop(self) -> None:
        """Stop the server; its data is gone (no persistence)."""
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=READY_TIMEOUT_S)
            self._process = None

    def flush(self) -> None:
        """Empty every database."""
        with redis.Redis.from_url(self.url) as client:
            client.flushall()

    def client(self) -> redis.Redis:
        """A synchronous client, for inspecting what the replicas wrote."""
        return redis.Redis.from_url(self.url)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False


def state_section(url: str, **extra: Any) -> dict[str, Any]:
    """The ``state`` config section of a replica on ``url`` with the fast test timings."""
    return {"backend": "redis", "redis_url": url, "sync_interval_s": SYNC_INTERVAL_S,
            "lease_s": LEASE_S, **extra}


async def until(condition: Callable[[], bool], timeout: float = 3.0) -> float:
    """Wait for ``condition``; returns the seconds it took.

    Replicas meet in a real Redis on real sockets: nothing a fake clock can drive.
    """
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)
    return time.monotonic() - started
