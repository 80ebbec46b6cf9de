"""A replica killed with SIGKILL leaks no slots: its load stops counting when its lease ends."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.conftest import FAST_SERVER, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply
from tests.state.conftest import StartReplica
from tests.state.support import LEASE_S, RedisServer, free_port, state_section, until
from tests.state.test_replicas import hang_up, hold_stream, question

START_TIMEOUT_S = 20.0


def models(fake: FakeUpstream) -> dict[str, object]:
    return {"gpt": {"deployments": [openai_deployment(fake, "a", max_in_flight=2)]}}


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; any still alive afterwards are killed."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def start_serve(fake: FakeUpstream, redis_server: RedisServer, tmp_path: Path,
                      processes: list[subprocess.Popen[bytes]]) -> tuple[str, int]:
    """``python -m hopbase serve`` as a real process sharing the test's Redis."""
    document = {
        "server": FAST_SERVER,
        "routing": {"stuck_after_s": 30.0, "queue_timeout_s": 0.3},
        "logs": {"path": str(tmp_path / "killed.db")},
        "state": state_section(redis_server.url),
        "models": models(fake),
    }
    path = tmp_path / "killed.yaml"
    path.write_text(yaml.safe_dump(document))
    port = free_port()
    environment = {**os.environ, "FAKE_UPSTREAM_KEY": "sk-upstream-secret-0000",
                   "HOPBASE_LOG_LEVEL": "WARNING"}
    log_file = (tmp_path / "killed.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "hopbase", "serve", "--config", str(path), "--port", str(port)],
        env=environment, stdout=log_file, stderr=subprocess.STDOUT,
    )
    log_file.close()
    processes.append(process)
    url = f"http://127.0.0.1:{port}"
    await until(lambda: process.poll() is not None or _answers(port), timeout=START_TIMEOUT_S)
    assert process.poll() is None, (tmp_path / "killed.log").read_text()
    await ready(url)
    return url, process.pid


def _answers(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def ready(url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(url + "/readyz") as response:
        assert (response.status, await response.json()) == (200, {"status": "ok"})


async def test_a_killed_replica_stops_counting_when_its_lease_expires(
    fake: FakeUpstream, replica: StartReplica, redis_server: RedisServer, tmp_path: Path,
    serve_process: list[subprocess.Popen[bytes]],
) -> None:
    survivor = await replica(models(fake), routing={"stuck_after_s": 30.0, "queue_timeout_s": 0.3})
    url, pid = await start_serve(fake, redis_server, tmp_path, serve_process)
    fake.script("a", *[Reply.golden("chat_text.sse", count=3, then="stall")] * 2)
    streams = [asyncio.create_task(hold_stream(url)) for _ in range(2)]
    await until(lambda: survivor.snapshot("a").in_flight == 2)
    async with aiohttp.ClientSession() as session, session.post(
        survivor.url + "/v1/chat/completions", json=question(1)
    ) as response:
        assert response.status == 429  # both slots are the other replica's

    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    await until(lambda: survivor.snapshot("a").in_flight == 0, timeout=LEASE_S * 3)

    # the slots stay taken until the lease of the last report runs out, then free
    assert LEASE_S * 0.8 < time.monotonic() - killed_at < LEASE_S * 2.5
    async with aiohttp.ClientSession() as session, session.post(
        survivor.url + "/v1/chat/completions", json=question(2)
    ) as response:
        assert (response.status, "Hello from a" in await response.text()) == (200, True)
    await hang_up(streams)
