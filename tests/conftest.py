"""Shared fixtures: the scripted fake upstream and a HopBase started on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from aiohttp.test_utils import TestServer

from hopbase.app import make_app
from hopbase.config import Config, load_config
from hopbase.gateway import Gateway
from hopbase.views import GATEWAY
from tests.fakes.upstream import FakeUpstream

FAST_SERVER = {
    "keepalive_interval_s": 0.2,
    "upstream_connect_timeout_s": 2.0,
    "shutdown_grace_s": 1.0,
}
FAST_ROUTING = {
    "strategy": "weighted",
    "stuck_after_s": 1.0,
    "queue_timeout_s": 0.5,
    "max_attempts": 3,
    "cooldown": {"allowed_fails": 3, "window_s": 60, "base_s": 30, "max_s": 600},
}


@attrs.define
class Running:
    """A HopBase serving on loopback for one test."""

    server: TestServer
    config: Config

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    @property
    def gateway(self) -> Gateway:
        return self.server.app[GATEWAY]  # type: ignore[index]

    def snapshot(self, deployment_id: str) -> Any:
        return next(s for s in self.gateway.router.snapshot() if s.id == deployment_id)


def openai_deployment(fake: FakeUpstream, name: str, **extra: Any) -> dict[str, Any]:
    return {"id": name, "provider": "openai", "base_url": fake.base_url(name, "openai"),
            "api_key_env": "FAKE_UPSTREAM_KEY", "model": "up-model", **extra}


def anthropic_deployment(fake: FakeUpstream, name: str, **extra: Any) -> dict[str, Any]:
    return {"id": name, "provider": "anthropic", "base_url": fake.base_url(name, "anthropic"),
            "api_key_env": "FAKE_UPSTREAM_KEY", "model": "up-model", **extra}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    upstream = FakeUpstream()
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.close()


StartHopbase = Callable[..., Awaitable[Running]]


@pytest.fixture
async def hopbase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[StartHopbase]:
    """Start HopBase with ``models`` (and optional sections); returns a `Running`."""
    servers: list[TestServer] = []
    monkeypatch.setenv("FAKE_UPSTREAM_KEY", "sk-upstream-secret-0000")

    async def start(models: dict[str, Any], env: dict[str, str] | None = None,
                    **sections: Any) -> Running:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        document = {
            "server": {**FAST_SERVER, **sections.pop("server", {})},
            "routing": {**FAST_ROUTING, **sections.pop("routing", {})},
            "logs": {"path": str(tmp_path / "hopbase.db"), **sections.pop("logs", {})},
            "models": models,
            **sections,
        }
        path = tmp_path / "deployments.yaml"
        path.write_text(yaml.safe_dump(document))
        config = load_config(path)
        server = TestServer(make_app(config), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return Running(server, config)

    yield start
    for server in servers:
        await server.close()
