"""Tests of the benchmark harness's parts (no timings are asserted: the benchmark reports them).

Run with ``.venv/bin/python -m pytest bench/test_bench.py``.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import yaml

from bench import harness, loadgen, mock, peer, processes, profile, report, stack, wrk
from bench.phases import Memory, Run
from hopbase.config import load_config

ROLE_ONLY = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'


def _chunked(*payloads: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


def test_reader_completes_only_at_the_last_chunk_when_fed_byte_by_byte() -> None:
    reader = loadgen.ResponseReader()
    raw = _chunked(ROLE_ONLY, CONTENT)
    completions = [reader.feed(raw[index : index + 1], float(index)) for index in range(len(raw))]
    assert completions == [False] * (len(raw) - 1) + [True]
    assert reader.status == 200


def test_reader_does_not_count_the_empty_role_content_as_output() -> None:
    reader = loadgen.ResponseReader()
    raw = _chunked(ROLE_ONLY, CONTENT)
    content_at = raw.index(b'"content":"Hi"')
    reader.feed(raw[: content_at + len(b'"content":"')], 1.0)
    assert reader.first_output_at is None
    reader.feed(raw[content_at + len(b'"content":"') :], 2.0)
    assert reader.first_output_at == 2.0


def test_reader_reads_a_content_length_body() -> None:
    reader = loadgen.ResponseReader()
    body = b'{"error":{"message":"no"}}'
    head = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n" % len(body)
    assert reader.feed(head + body[:-1], 1.0) is False
    assert reader.feed(body[-1:], 2.0) is True
    assert (reader.status, reader.first_output_at) == (401, None)


def test_percentile_is_nearest_rank() -> None:
    values = [float(value) for value in range(1, 101)]
    assert (loadgen.percentile(values, 50), loadgen.percentile(values, 99)) == (50.0, 99.0)
    assert math.isnan(loadgen.percentile([], 50))


@pytest.fixture
async def mock_port() -> AsyncIterator[int]:
    answers = mock.Answers(chunks=3, interval_s=0.001)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: mock.MockConnection(answers), "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


def _body(model: str, stream: bool) -> bytes:
    return orjson.dumps({"model": model, "messages": stack.MESSAGES, "stream": stream})


async def test_mock_answers_unary_then_a_stream_on_one_connection(mock_port: int) -> None:
    target = loadgen.Target("127.0.0.1", mock_port, stack.CHAT_PATH)
    connection = await loadgen.Connection.open(target.host, mock_port)
    try:
        unary = await connection.send(target.request(_body("chat", False)))
        streamed = await connection.send(target.request(_body("chat", True)))
    finally:
        connection.close()
    assert (unary.status, streamed.status) == (200, 200)
    assert unary.first_output_s is not None and streamed.first_output_s is not None


def test_mock_stream_schedule_is_role_then_paced_chunks() -> None:
    schedule = mock.Answers(chunks=3, interval_s=0.005).stream("chat", include_usage=True)
    offsets = [offset for offset, _ in schedule.steps]
    assert offsets == [0.0, 0.005, 0.01, 0.015]
    assert schedule.steps[-1][1].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert b'"usage":{"prompt_tokens":12' in schedule.steps[-1][1]
    assert schedule.repeat is None


def test_mock_burst_sends_every_chunk_at_the_first_output_time() -> None:
    schedule = mock.Answers(chunks=3, interval_s=0.005).stream("burst", include_usage=False)
    assert [offset for offset, _ in schedule.steps] == [0.0, 0.005, 0.005, 0.005]
    assert b"usage" not in b"".join(payload for _, payload in schedule.steps)


async def test_slow_streams_stay_open_until_closed(mock_port: int) -> None:
    target = loadgen.Target("127.0.0.1", mock_port, stack.CHAT_PATH)
    held = loadgen.OpenStreams()
    await loadgen.open_streams(target, _body("slow", True), 3, held, batch=2)
    assert (len(held.connections), held.failures) == (3, 0)
    assert all(connection.open_now for connection in held.connections)
    held.close()
    assert held.connections == []


async def test_wait_ready_gives_up_on_a_closed_port() -> None:
    with pytest.raises(TimeoutError):
        await loadgen.wait_ready("127.0.0.1", stack.free_port(), "/healthz", timeout_s=0.2)


def test_wrk_result_line_is_parsed() -> None:
    output = ("Running 1s test\n  1 threads and 32 connections\n"
              'BENCH {"requests": 1000, "duration_us": 2000000, "errors": 7, '
              '"status_errors": 5, "p50_us": 400, "p99_us": 2500, "mean_us": 500.0}\n')
    result = wrk.parse(output)
    assert (result.requests, result.succeeded, result.errors) == (1000, 995, 7)
    assert (result.per_second, result.p50_s, result.p99_s) == (497.5, 0.0004, 0.0025)


def test_wrk_output_without_a_result_line_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="wrk printed no result"):
        wrk.parse("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_profile_charges_samples_to_the_innermost_hopbase_frame() -> None:
    text = (
        "main (hopbase/__main__.py:23);handle (hopbase/views.py:109);"
        "send (hopbase/upstream.py:140);_request (aiohttp/client.py:500) 7\n"
        "main (hopbase/__main__.py:23);_handle (aiohttp/web_app.py:521) 3\n"
        "main (hopbase/__main__.py:23);acquire (routing/router.py:137) 2\n"
    )
    parsed = profile.parse_collapsed(text)
    assert parsed.samples == 12
    assert parsed.hopbase == {
        "send (hopbase/upstream.py)": 7,
        "(no HopBase frame: aiohttp server, event loop)": 3,
        "acquire (routing/router.py)": 2,
    }
    assert parsed.package == {"aiohttp": 10, "routing": 2}


def _run(succeeded: int, p50_ms: float, p99_ms: float, errors: int = 0, **cpu: float) -> Run:
    return Run(tool="wrk", succeeded=succeeded, errors=errors, elapsed_s=10.0,
               p50_s=p50_ms / 1000, p99_s=p99_ms / 1000, first_output_p50_s=p50_ms / 1000,
               first_output_p99_s=p99_ms / 1000, **cpu)


def _runs(hopbase_errors: int = 0) -> dict[str, Run]:
    return {
        "unary_direct": _run(400_000, 0.5, 1.0, mock_cpu_s=4.0),
        "unary_hopbase": _run(40_000, 12.0, 20.0, hopbase_errors, hopbase_cpu_s=12.0),
        "latency_direct": _run(300_000, 0.02, 0.05),
        "latency_hopbase": _run(20_000, 0.32, 1.5),
        "stream_direct": _run(3_200, 100.0, 104.0, mock_cpu_s=1.0),
        "stream_hopbase": _run(3_100, 101.0, 106.0, hopbase_cpu_s=5.0),
        "ttft_direct": _run(1_500, 5.2, 6.0),
        "ttft_hopbase": _run(1_400, 6.5, 12.0),
    }


def test_report_rows_compare_against_the_targets() -> None:
    memory = Memory(idle_kib=40 * 1024, open_streams=((500, 500, 40 * 1024 + 500 * 20),))
    results = report.Results(_runs(), memory, workers=None)
    by_figure = {row.figure: row for row in report.rows(results)}
    cpu = by_figure["CPU per non-streaming request (mock / HopBase)"]
    assert (cpu.direct, cpu.hopbase, cpu.met) == (0.01, 0.3, True)
    p50 = by_figure["latency p50, 1 request at a time"]
    assert (p50.comparison, p50.met) == ("+0.30 ms", True)
    streams = by_figure["streams/s, 32 concurrent, 20 chunks 5 ms apart"]
    assert (streams.comparison, streams.met) == ("0.969× direct", True)
    ttft_p50 = by_figure["time to first token p50, 1 stream at a time"]
    assert (ttft_p50.comparison, ttft_p50.met) == ("+1.30 ms", False)
    held = by_figure["RSS with 500 open slow streams"]
    assert held.comparison == "20.0 KiB/stream; 10,000 ≈ 235 MiB"
    assert held.met is True


def test_errors_fail_a_row_that_would_otherwise_pass() -> None:
    results = report.Results(_runs(hopbase_errors=3), None, workers=None)
    rate = next(row for row in report.rows(results) if row.figure.startswith("non-streaming"))
    assert (rate.comparison, rate.met) == ("0.10× direct (3 errors)", False)


def test_markdown_table_has_a_line_per_row() -> None:
    table = report.rows(report.Results(_runs(), None, workers=None))
    lines = report.markdown(table).splitlines()
    assert len(lines) == len(table) + 2
    assert lines[2] == ("| CPU per non-streaming request (mock / HopBase) | ms | 0.01 | 0.30 | "
                        "30.00× the mock's | ≤ 0.4 ms | yes |")


def test_json_turns_nan_into_null() -> None:
    runs = {**_runs(), "unary_direct": _run(0, math.nan, math.nan)}
    results = report.Results(runs, None, workers=None)
    document = report.to_json(results, report.rows(results), {"quick": True})
    assert document["runs"]["unary_direct"]["p50_s"] is None
    assert orjson.loads(orjson.dumps(document))["about"] == {"quick": True}


def test_proc_readings_of_this_process() -> None:
    assert processes.process_cpu_s(os.getpid()) > 0
    assert processes.process_rss_kib(os.getpid()) > 1024
    assert processes.machine_busy_s() >= processes.core_busy_s(0) > 0


def test_an_unpinned_child_gets_every_starting_core_back() -> None:
    everywhere = ",".join(str(core) for core in sorted(processes.STARTING_CORES))
    expected = ["taskset", "-c", everywhere] if shutil.which("taskset") else []
    assert processes.pinning(None) == expected


def test_bench_config_is_a_valid_hopbase_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOPBASE_BENCH_KEY", stack.CLIENT_KEY)
    monkeypatch.setenv("BENCH_UPSTREAM_KEY", stack.UPSTREAM_KEY)
    path = tmp_path / "hopbase.yaml"
    path.write_text(yaml.safe_dump(stack.hopbase_config(19090, tmp_path / "log.db")))
    config = load_config(str(path))
    assert sorted(config.models) == ["burst", "chat", "slow"]
    assert [d.upstream_model for d in config.models["chat"].deployments] == ["chat", "chat"]
    assert all(d.enabled for d in config.models["slow"].deployments)
    assert config.cache.enabled is False


def test_litellm_config_has_two_deployments_of_each_model_on_the_mock() -> None:
    config = peer.litellm_config(19090, master_key="sk-test")
    base = "http://127.0.0.1:19090/v1"
    assert config["model_list"] == [
        {"model_name": model,
         "litellm_params": {"model": f"openai/{model}", "api_base": base, "api_key": "dummy"},
         "model_info": {"id": f"{model}-{letter}"}}
        for model in ("chat", "burst", "slow") for letter in "ab"
    ]
    assert config["router_settings"] == {"routing_strategy": "latency-based-routing"}
    assert config["general_settings"] == {"master_key": "sk-test"}
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_litellm_runs_without_telemetry_or_database_on_one_worker(tmp_path: Path) -> None:
    assert peer.environment()["LITELLM_TELEMETRY"] == "False"
    assert peer.UNSET_ENVIRONMENT == ("DATABASE_URL", "DIRECT_URL")
    assert peer.command(tmp_path / "c.yaml", 4000, tmp_path) == [
        str(tmp_path / "bin" / "litellm"), "--config", str(tmp_path / "c.yaml"),
        "--host", "127.0.0.1", "--port", "4000", "--num_workers", "1"]


def _with_litellm(memory: Memory | None) -> report.Results:
    runs = _runs()
    runs.update({
        "unary_litellm": _run(500, 60.0, 90.0, hopbase_cpu_s=9.0),
        "latency_litellm": _run(600, 19.02, 54.05),
        "stream_litellm": _run(250, 130.0, 200.0, hopbase_cpu_s=12.5),
        "ttft_litellm": _run(300, 25.2, 40.0),
    })
    litellm = report.Peer("litellm", "1.0", memory)
    return report.Results(runs, Memory(40 * 1024, ((500, 500, 50 * 1024),)), None, litellm)


def test_table_with_a_peer_has_its_column_beside_hopbase() -> None:
    memory = Memory(idle_kib=330 * 1024, open_streams=((500, 500, 330 * 1024 + 500 * 150),))
    table = report.rows(_with_litellm(memory))
    lines = report.markdown(table, "litellm").splitlines()
    assert lines[0] == ("| figure | unit | direct | hopbase | litellm | hopbase: ratio / added | "
                        "litellm: ratio / added | target (hopbase) | met? |")
    assert len(lines) == len(table) + 2
    assert lines[2] == ("| CPU per non-streaming request (mock / HopBase) | ms | 0.01 | 0.30 | "
                        "18.0 | 30.00× the mock's | 1800.00× the mock's | ≤ 0.4 ms | yes |")
    assert lines[4] == ("| latency p50, 1 request at a time | ms | 0.02 | 0.32 | 19.0 | "
                        "+0.30 ms | +19.00 ms | ≤ +0.5 ms | yes |")
    assert lines[-1] == ("| RSS with 500 open slow streams | MiB | — | 50.0 | 403 | "
                         "20.5 KiB/stream; 10,000 ≈ 240 MiB | "
                         "150.0 KiB/stream; 10,000 ≈ 1795 MiB | "
                         "≤ 32 KiB/stream; 10,000 < 400 MiB | yes |")


def test_a_peer_without_memory_figures_leaves_those_cells_empty() -> None:
    by_figure = {row.figure: row for row in report.rows(_with_litellm(None))}
    idle = by_figure["RSS idle (after a short warm-up)"]
    assert (idle.hopbase, idle.peer, idle.peer_comparison) == (40.0, None, "")
    streams = by_figure["streams/s, 32 concurrent, 20 chunks 5 ms apart"]
    assert (streams.peer, streams.peer_comparison) == (25.0, "0.078× direct")


def test_without_a_peer_the_json_rows_keep_their_fields() -> None:
    results = report.Results(_runs(), None, workers=None)
    document = report.to_json(results, report.rows(results), {})
    assert "peer" not in document
    assert list(document["rows"][0]) == ["figure", "unit", "direct", "hopbase", "comparison",
                                         "target", "met"]
    with_peer = _with_litellm(None)
    peer_document = report.to_json(with_peer, report.rows(with_peer), {})
    assert peer_document["rows"][0]["peer"] == 18.0
    assert peer_document["peer"] == {"name": "litellm", "version": "1.0", "memory": None,
                                     "note": ""}


async def test_a_peer_that_fails_to_start_is_noted_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fail(_self: stack.Stack) -> processes.Child:
        raise RuntimeError("litellm did not become ready")

    monkeypatch.setattr(stack.Stack, "start_peer", fail)
    runs: dict[str, Run] = {}
    messages: list[str] = []
    settings = harness.Settings.create(quick=True, use_wrk=False, many_streams=False)
    result = await harness._peer(settings, stack.Stack(tmp_path, pinned=False), messages.append,
                                 "litellm", "1.0", runs)
    assert result == report.Peer("litellm", "1.0", None, "litellm failed: litellm did not "
                                 "become ready")
    assert (runs, messages[-1]) == ({}, result.note)
