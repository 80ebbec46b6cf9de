"""Two HopBase replicas on one PostgreSQL request log: each admin API shows every request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from hopbase.config import load_config
from hopbase.gateway import Gateway
from tests.conftest import Running, StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN_KEY = "hb-admin-replicas-5d1e"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
AUTH = {"admin_key_env": "ADMIN_KEY"}
LOGS = {"backend": "postgres", "dsn_env": "HOPBASE_TEST_LOG_DSN"}


def models(fake: FakeUpstream) -> dict[str, Any]:
    return {
        "gpt": {"deployments": [openai_deployment(fake, "a", weight=1_000_000),
                                openai_deployment(fake, "b", weight=0.000001)]},
        "other": {"deployments": [openai_deployment(fake, "c")]},
    }


async def replica(hopbase: StartHopbase, fake: FakeUpstream, dsn: str, unused: Path) -> Running:
    """A HopBase whose log goes to PostgreSQL; its SQLite path ``unused`` stays unused."""
    env = {"ADMIN_KEY": ADMIN_KEY, "HOPBASE_TEST_LOG_DSN": dsn}
    logs = {**LOGS, "path": str(unused)}
    running = await hopbase(models(fake), env=env, auth=AUTH, logs=logs)
    assert running.gateway.request_log is not None
    return running


async def ask(session: aiohttp.ClientSession, running: Running, request_id: str,
              model: str = "gpt") -> int:
    body = {"model": model, "messages": [{"role": "user", "content": request_id}]}
    async with session.post(running.url + "/v1/chat/completions", json=body,
                            headers={"x-request-id": request_id}) as response:
        await response.read()
        return response.status


async def logs(session: aiohttp.ClientSession, running: Running, **query: str) -> dict[str, Any]:
    async with session.get(running.url + "/admin/logs", headers=ADMIN, params=query) as response:
        assert response.status == 200
        page: dict[str, Any] = await response.json()
        return page


async def stored_ids(dsn: str) -> list[str]:
    """The ids in the PostgreSQL table itself, sorted."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT id FROM hopbase_request_log ORDER BY id")
    finally:
        await connection.close()
    return [row["id"] for row in rows]


def ids(page: dict[str, Any]) -> list[str]:
    return [record["id"] for record in page["data"]]


async def test_each_replica_shows_the_other_replicas_requests_and_they_survive_restart(
    fake: FakeUpstream, hopbase: StartHopbase, postgres_dsn: str, tmp_path: Path
) -> None:
    # a's third request is rejected with a 400 (passed back to the client, not retried).
    fake.script("a", Reply.answer(), Reply.answer(), Reply.status(400))
    one = await replica(hopbase, fake, postgres_dsn, tmp_path / "one.db")
    two = await replica(hopbase, fake, postgres_dsn, tmp_path / "two.db")
    async with aiohttp.ClientSession() as session:
        statuses = [await ask(session, one, f"one-{n}") for n in range(3)]
        statuses += [await ask(session, two, "two-0"), await ask(session, two, "two-1", "other")]
        assert statuses == [200, 200, 400, 200, 200]
        for running in (one, two):
            await running.gateway.request_log.flush()  # type: ignore[union-attr]
        everything = ["two-1", "two-0", "one-2", "one-1", "one-0"]
        for running in (one, two):
            assert ids(await logs(session, running)) == everything
            assert ids(await logs(session, running, model="other")) == ["two-1"]
            assert ids(await logs(session, running, deployment="c")) == ["two-1"]
            assert ids(await logs(session, running, deployment="a")) == everything[1:]
            assert ids(await logs(session, running, status="400")) == ["one-2"]
            first = await logs(session, running, limit="3")
            second = await logs(session, running, limit="3", cursor=first["nextCursor"])
            assert ids(first) + ids(second) == everything
            assert second["nextCursor"] is None
        records = (await logs(session, one))["data"]
        assert (await logs(session, two))["data"] == records
        assert records[1]["deployment"] == "a" and records[1]["status"] == 200
    await one.server.close()
    await two.server.close()
    assert await stored_ids(postgres_dsn) == sorted(everything)
    assert not any(tmp_path.glob("*.db"))
    again = await replica(hopbase, fake, postgres_dsn, tmp_path / "again.db")
    async with aiohttp.ClientSession() as session:
        assert (await logs(session, again))["data"] == records


def test_postgres_backend_without_its_dsn_variable_logs_nothing_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOPBASE_TEST_LOG_DSN", raising=False)
    path = tmp_path / "deployments.yaml"
    path.write_text("logs: {backend: postgres, dsn_env: HOPBASE_TEST_LOG_DSN}\n"
                    "models: {demo: {deployments: [{id: sim, provider: simulated}]}}\n")
    config = load_config(path)
    assert Gateway.build(config).request_log is None
    assert [line for line in config.warnings if "HOPBASE_TEST_LOG_DSN" in line] == [
        "HOPBASE_TEST_LOG_DSN is not set: logs.backend postgres has no DSN"]



async def test_admin_logs_answers_503_while_postgres_refuses_connections(
    hopbase: StartHopbase, fake: FakeUpstream, postgres_dsn: str, postgres_cluster: str,
    tmp_path: Path,
) -> None:
    running = await replica(hopbase, fake, postgres_dsn, tmp_path / "unused.db")
    database = postgres_dsn.rsplit("/", 1)[1]
    admin = await asyncpg.connect(postgres_cluster)
    try:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", database)
        async with aiohttp.ClientSession() as session, session.get(
            running.url + "/admin/logs", headers=ADMIN
        ) as response:
            body = await response.json()
            assert response.status == 503
        assert body["error"]["code"] == "log_unavailable"
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        async with aiohttp.ClientSession() as session:
            assert (await logs(session, running))["data"] == []
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
