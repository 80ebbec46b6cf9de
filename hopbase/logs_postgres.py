"""`PostgresBackend`: the request log in PostgreSQL, one log shared by every replica.

Same query semantics as `SqliteBackend` (see `hopbase.logs`): newest first by
``(created_at DESC, id DESC)``, the same filters, the same cursor positions. So that
the order of ids matches SQLite's byte order whatever the database's locale, ``id``
is stored with ``COLLATE "C"``; ``created_at`` is a ``double precision`` of unix
seconds, so a cursor's position compares exactly with the stored value.

Schema changes are numbered scripts in `MIGRATIONS`. At start-up `migrate` applies
the ones the database has not seen, in one transaction under an advisory lock, so
replicas starting together migrate once; ``hopbase_schema_version`` lists each
applied version with its time. A database migrated by a newer HopBase is refused.

Every deployment a request touched (served or failed) is in the ``deployments``
array, behind a GIN index, which the ``deployment`` filter searches.

An unreachable database at start-up stops the server (like a bad config); later
outages are survived by `RequestLog`, which keeps the unstored records and retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import orjson

from hopbase.config import Secret
from hopbase.errors import LogStoreError
from hopbase.logs import LogPosition, LogQuery, LogRow, record_to_json
from hopbase.records import RequestRecord

logger = logging.getLogger(__name__)

# "hopbase" in ASCII: the advisory lock that serialises migrations across replicas.
MIGRATION_LOCK = 0x686F7062617365
MIGRATIONS: tuple[str, ...] = (
    # ``id`` is not unique on purpose, as in SQLite: a client may reuse its x-request-id.
    """
    CREATE TABLE hopbase_request_log (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text COLLATE "C" NOT NULL,
        created_at double precision NOT NULL,
        model text NOT NULL,
        deployment text,
        deployments text[] NOT NULL,
        status integer NOT NULL,
        key text,
        document json NOT NULL);
    CREATE INDEX hopbase_request_log_created ON hopbase_request_log (created_at, id, seq);
    CREATE INDEX hopbase_request_log_model ON hopbase_request_log (model, created_at);
    CREATE INDEX hopbase_request_log_status ON hopbase_request_log (status, created_at);
    CREATE INDEX hopbase_request_log_key ON hopbase_request_log (key, created_at);
    CREATE INDEX hopbase_request_log_deployments ON hopbase_request_log USING gin (deployments);
    """,
)
_COLUMNS = ("id", "created_at", "model", "deployment", "deployments", "status", "key", "document")


async def migrate(connection: asyncpg.Connection, migrations: Sequence[str] = MIGRATIONS) -> int:
    """Apply the ``migrations`` the database has not seen; return its schema version.

    Raises:
        LogStoreError: the database has a newer schema than ``migrations`` know.
    """
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS hopbase_schema_version ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await connection.fetchval(
            "SELECT coalesce(max(version), 0) FROM hopbase_schema_version"
        )
        if current > len(migrations):
            raise LogStoreError(
                f"request log: the database has schema version {current}, this HopBase knows"
                f" up to {len(migrations)}; upgrade HopBase"
            )
        for version in range(current + 1, len(migrations) + 1):
            await connection.execute(migrations[version - 1])
            await connection.execute(
                "INSERT INTO hopbase_schema_version (version) VALUES ($1)", version
            )
            logger.info("request log: PostgreSQL schema migrated to version %d", version)
    return len(migrations)


def _row(record: RequestRecord) -> tuple[Any, ...]:
    """The column values of ``record``, in `_COLUMNS` order."""
    deployments = {attempt.deployment for attempt in record.attempts}
    if record.deployment is not None:
        deployments.add(record.deployment)
    document = orjson.dumps(record_to_json(record)).decode()
    return (record.id, record.created_at, record.model, record.deployment,
            sorted(deployments), record.status, record.key, document)


def _where(params: LogQuery, after: LogPosition | None) -> tuple[str, list[Any]]:
    """The SQL ``WHERE`` clause (``$n`` placeholders) and its arguments."""
    filters = (
        ("model = {}", params.model),
        ("status = {}", params.status),
        ("key = {}", params.key),
        ("deployments @> ARRAY[{}::text]", params.deployment),
        ("created_at >= {}", params.since),
        ("created_at < {}", params.until),
    )
    clauses: list[str] = []
    arguments: list[Any] = []
    for template, wanted in filters:
        if wanted is not None:
            arguments.append(wanted)
            clauses.append(template.format(f"${len(arguments)}"))
    if after is not None:
        arguments.extend(after)
        clauses.append(f"(created_at, id) < (${len(arguments) - 1}, ${len(arguments)})")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), arguments


class PostgresBackend:
    """`LogBackend` on PostgreSQL through an asyncpg connection pool.

    Args:
        dsn: the ``postgresql://…`` DSN, read from the variable named by ``logs.dsn_env``.
        pool_size: most connections held open.
        connect_timeout_s: longest wait for one connection.
        command_timeout_s: longest wait for one statement.
        migrations: the schema scripts (tests add to them).
    """

    def __init__(
        self, dsn: Secret, *, pool_size: int = 4, connect_timeout_s: float = 10.0,
        command_timeout_s: float = 30.0, migrations: Sequence[str] = MIGRATIONS,
    ) -> None:
        self._dsn = dsn
        self._pool_size = pool_size
        self._connect_timeout_s = connect_timeout_s
        self._command_timeout_s = command_timeout_s
        self._migrations = tuple(migrations)
        self._connections: asyncpg.Pool | None = None

    async def start(self) -> None:
        """Open the pool and create or migrate the schema.

        Raises:
            LogStoreError: the database cannot be reached, refuses us, or is too new.
        """
        try:
            pool = await asyncpg.create_pool(
                self._dsn.value, min_size=1, max_size=self._pool_size,
                timeout=self._connect_timeout_s, command_timeout=self._command_timeout_s,
                server_settings={"application_name": "hopbase"},
            )
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            raise LogStoreError(
                f"request log: cannot open PostgreSQL at ${self._dsn.env}: {self._redact(error)}"
            ) from None
        try:
            async with pool.acquire() as connection:
                await migrate(connection, self._migrations)
        except asyncpg.PostgresError as error:  # no right to create tables, for example
            await pool.close()
            raise LogStoreError(f"request log: cannot create or migrate the schema at"
                                f" ${self._dsn.env}: {self._redact(error)}") from None
        except BaseException:
            await pool.close()
            raise
        self._connections = pool

    async def write_batch(self, records: Sequence[RequestRecord]) -> None:
        """Store ``records`` in one ``COPY`` (one transaction)."""
        async with self._pool().acquire() as connection:
            await connection.copy_records_to_table(
                "hopbase_request_log", records=[_row(record) for record in records],
                columns=_COLUMNS,
            )

    async def query(self, params: LogQuery, after: LogPosition | None, limit: int) -> list[LogRow]:
        """At most ``limit`` matching rows, newest first, strictly after ``after``."""
        where, arguments = _where(params, after)
        sql = (
            f"SELECT created_at, id, document FROM hopbase_request_log{where}"
            f" ORDER BY created_at DESC, id DESC, seq DESC LIMIT ${len(arguments) + 1}"
        )
        try:
            rows = await self._pool().fetch(sql, *arguments, limit)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                OSError) as error:
            raise LogStoreError(f"the request log is unreachable: {type(error).__name__}") from None
        return [LogRow(row["created_at"], row["id"], orjson.loads(row["document"])) for row in rows]

    async def delete_before(self, cutoff: float) -> int:
        """Delete records created before ``cutoff``; return how many."""
        status = await self._pool().execute(
            "DELETE FROM hopbase_request_log WHERE created_at < $1", cutoff
        )
        return int(status.split()[-1])

    async def close(self) -> None:
        """Close the pool; connections still busy after the command timeout are cut."""
        pool, self._connections = self._connections, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), self._command_timeout_s)
        except TimeoutError:
            pool.terminate()

    def _pool(self) -> asyncpg.Pool:
        if self._connections is None:
            raise RuntimeError("the request log is not started")
        return self._connections

    def _redact(self, error: BaseException) -> str:
        """``error`` as text, without the DSN or the password in it."""
        text = str(error) or type(error).__name__
        secrets = [self._dsn.value]
        if "://" in self._dsn.value:
            password = urlsplit(self._dsn.value).password
            secrets += [password] if password else []
        for secret in secrets:
            text = text.replace(secret, "[redacted]")
        return text
