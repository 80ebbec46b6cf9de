"""``hopbase serve --workers N``: N processes share one port and stop together (issue 7)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import attrs
import pytest
import yaml

SIMULATED = {"first_output_ms": 1, "tokens_per_s": 5000, "output_tokens": 4}
REQUESTS_TOTAL = re.compile(
    rb'^hopbase_requests_total\{endpoint="chat.completions",model="demo",status="200"\} (\S+)$',
    re.MULTILINE,
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening_sockets(port: int) -> int:
    """How many sockets listen on loopback ``port`` (one per worker under SO_REUSEPORT)."""
    wanted = f"0100007F:{port:04X}"
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for line in lines if line.split()[1] == wanted and line.split()[3] == "0A")


def workers_of(parent: int) -> list[int]:
    """The worker processes (multiprocessing spawn children) of ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:  # the process ended while we looked
            continue
        if f"\nPPid:\t{parent}\n" in status and b"spawn_main" in command:
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@attrs.define
class Served:
    """A ``hopbase serve --workers 2`` process on loopback ``port``."""

    process: asyncio.subprocess.Process
    port: int
    workers: list[int]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def wait_until(predicate: object, seconds: float = 20.0) -> None:
    """Poll ``predicate`` (a callable) until it is true; fail after ``seconds``."""
    assert callable(predicate)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not predicate():
        assert loop.time() < deadline, "timed out waiting for the workers"
        await asyncio.sleep(0.05)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    port = free_port()
    config = {
        "server": {"port": port, "shutdown_grace_s": 1.0},
        "logs": {"path": str(tmp_path / "log.db")},
        "models": {"demo": {"deployments": [
            {"id": "sim", "provider": "simulated", "simulated": SIMULATED}]}},
    }
    path = tmp_path / "deployments.yaml"
    path.write_text(yaml.safe_dump(config))
    output = (tmp_path / "serve.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hopbase", "serve", "--config", str(path), "--workers", "2",
        env={**os.environ, "HOPBASE_LOG_LEVEL": "WARNING"}, stdout=output, stderr=output)
    running = Served(process, port, [])
    try:
        await wait_until(lambda: listening_sockets(port) == 2 or process.returncode is not None)
        assert process.returncode is None, (tmp_path / "serve.log").read_text()
        running.workers = workers_of(process.pid)
        yield running
    finally:
        for pid in [process.pid, *running.workers]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        await process.wait()
        output.close()


async def scrape_requests_total(url: str) -> int:
    """``hopbase_requests_total`` of whichever worker answers a fresh connection."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(
        url + "/metrics"
    ) as response:
        match = REQUESTS_TOTAL.search(await response.read())
    return 0 if match is None else int(float(match.group(1)))


async def test_two_workers_share_the_port_and_stop_together_on_sigterm(served: Served) -> None:
    assert len(served.workers) == 2
    body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}]}
    statuses = []
    # A fresh connection per request, so the kernel spreads them over both sockets.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        for _ in range(40):
            async with session.post(served.url + "/v1/chat/completions", json=body) as response:
                await response.read()
                statuses.append(response.status)
    assert statuses == [200] * 40
    # Each worker counts only what it served: any worker short of 40 means the other
    # served the rest, and the two counts add up to 40.
    counts = {await scrape_requests_total(served.url) for _ in range(20)}
    assert all(0 < count < 40 for count in counts), counts
    assert counts <= {min(counts), 40 - min(counts)}, counts

    served.process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(served.process.wait(), 15) == 0
    assert [pid for pid in served.workers if alive(pid)] == []
    assert listening_sockets(served.port) == 0


async def test_a_worker_that_dies_stops_the_others_with_its_status(served: Served) -> None:
    killed, other = served.workers
    os.kill(killed, signal.SIGKILL)
    assert await asyncio.wait_for(served.process.wait(), 15) == 128 + signal.SIGKILL
    assert not alive(other)
