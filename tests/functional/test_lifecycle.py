"""Config reload under traffic, and graceful shutdown on SIGTERM (issue 7)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import sys
from pathlib import Path

import aiohttp
import yaml

from hopbase import sse
from tests.conftest import FAST_ROUTING, StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events

MESSAGES = [{"role": "user", "content": "hi"}]
STREAM = {
    "model": "gpt",
    "messages": MESSAGES,
    "stream": True,
    "stream_options": {"include_usage": True},
}
ADMIN = {"Authorization": "Bearer admin-key-for-tests"}


async def read_stream(session: aiohttp.ClientSession, url: str) -> bytes:
    async with session.post(url + "/v1/chat/completions", json=STREAM) as response:
        assert response.status == 200
        return (await response.read()).replace(sse.KEEPALIVE, b"")


async def test_reload_under_traffic_keeps_streams_and_applies_new_weights(
    fake: FakeUpstream, hopbase: StartHopbase, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        fake.default(name, Reply.golden("chat_text.sse", delay_s=0.1))
    models = {"gpt": {"deployments": [openai_deployment(fake, n) for n in ("a", "b", "c")]}}
    running = await hopbase(
        models, env={"ADMIN_KEY": "admin-key-for-tests"}, auth={"admin_key_env": "ADMIN_KEY"}
    )
    path = tmp_path / "deployments.yaml"
    document = yaml.safe_load(path.read_text())
    async with aiohttp.ClientSession() as session:
        streams = [asyncio.create_task(read_stream(session, running.url)) for _ in range(50)]
        for _ in range(100):  # until every stream holds its slot
            if sum(s.in_flight for s in running.gateway.router.snapshot()) == 50:
                break
            await asyncio.sleep(0.01)
        assert sum(s.in_flight for s in running.gateway.router.snapshot()) == 50

        broken = yaml.safe_load(path.read_text())
        broken["models"]["gpt"]["deployments"][0]["weight"] = -1
        path.write_text(yaml.safe_dump(broken))
        async with session.post(running.url + "/admin/reload", headers=ADMIN) as response:
            assert response.status == 400
            assert "weight" in (await response.json())["error"]["message"]
        assert [d.id for d in running.gateway.router.deployments("gpt")] == ["a", "b", "c"]

        document["models"]["gpt"]["deployments"] = [
            openai_deployment(fake, "a", weight=1_000_000),
            openai_deployment(fake, "b", weight=1e-6),
        ]
        path.write_text(yaml.safe_dump(document))
        async with session.post(running.url + "/admin/reload", headers=ADMIN) as response:
            assert response.status == 200
        bodies = await asyncio.gather(*streams)
        assert bodies == [b"".join(golden_events("chat_text.sse"))] * 50
        before = {n: len(fake.requests(n)) for n in ("a", "b", "c")}
        for _ in range(10):
            await read_stream(session, running.url)
    after = {n: len(fake.requests(n)) for n in ("a", "b", "c")}
    assert after == {"a": before["a"] + 10, "b": before["b"], "c": before["c"]}
    assert all(s.in_flight == 0 for s in running.gateway.router.snapshot())
    assert [d.id for d in running.gateway.router.deployments("gpt")] == ["a", "b"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_sigterm_lets_streams_finish_then_ends_the_rest_and_flushes_the_log(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    events = golden_events("chat_text.sse")
    fake.script(
        "a",
        *[Reply.golden("chat_text.sse", delay_s=0.08) for _ in range(3)],
        Reply.stream(events[:3], then="stall"),
    )
    port = free_port()
    database = tmp_path / "log.db"
    config = {
        "server": {"port": port, "keepalive_interval_s": 0.2, "shutdown_grace_s": 1.5},
        "routing": {**FAST_ROUTING, "stuck_after_s": 30},
        "logs": {"path": str(database)},
        "models": {"gpt": {"deployments": [openai_deployment(fake, "a")]}},
    }
    path = tmp_path / "deployments.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "FAKE_UPSTREAM_KEY": "sk-test"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hopbase",
        "serve",
        "--config",
        str(path),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    async with session.get(url + "/healthz"):
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            streams = [asyncio.create_task(read_stream(session, url)) for _ in range(4)]
            await asyncio.sleep(0.3)
            process.send_signal(signal.SIGTERM)
            bodies = await asyncio.gather(*streams)
        code = await asyncio.wait_for(process.wait(), 10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code == 0
    whole = b"".join(events)
    assert sorted(bodies, key=len, reverse=True)[:3] == [whole] * 3
    cut = next(body for body in bodies if body != whole)
    assert cut.startswith(b"".join(events[:3]))
    assert b'"error"' in cut and cut.endswith(sse.DONE)
    with sqlite3.connect(database) as db:
        assert db.execute("select count(*) from request_log").fetchone()[0] == 4


async def test_a_request_whose_group_a_reload_removed_ends_with_its_own_failure(
    fake: FakeUpstream, hopbase: StartHopbase, tmp_path: Path
) -> None:
    fake.script("a", Reply.json({"error": {"message": "boom"}}, status=500, delay_s=0.5))
    models = {
        "gone": {"deployments": [openai_deployment(fake, "a", weight=1_000_000),
                                 openai_deployment(fake, "b", weight=1e-6)]},
        "kept": {"deployments": [openai_deployment(fake, "c")]},
    }
    running = await hopbase(models, env={"ADMIN_KEY": "admin-key-for-tests"},
                            auth={"admin_key_env": "ADMIN_KEY"})
    path = tmp_path / "deployments.yaml"
    document = yaml.safe_load(path.read_text())
    del document["models"]["gone"]
    path.write_text(yaml.safe_dump(document))
    async with aiohttp.ClientSession() as session:
        pending = asyncio.create_task(session.post(
            running.url + "/v1/chat/completions",
            json={"model": "gone", "messages": MESSAGES}))
        await asyncio.sleep(0.2)
        async with session.post(running.url + "/admin/reload", headers=ADMIN) as response:
            assert response.status == 200
        async with await pending as response:  # its group is gone: no retry, the failure
            assert response.status == 502
            assert (await response.json())["error"]["code"] == "upstream_error"
        assert fake.requests("b") == []
        async with session.post(running.url + "/v1/chat/completions",
                                json={"model": "gone", "messages": MESSAGES}) as response:
            assert response.status == 404
