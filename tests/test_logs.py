"""The request log's JSON shape and query parsing (store behaviour: tests/logs/).

The helpers here (records, SPEC's example) are shared with tests/logs/test_backends.py.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from hopbase.errors import InvalidRequest
from hopbase.logs import (
    LogQuery,
    parse_log_query,
    record_to_json,
)
from hopbase.records import AttemptRecord, RequestRecord

NOW = 1_800_000_000.0
DAY = 86400.0


def make_record(number: int, created_at: float = NOW, **fields: Any) -> RequestRecord:
    deployment = fields.pop("deployment", "sim-a")
    values: dict[str, Any] = dict(
        id=f"req_{number:04d}",
        created_at=created_at,
        endpoint="chat.completions",
        model="demo",
        key="team-a",
        stream=False,
        status=200,
        duration_s=0.5,
        deployment=deployment,
        attempts=(AttemptRecord(deployment, "demo", "success", 200, duration_ms=12.0),),
    )
    values.update(fields)
    return RequestRecord(**values)


def ids(page: dict[str, Any]) -> list[str]:
    return [document["id"] for document in page["data"]]


SPEC_RECORD = RequestRecord(
    id="req_abc",
    created_at=1795975200.123,
    endpoint="chat.completions",
    model="gpt-5.6-sol",
    key="team-a",
    stream=True,
    status=200,
    duration_s=3.2,
    cache="miss",
    deployment="openai-a",
    served_by_group="gpt-5.6-sol",
    first_output_ms=412.4,
    last_chunk_ms=3120.0,
    input_tokens=14,
    output_tokens=52,
    attempts=(
        AttemptRecord("openai-b", "gpt-5.6-sol", "rate_limited", 429, duration_ms=38.2),
        AttemptRecord(
            "openai-a",
            "gpt-5.6-sol",
            "success",
            200,
            first_output_ms=412.4,
            last_chunk_ms=3120.0,
            input_tokens=14,
            output_tokens=52,
        ),
    ),
)
SPEC_JSON = {
    "id": "req_abc",
    "createdAt": "2026-11-29T18:00:00.123Z",
    "endpoint": "chat.completions",
    "model": "gpt-5.6-sol",
    "key": "team-a",
    "stream": True,
    "status": 200,
    "clientDisconnected": False,
    "cache": "miss",
    "deployment": "openai-a",
    "firstOutputMs": 412,
    "lastChunkMs": 3120,
    "usage": {"inputTokens": 14, "outputTokens": 52, "totalTokens": 66},
    "attempts": [
        {"deployment": "openai-b", "outcome": "rate_limited", "status": 429, "durationMs": 38},
        {
            "deployment": "openai-a",
            "outcome": "success",
            "status": 200,
            "firstOutputMs": 412,
            "lastChunkMs": 3120,
        },
    ],
}


def test_record_json_after_fallback_and_error() -> None:
    record = attrs.evolve(
        SPEC_RECORD,
        served_by_group="claude-sonnet-5",
        deployment="anthropic-a",
        status=502,
        first_output_ms=None,
        last_chunk_ms=None,
        key=None,
        cache=None,
        error_type="upstream_error",
        attempts=(
            AttemptRecord(
                "anthropic-a",
                "claude-sonnet-5",
                "timeout",
                None,
                error_type="connect_timeout",
                hedge=True,
            ),
        ),
    )
    document = record_to_json(record)
    assert document["fallback"] == "claude-sonnet-5"
    assert document["errorType"] == "upstream_error"
    assert (document["key"], document["cache"], document["firstOutputMs"]) == (None, None, None)
    assert document["attempts"] == [
        {
            "deployment": "anthropic-a",
            "outcome": "timeout",
            "status": None,
            "errorType": "connect_timeout",
            "model": "claude-sonnet-5",
            "hedge": True,
        }
    ]


def test_parse_log_query_accepts_every_filter() -> None:
    query = parse_log_query(
        {
            "model": "demo",
            "deployment": "sim-a",
            "status": "429",
            "key": "team-a",
            "since": "2026-11-29T18:00:00Z",
            "until": "1796148000.5",
            "limit": "1000",
            "cursor": "",
        }
    )
    assert query == LogQuery(
        model="demo",
        deployment="sim-a",
        status=429,
        key="team-a",
        since=1795975200.0,
        until=1796148000.5,
        limit=1000,
        cursor=None,
    )
    assert parse_log_query({}) == LogQuery(limit=100)
    assert parse_log_query({"since": "2026-11-29T19:00:00+01:00"}).since == 1795975200.0


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "0"},
        {"limit": "1001"},
        {"limit": "ten"},
        {"status": "abc"},
        {"status": "99"},
        {"since": "yesterday"},
        {"until": "nan"},
        {"since": "20", "until": "10"},
        {"cursor": "not-a-cursor"},
        {"cursor": "WzEsMl0"},
        {"modle": "demo"},
    ],
)
def test_parse_log_query_rejects_bad_values(query: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest):
        parse_log_query(query)
