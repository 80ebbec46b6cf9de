"""PostgreSQL request log: schema creation and migration at start-up, and start-up errors."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest

from hopbase.config import Secret
from hopbase.logs import LogQuery, RequestLog
from hopbase.logs_postgres import MIGRATIONS, LogStoreError, PostgresBackend
from tests.logs.conftest import free_port
from tests.test_logs import NOW, ids, make_record

ADD_REGION = "ALTER TABLE hopbase_request_log ADD COLUMN region text"


async def versions(dsn: str) -> list[int]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT version FROM hopbase_schema_version ORDER BY version")
    finally:
        await connection.close()
    return [row["version"] for row in rows]


async def columns(dsn: str) -> list[str]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'hopbase_request_log' ORDER BY ordinal_position"
        )
    finally:
        await connection.close()
    return [row["column_name"] for row in rows]


async def test_schema_is_created_once_and_its_version_recorded(
    postgres_secret: Secret, postgres_dsn: str
) -> None:
    for _ in range(2):
        backend = PostgresBackend(postgres_secret)
        await backend.start()
        await backend.close()
    assert await versions(postgres_dsn) == [1]
    assert await columns(postgres_dsn) == ["seq", "id", "created_at", "model", "deployment",
                                           "deployments", "status", "key", "document"]


async def test_replicas_starting_together_migrate_once(
    postgres_secret: Secret, postgres_dsn: str
) -> None:
    backends = [PostgresBackend(postgres_secret) for _ in range(3)]
    await asyncio.gather(*(backend.start() for backend in backends))
    for backend in backends:
        await backend.close()
    assert await versions(postgres_dsn) == [1]


async def test_a_new_migration_is_applied_at_start_and_keeps_the_records(
    postgres_secret: Secret, postgres_dsn: str
) -> None:
    first = RequestLog("", backend=PostgresBackend(postgres_secret), clock=lambda: NOW)
    await first.start()
    first.write(make_record(1, NOW))
    await first.close()
    newer = PostgresBackend(postgres_secret, migrations=(*MIGRATIONS, ADD_REGION))
    upgraded = RequestLog("", backend=newer, clock=lambda: NOW)
    await upgraded.start()
    try:
        assert ids(await upgraded.query(LogQuery())) == ["req_0001"]
    finally:
        await upgraded.close()
    assert await versions(postgres_dsn) == [1, 2]
    assert (await columns(postgres_dsn))[-1] == "region"


async def test_a_database_migrated_by_a_newer_hopbase_is_refused(postgres_secret: Secret) -> None:
    newer = PostgresBackend(postgres_secret, migrations=(*MIGRATIONS, ADD_REGION))
    await newer.start()
    await newer.close()
    with pytest.raises(LogStoreError, match="schema version 2, this HopBase knows up to 1"):
        await PostgresBackend(postgres_secret).start()


async def test_an_unreachable_database_fails_start_without_showing_the_password() -> None:
    password = "pw-sentinel-4242"
    dsn = Secret(env="HOPBASE_LOG_DSN",
                 value=f"postgresql://hopbase:{password}@127.0.0.1:{free_port()}/nowhere")
    with pytest.raises(LogStoreError) as raised:
        await PostgresBackend(dsn, connect_timeout_s=2).start()
    message = str(raised.value)
    assert message.startswith("request log: cannot open PostgreSQL at $HOPBASE_LOG_DSN: ")
    assert password not in message
    assert password not in repr(dsn)


async def test_a_missing_database_fails_start_naming_it(postgres_cluster: str) -> None:
    dsn = Secret(env="HOPBASE_LOG_DSN", value=postgres_cluster.rsplit("/", 1)[0] + "/no_such_db")
    with pytest.raises(LogStoreError, match='database "no_such_db" does not exist'):
        await PostgresBackend(dsn).start()


async def test_using_a_backend_before_start_is_an_error(postgres_secret: Secret) -> None:
    with pytest.raises(RuntimeError, match="not started"):
        await PostgresBackend(postgres_secret).query(LogQuery(), None, 10)


async def test_serve_exits_1_with_one_line_when_the_log_database_is_unreachable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deployments.yaml"
    path.write_text("logs: {backend: postgres, dsn_env: HOPBASE_TEST_LOG_DSN}\n"
                    "models: {demo: {deployments: [{id: sim, provider: simulated}]}}\n")
    dsn = f"postgresql://hopbase:pw-sentinel-4242@127.0.0.1:{free_port()}/nowhere"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hopbase", "serve", "--config", str(path), "--port", str(free_port()),
        env={**os.environ, "HOPBASE_TEST_LOG_DSN": dsn},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    text = output.decode()
    assert "ERROR hopbase request log: cannot open PostgreSQL at $HOPBASE_TEST_LOG_DSN: " in text
    assert "Traceback" not in text
    assert "pw-sentinel-4242" not in text


async def test_a_role_that_cannot_create_tables_fails_start_with_a_clear_message(
    postgres_dsn: str,
) -> None:
    owner = await asyncpg.connect(postgres_dsn)
    try:
        await owner.execute("CREATE ROLE reader LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        reader = Secret(env="HOPBASE_LOG_DSN",
                        value=postgres_dsn.replace("//hopbase@", "//reader@"))
        with pytest.raises(LogStoreError, match="cannot create or migrate the schema at "
                                                "\\$HOPBASE_LOG_DSN: permission denied"):
            await PostgresBackend(reader).start()
    finally:
        await owner.execute("DROP OWNED BY reader; DROP ROLE reader")
        await owner.close()
