"""Every request-log store answers the same: the SQLite cases, run on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from hopbase.config import Secret
from hopbase.logs import (
    LogBackend,
    LogPosition,
    LogQuery,
    LogRow,
    RequestLog,
    SqliteBackend,
    parse_log_query,
)
from hopbase.logs_postgres import PostgresBackend
from hopbase.records import AttemptRecord, RequestRecord
from tests.test_logs import DAY, NOW, SPEC_JSON, SPEC_RECORD, ids, make_record


@attrs.define
class Store:
    """Makes `RequestLog`s over one store, so a test can close and reopen it."""

    make_backend: Callable[[], LogBackend]
    _opened: list[RequestLog] = attrs.field(factory=list)

    def open(self, backend: LogBackend | None = None, **settings: Any) -> RequestLog:
        request_log = RequestLog("", backend=backend or self.make_backend(), **settings)
        self._opened.append(request_log)
        return request_log

    async def close_all(self) -> None:
        for request_log in self._opened:
            await request_log.close()


@pytest.fixture(params=["sqlite", "postgres"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], LogBackend]:
    """New backends over one store: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        path = str(tmp_path / "requests.db")
        return lambda: SqliteBackend(path)
    secret: Secret = request.getfixturevalue("postgres_secret")
    return lambda: PostgresBackend(secret)


@pytest.fixture
async def store(make_backend: Callable[[], LogBackend]) -> AsyncIterator[Store]:
    opened = Store(make_backend)
    yield opened
    await opened.close_all()


@pytest.fixture
async def log(store: Store) -> RequestLog:
    request_log = store.open(clock=lambda: NOW)
    await request_log.start()
    return request_log


async def write_all(log: RequestLog, *records: RequestRecord) -> None:
    for record in records:
        log.write(record)
    await log.flush()


async def test_query_is_newest_first(log: RequestLog) -> None:
    await write_all(log, *(make_record(number, NOW + number) for number in (2, 1, 3)))
    page = await log.query(LogQuery())
    assert ids(page) == ["req_0003", "req_0002", "req_0001"]
    assert page["nextCursor"] is None


async def test_ties_order_ids_by_bytes_whatever_the_locale(log: RequestLog) -> None:
    names = ["req-b", "REQ_z", "req_a", "req_B", "req-a", "req_0"]
    await write_all(log, *(make_record(0, NOW, id=name) for name in names))
    first = await log.query(LogQuery(limit=4))
    second = await log.query(LogQuery(limit=4, cursor=first["nextCursor"]))
    assert ids(first) + ids(second) == ["req_a", "req_B", "req_0", "req-b", "req-a", "REQ_z"]


async def test_filters(log: RequestLog) -> None:
    retried = (AttemptRecord("sim-b", "demo", "rate_limited", 429, duration_ms=5.0),
               AttemptRecord("sim-a", "demo", "success", 200, duration_ms=9.0))
    await write_all(
        log,
        make_record(1, NOW - 30),
        make_record(2, NOW - 20, model="other", deployment="other-a", key=None),
        make_record(3, NOW - 10, status=502, key="team-b", deployment=None,
                    attempts=(AttemptRecord("sim-b", "demo", "error", 500),)),
        make_record(4, NOW, attempts=retried),
    )

    async def matching(**query: str) -> list[str]:
        return ids(await log.query(parse_log_query(query)))

    assert await matching(model="demo") == ["req_0004", "req_0003", "req_0001"]
    assert await matching(model="other") == ["req_0002"]
    assert await matching(deployment="sim-b") == ["req_0004", "req_0003"]
    assert await matching(deployment="other-a") == ["req_0002"]
    assert await matching(deployment="sim") == []
    assert await matching(status="502") == ["req_0003"]
    assert await matching(key="team-b") == ["req_0003"]
    assert await matching(since=str(NOW - 20)) == ["req_0004", "req_0003", "req_0002"]
    assert await matching(until="2027-01-15T07:59:50Z") == ["req_0002", "req_0001"]
    assert await matching(since=str(NOW - 20), until=str(NOW - 10)) == ["req_0002"]
    assert await matching(model="demo", status="200", limit="1") == ["req_0004"]


async def test_cursor_paging_visits_every_record_once(log: RequestLog) -> None:
    # Three records share each timestamp, so page ends fall inside ties; they are
    # stored out of order, so insertion order cannot stand in for the id order.
    shuffled = [(number * 97) % 250 for number in range(250)]
    await write_all(log, *(make_record(number, NOW + number // 3) for number in shuffled))
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await log.query(LogQuery(limit=100, cursor=cursor))
        pages.append(ids(page))
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert [len(page) for page in pages] == [100, 100, 50]
    expected = sorted((make_record(n, NOW + n // 3) for n in range(250)),
                      key=lambda record: (record.created_at, record.id), reverse=True)
    assert [request_id for page in pages for request_id in page] == [r.id for r in expected]


async def test_cursor_keeps_filters_when_paging(log: RequestLog) -> None:
    await write_all(log, *(make_record(number, NOW + number, status=200 + number % 2)
                           for number in range(10)))
    first = await log.query(LogQuery(status=201, limit=3))
    second = await log.query(LogQuery(status=201, limit=3, cursor=first["nextCursor"]))
    assert ids(first) == ["req_0009", "req_0007", "req_0005"]
    assert ids(second) == ["req_0003", "req_0001"]
    assert second["nextCursor"] is None


async def test_fractional_timestamps_page_exactly(log: RequestLog) -> None:
    # One ulp apart: a store that rounds created_at would tie them or lose one at the cursor.
    moments = [NOW + 0.1, NOW + 0.2, math.nextafter(NOW + 0.3, math.inf), NOW + 0.3]
    await write_all(log, *(make_record(n, moment) for n, moment in enumerate(moments)))
    first = await log.query(LogQuery(limit=1))
    rest = await log.query(LogQuery(limit=10, cursor=first["nextCursor"]))
    assert ids(first) + ids(rest) == ["req_0002", "req_0003", "req_0001", "req_0000"]


async def test_records_survive_close_and_reopen(store: Store) -> None:
    first = store.open(clock=lambda: NOW)
    await first.start()
    for number in range(3):
        first.write(make_record(number, NOW + number))
    await first.close()
    reopened = store.open(clock=lambda: NOW)
    await reopened.start()
    assert ids(await reopened.query(LogQuery())) == ["req_0002", "req_0001", "req_0000"]


async def test_retention_deletes_old_records_at_start(store: Store) -> None:
    first = store.open(retention_days=30, clock=lambda: NOW)
    await first.start()
    first.write(make_record(1, NOW - 40 * DAY))
    first.write(make_record(2, NOW - 29 * DAY, deployment="sim-b"))
    await first.close()
    later = store.open(retention_days=30, clock=lambda: NOW + 2 * DAY)
    await later.start()
    assert ids(await later.query(LogQuery())) == []
    assert ids(await later.query(LogQuery(deployment="sim-b"))) == []


async def test_prune_deletes_only_records_past_retention(log: RequestLog) -> None:
    await write_all(log, make_record(1, NOW - 31 * DAY), make_record(2, NOW - 29 * DAY))
    assert await log.prune() == 1
    assert ids(await log.query(LogQuery())) == ["req_0002"]


async def test_write_never_awaits(log: RequestLog) -> None:
    assert not inspect.iscoroutinefunction(RequestLog.write)
    for number in range(1000):
        log.write(make_record(number, NOW + number))
    # No await happened, so the flusher cannot have run: all 1000 are still queued.
    assert log.pending == 1000
    await log.flush()
    assert log.pending == 0
    assert len(ids(await log.query(LogQuery(limit=1000)))) == 1000


async def test_full_batch_is_flushed_by_the_background_task(store: Store) -> None:
    request_log = store.open(flush_interval_s=60, batch_size=5)
    await request_log.start()
    for number in range(5):
        request_log.write(make_record(number, NOW + number))
    for _ in range(500):  # the flush runs on a worker thread or a database connection
        if request_log.pending == 0 and ids(await request_log.query(LogQuery())):
            break
        await asyncio.sleep(0.01)
    assert len(ids(await request_log.query(LogQuery()))) == 5


async def test_close_stores_what_is_still_queued(store: Store) -> None:
    request_log = store.open(flush_interval_s=60)
    await request_log.start()
    request_log.write(make_record(1))
    await request_log.close()
    request_log.write(make_record(2))
    assert request_log.dropped == 1
    reopened = store.open()
    await reopened.start()
    assert ids(await reopened.query(LogQuery())) == ["req_0001"]


@attrs.define
class FailingOnce:
    """A real backend whose first write fails, like a locked file or a dropped connection."""

    _backend: LogBackend
    failed: bool = False

    async def start(self) -> None:
        await self._backend.start()

    async def write_batch(self, records: Sequence[RequestRecord]) -> None:
        if not self.failed:
            self.failed = True
            raise OSError("connection reset")
        await self._backend.write_batch(records)

    async def query(self, params: LogQuery, after: LogPosition | None, limit: int) -> list[LogRow]:
        return await self._backend.query(params, after, limit)

    async def delete_before(self, cutoff: float) -> int:
        return await self._backend.delete_before(cutoff)

    async def close(self) -> None:
        await self._backend.close()


async def test_failed_batch_is_kept_and_retried(store: Store) -> None:
    request_log = store.open(FailingOnce(store.make_backend()), flush_interval_s=60)
    await request_log.start()
    request_log.write(make_record(1))
    with pytest.raises(OSError):
        await request_log.flush()
    assert request_log.pending == 1
    await request_log.flush()
    assert ids(await request_log.query(LogQuery())) == ["req_0001"]


async def test_duplicate_request_ids_are_both_kept(log: RequestLog) -> None:
    await write_all(log, make_record(1, NOW), make_record(1, NOW + 1))
    assert ids(await log.query(LogQuery())) == ["req_0001", "req_0001"]


async def test_record_json_has_the_spec_shape(log: RequestLog) -> None:
    await write_all(log, SPEC_RECORD)
    assert (await log.query(LogQuery()))["data"] == [SPEC_JSON]
