"""Load: 1,000 concurrent streams of 100 events through one HopBase process (issue 8).

HopBase runs in this test's process, on uvloop as in production, and has the
event loop to itself; the fake upstream and the 1,000 clients run in two other
processes (`tests.resilience.load.peer`). A ticker task in HopBase's loop
measures the event-loop lag every 10 ms and samples the resident memory and the
in-flight count. Run by ``make test-load`` (and CI); ``make test`` leaves it out.

The event rate (1,000 streams × one event per EVENT_DELAY_S) is what one Python
process keeps up with on a two-CPU machine that also runs both peers; the test
is about holding 1,000 streams at once, not about peak throughput (``make bench``).
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import orjson
import pytest

from tests.conftest import Running, StartHopbase
from tests.resilience.support import assert_settled, eventually, in_flight

STREAMS = 1000
EVENTS = 100
EVENT_DELAY_S = 0.25  # each stream lasts about 25 s, so all 1,000 overlap after the ramp
RAMP_S = 5.0
TICK_S = 0.01
ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.load, pytest.mark.timeout(300)]


def resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def open_sockets() -> set[str]:
    """The sockets this process has open, as ``socket:[inode]``."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:
            continue  # closed while listing
        if target.startswith("socket:"):
            found.add(target)
    return found


@attrs.define
class Ticker:
    """Measures loop lag each tick; samples memory and in-flight every tenth."""

    running: Running
    lags: list[float] = attrs.field(factory=list)
    peak_resident: int = 0
    peak_in_flight: int = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        expected = loop.time() + TICK_S
        while True:
            await asyncio.sleep(TICK_S)
            now = loop.time()
            self.lags.append(max(0.0, now - expected))
            expected = now + TICK_S
            if len(self.lags) % 10 == 0:
                self.peak_resident = max(self.peak_resident, resident_bytes())
                busy = sum(in_flight(self.running).values())
                self.peak_in_flight = max(self.peak_in_flight, busy)

    def p99(self) -> float:
        ordered = sorted(self.lags)
        return ordered[int(len(ordered) * 0.99)]


@pytest.fixture
async def upstream() -> AsyncIterator[asyncio.subprocess.Process]:
    """The fake upstream in its own process; its URL is its first output line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.resilience.load.peer", "upstream", str(EVENTS),
        str(EVENT_DELAY_S), cwd=ROOT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def stop(process: asyncio.subprocess.Process) -> None:
    assert process.stdin is not None
    process.stdin.close()
    assert await asyncio.wait_for(process.wait(), 10) == 0


async def run_clients(url: str) -> dict[str, object]:
    clients = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.resilience.load.peer", "clients", url, str(STREAMS),
        str(EVENTS), str(RAMP_S), cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )
    output, _ = await asyncio.wait_for(clients.communicate(), 120)
    assert clients.returncode == 0
    return orjson.loads(output)  # type: ignore[no-any-return]


def enough_file_descriptors() -> None:
    """Two sockets per stream in this process; raise the soft limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * STREAMS + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


async def test_thousand_concurrent_streams(
    hopbase: StartHopbase, upstream: asyncio.subprocess.Process
) -> None:
    enough_file_descriptors()
    assert upstream.stdout is not None
    fake_url = (await asyncio.wait_for(upstream.stdout.readline(), 30)).decode().strip()
    deployment = {"id": "a", "provider": "openai", "base_url": f"{fake_url}/a/v1",
                  "api_key_env": "FAKE_UPSTREAM_KEY", "model": "up-model"}
    running = await hopbase({"gpt": {"deployments": [deployment]}},
                            server={"keepalive_interval_s": 30},
                            routing={"stuck_after_s": 30, "queue_timeout_s": 30})
    # pytest's own objects would make every full collection slower than in a HopBase process
    gc.collect()
    gc.freeze()
    try:
        await load_and_check(running, upstream)
    finally:
        gc.unfreeze()


async def load_and_check(running: Running, upstream: asyncio.subprocess.Process) -> None:
    baseline_resident, baseline_sockets = resident_bytes(), open_sockets()
    ticker = Ticker(running)
    ticking = asyncio.create_task(ticker.run())
    try:
        result = await run_clients(running.url)
    finally:
        ticking.cancel()
        await asyncio.gather(ticking, return_exceptions=True)
    growth_mb = (ticker.peak_resident - baseline_resident) / 2**20
    print(f"\nload: lag p99 {ticker.p99() * 1000:.1f} ms, RSS +{growth_mb:.1f} MB, "
          f"peak in-flight {ticker.peak_in_flight}")
    assert result == {"identical": STREAMS, "statuses": {"200": STREAMS}, "failures": []}
    assert ticker.peak_in_flight == STREAMS
    assert growth_mb < 100, f"resident memory grew {growth_mb:.1f} MB"
    assert ticker.p99() < 0.050, f"event-loop lag p99 {ticker.p99() * 1000:.1f} ms"
    await assert_settled(running, timeout=10)
    # idle keep-alive connections to the upstream are pooled, not leaked: they go with it
    await stop(upstream)
    # every socket opened during the load is closed again (the peer's stdio may be gone too)
    assert await eventually(lambda: open_sockets() <= baseline_sockets, timeout=10), (
        f"still open: {open_sockets() - baseline_sockets}")
