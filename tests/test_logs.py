"""The request log: batching, filters, cursor paging, persistence, retention, JSON shape."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from hopbase.errors import InvalidRequest
from hopbase.logs import (
    LogQuery,
    RequestLog,
    SqliteBackend,
    parse_log_query,
    record_to_json,
)
from hopbase.records import AttemptRecord, RequestRecord

NOW = 1_800_000_000.0
DAY = 86400.0


def make_record(number: int, created_at: float = NOW, **fields: Any) -> RequestRecord:
    deployment = fields.pop("deployment", "sim-a")
    values: dict[str, Any] = dict(
        id=f"req_{number:04d}", created_at=created_at, endpoint="chat.completions",
        model="demo", key="team-a", stream=False, status=200, duration_s=0.5,
        deployment=deployment,
        attempts=(AttemptRecord(deployment, "demo", "success", 200, duration_ms=12.0),),
    )
    values.update(fields)
    return RequestRecord(**values)


def ids(page: dict[str, Any]) -> list[str]:
    return [document["id"] for document in page["data"]]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "requests.db")


@pytest.fixture
async def log(path: str) -> AsyncIterator[RequestLog]:
    request_log = RequestLog(path, clock=lambda: NOW)
    await request_log.start()
    yield request_log
    await request_log.close()


async def store(log: RequestLog, *records: RequestRecord) -> None:
    for record in records:
        log.write(record)
    await log.flush()


async def test_query_is_newest_first(log: RequestLog) -> None:
    await store(log, *(make_record(number, NOW + number) for number in (2, 1, 3)))
    page = await log.query(LogQuery())
    assert ids(page) == ["req_0003", "req_0002", "req_0001"]
    assert page["nextCursor"] is None


async def test_filters(log: RequestLog) -> None:
    retried = (AttemptRecord("sim-b", "demo", "rate_limited", 429, duration_ms=5.0),
               AttemptRecord("sim-a", "demo", "success", 200, duration_ms=9.0))
    await store(
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
    await store(log, *(make_record(number, NOW + number // 3) for number in shuffled))
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = await log.query(LogQuery(limit=100, cursor=cursor))
        pages.append(ids(page))
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert [len(page) for page in pages] == [100, 100, 50]
    seen = [request_id for page in pages for request_id in page]
    assert len(set(seen)) == 250
    expected = sorted((make_record(n, NOW + n // 3) for n in range(250)),
                      key=lambda record: (record.created_at, record.id), reverse=True)
    assert seen == [record.id for record in expected]


async def test_cursor_keeps_filters_when_paging(log: RequestLog) -> None:
    await store(log, *(make_record(number, NOW + number, status=200 + number % 2)
                       for number in range(10)))
    first = await log.query(LogQuery(status=201, limit=3))
    second = await log.query(LogQuery(status=201, limit=3, cursor=first["nextCursor"]))
    assert ids(first) == ["req_0009", "req_0007", "req_0005"]
    assert ids(second) == ["req_0003", "req_0001"]
    assert second["nextCursor"] is None


async def test_records_survive_close_and_reopen(path: str) -> None:
    first = RequestLog(path, clock=lambda: NOW)
    await first.start()
    for number in range(3):
        first.write(make_record(number, NOW + number))
    await first.close()
    reopened = RequestLog(path, clock=lambda: NOW)
    await reopened.start()
    try:
        assert ids(await reopened.query(LogQuery())) == ["req_0002", "req_0001", "req_0000"]
    finally:
        await reopened.close()


async def test_retention_deletes_old_records_at_start(path: str) -> None:
    first = RequestLog(path, retention_days=30, clock=lambda: NOW)
    await first.start()
    first.write(make_record(1, NOW - 40 * DAY))
    first.write(make_record(2, NOW - 29 * DAY, deployment="sim-b"))
    await first.close()
    later = RequestLog(path, retention_days=30, clock=lambda: NOW + 2 * DAY)
    await later.start()
    try:
        assert ids(await later.query(LogQuery())) == []
        assert ids(await later.query(LogQuery(deployment="sim-b"))) == []
    finally:
        await later.close()


async def test_prune_deletes_only_records_past_retention(log: RequestLog) -> None:
    await store(log, make_record(1, NOW - 31 * DAY), make_record(2, NOW - 29 * DAY))
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


async def test_full_batch_is_flushed_by_the_background_task(path: str) -> None:
    request_log = RequestLog(path, flush_interval_s=60, batch_size=5)
    await request_log.start()
    try:
        for number in range(5):
            request_log.write(make_record(number, NOW + number))
        for _ in range(500):  # the flush runs on a real worker thread
            if request_log.pending == 0 and ids(await request_log.query(LogQuery())):
                break
            await asyncio.sleep(0.01)
        assert len(ids(await request_log.query(LogQuery()))) == 5
    finally:
        await request_log.close()


async def test_close_stores_what_is_still_queued(path: str) -> None:
    request_log = RequestLog(path, flush_interval_s=60)
    await request_log.start()
    request_log.write(make_record(1))
    await request_log.close()
    request_log.write(make_record(2))
    assert request_log.dropped == 1
    reopened = RequestLog(path)
    await reopened.start()
    try:
        assert ids(await reopened.query(LogQuery())) == ["req_0001"]
    finally:
        await reopened.close()


class FailingOnceBackend(SqliteBackend):
    """A real SQLite backend whose first write fails, like a locked file."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.failed = False

    async def write_batch(self, records: Sequence[RequestRecord]) -> None:
        if not self.failed:
            self.failed = True
            raise OSError("disk I/O error")
        await super().write_batch(records)


async def test_failed_batch_is_kept_and_retried(path: str) -> None:
    request_log = RequestLog(path, backend=FailingOnceBackend(path), flush_interval_s=60)
    await request_log.start()
    try:
        request_log.write(make_record(1))
        with pytest.raises(OSError):
            await request_log.flush()
        assert request_log.pending == 1
        await request_log.flush()
        assert ids(await request_log.query(LogQuery())) == ["req_0001"]
    finally:
        await request_log.close()


async def test_duplicate_request_ids_are_both_kept(log: RequestLog) -> None:
    await store(log, make_record(1, NOW), make_record(1, NOW + 1))
    assert ids(await log.query(LogQuery())) == ["req_0001", "req_0001"]


SPEC_RECORD = RequestRecord(
    id="req_abc", created_at=1795975200.123, endpoint="chat.completions", model="gpt-5.6-sol",
    key="team-a", stream=True, status=200, duration_s=3.2, cache="miss", deployment="openai-a",
    served_by_group="gpt-5.6-sol", first_output_ms=412.4, last_chunk_ms=3120.0,
    input_tokens=14, output_tokens=52,
    attempts=(
        AttemptRecord("openai-b", "gpt-5.6-sol", "rate_limited", 429, duration_ms=38.2),
        AttemptRecord("openai-a", "gpt-5.6-sol", "success", 200,
                      first_output_ms=412.4, last_chunk_ms=3120.0, input_tokens=14,
                      output_tokens=52),
    ),
)
SPEC_JSON = {
    "id": "req_abc", "createdAt": "2026-11-29T18:00:00.123Z", "endpoint": "chat.completions",
    "model": "gpt-5.6-sol", "key": "team-a", "stream": True, "status": 200,
    "clientDisconnected": False, "cache": "miss", "deployment": "openai-a",
    "firstOutputMs": 412, "lastChunkMs": 3120,
    "usage": {"inputTokens": 14, "outputTokens": 52, "totalTokens": 66},
    "attempts": [{"deployment": "openai-b", "outcome": "rate_limited", "status": 429,
                  "durationMs": 38},
                 {"deployment": "openai-a", "outcome": "success", "status": 200,
                  "firstOutputMs": 412, "lastChunkMs": 3120}],
}


async def test_record_json_has_the_spec_shape(log: RequestLog) -> None:
    assert record_to_json(SPEC_RECORD) == SPEC_JSON
    await store(log, SPEC_RECORD)
    assert (await log.query(LogQuery()))["data"] == [SPEC_JSON]


def test_record_json_after_fallback_and_error() -> None:
    record = attrs.evolve(
        SPEC_RECORD, served_by_group="claude-sonnet-5", deployment="anthropic-a", status=502,
        first_output_ms=None, last_chunk_ms=None, key=None, cache=None,
        error_type="upstream_error",
        attempts=(AttemptRecord("anthropic-a", "claude-sonnet-5", "timeout", None,
                                error_type="connect_timeout", hedge=True),),
    )
    document = record_to_json(record)
    assert document["fallback"] == "claude-sonnet-5"
    assert document["errorType"] == "upstream_error"
    assert (document["key"], document["cache"], document["firstOutputMs"]) == (None, None, None)
    assert document["attempts"] == [{
        "deployment": "anthropic-a", "outcome": "timeout", "status": None,
        "errorType": "connect_timeout", "model": "claude-sonnet-5", "hedge": True,
    }]


def test_parse_log_query_accepts_every_filter() -> None:
    query = parse_log_query({
        "model": "demo", "deployment": "sim-a", "status": "429", "key": "team-a",
        "since": "2026-11-29T18:00:00Z", "until": "1796148000.5", "limit": "1000", "cursor": "",
    })
    assert query == LogQuery(model="demo", deployment="sim-a", status=429, key="team-a",
                             since=1795975200.0, until=1796148000.5, limit=1000, cursor=None)
    assert parse_log_query({}) == LogQuery(limit=100)
    assert parse_log_query({"since": "2026-11-29T19:00:00+01:00"}).since == 1795975200.0


@pytest.mark.parametrize("query", [
    {"limit": "0"}, {"limit": "1001"}, {"limit": "ten"}, {"status": "abc"}, {"status": "99"},
    {"since": "yesterday"}, {"until": "nan"}, {"since": "20", "until": "10"},
    {"cursor": "not-a-cursor"}, {"cursor": "WzEsMl0"}, {"modle": "demo"},
])
def test_parse_log_query_rejects_bad_values(query: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest):
        parse_log_query(query)
