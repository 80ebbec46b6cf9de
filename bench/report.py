"""The benchmark's output: the figures against their targets, as markdown and as JSON.

Targets are the ones of the performance issue (SPEC section 12): HopBase with its
default features on must come close to a bare aiohttp + uvloop + orjson
pass-through proxy on the same core. With a peer gateway (``--peer litellm``)
the table gains the peer's figures, computed the same way from its runs; the
targets and "met?" stay HopBase's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from bench.phases import Memory, Run

MIB = 1024.0
TEN_THOUSAND_LIMIT_MIB = 400.0
PHASES = ("unary", "latency", "stream", "ttft")


@attrs.frozen
class Row:
    """One figure: direct, HopBase and peer values, how they compare, target, whether met.

    ``target`` and ``met`` are HopBase's; ``peer`` and ``peer_comparison`` are the
    peer's value and its comparison with direct (None and "" without a peer).
    """

    figure: str
    unit: str
    direct: float | None
    hopbase: float | None
    comparison: str
    target: str
    met: bool | None
    peer: float | None = None
    peer_comparison: str = ""


@attrs.frozen
class Peer:
    """The peer gateway's part of a run: which one, its memory, and what went wrong if anything.

    Its load runs are in `Results.runs` as ``<phase>_<name>`` (``unary_litellm`` …).
    """

    name: str
    version: str
    memory: Memory | None = None
    note: str = ""


@attrs.frozen
class Results:
    """Every measurement of one benchmark run; runs by name (``<phase>_<side>``, see `PHASES`)."""

    runs: Mapping[str, Run]
    memory: Memory | None
    workers: Run | None
    peer: Peer | None = None


def _finite(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _added_row(
    figure: str, direct: float | None, hopbase: float | None, limit_ms: float, errors: int
) -> Row:
    added = hopbase - direct if _finite(direct) and _finite(hopbase) else None  # type: ignore[operator]
    comparison = f"+{added:.2f} ms" if added is not None else "n/a"
    met = added is not None and added <= limit_ms and errors == 0
    return Row(figure, "ms", direct, hopbase, _with_errors(comparison, errors),
               f"≤ +{limit_ms:g} ms", met)


def _with_errors(comparison: str, errors: int) -> str:
    return f"{comparison} ({errors} errors)" if errors else comparison


def _ratio(hopbase: float, direct: float) -> str:
    return f"{hopbase / direct:.2f}×" if direct > 0 and _finite(hopbase) else "n/a"


def unary_rows(runs: Mapping[str, Run]) -> list[Row]:
    """CPU per request, requests/s and added latency of non-streaming requests."""
    direct, hopbase = runs["unary_direct"], runs["unary_hopbase"]
    cpu = hopbase.cpu_ms_per_answer("hopbase")
    mock_cpu = direct.cpu_ms_per_answer("mock")
    rows = [
        Row("CPU per non-streaming request (mock / HopBase)", "ms", mock_cpu, cpu,
            _with_errors(f"{_ratio(cpu, mock_cpu)} the mock's", hopbase.errors), "≤ 0.4 ms",
            cpu <= 0.4 and hopbase.errors == 0),
        Row("non-streaming requests/s, 32 concurrent", "req/s", direct.per_second,
            hopbase.per_second, _with_errors(f"{_ratio(hopbase.per_second, direct.per_second)}"
                                             " direct", hopbase.errors),
            "≥ 2,500", hopbase.per_second >= 2500 and hopbase.errors == 0),
    ]
    latency_direct, latency_hopbase = runs["latency_direct"], runs["latency_hopbase"]
    for label, field, limit in (("p50", "p50_s", 0.5), ("p99", "p99_s", 2.0)):
        rows.append(_added_row(f"latency {label}, 1 request at a time",
                               _ms(getattr(latency_direct, field)),
                               _ms(getattr(latency_hopbase, field)), limit,
                               latency_hopbase.errors))
    return rows


def stream_rows(runs: Mapping[str, Run]) -> list[Row]:
    """CPU per stream, streams/s and added time to first token."""
    direct, hopbase = runs["stream_direct"], runs["stream_hopbase"]
    cpu = hopbase.cpu_ms_per_answer("hopbase")
    mock_cpu = direct.cpu_ms_per_answer("mock")
    ratio = hopbase.per_second / direct.per_second if direct.per_second > 0 else math.nan
    rows = [
        Row("CPU per 20-chunk stream (mock / HopBase)", "ms", mock_cpu, cpu,
            _with_errors(f"{_ratio(cpu, mock_cpu)} the mock's", hopbase.errors), "≤ 2 ms",
            cpu <= 2.0 and hopbase.errors == 0),
        Row("streams/s, 32 concurrent, 20 chunks 5 ms apart", "streams/s", direct.per_second,
            hopbase.per_second, _with_errors(f"{ratio:.3f}× direct", hopbase.errors),
            "≥ 0.95× direct", ratio >= 0.95 and hopbase.errors == 0),
    ]
    ttft_direct, ttft_hopbase = runs["ttft_direct"], runs["ttft_hopbase"]
    for label, field, limit in (("p50", "first_output_p50_s", 1.0),
                                ("p99", "first_output_p99_s", 5.0)):
        rows.append(_added_row(f"time to first token {label}, 1 stream at a time",
                               _ms(getattr(ttft_direct, field)),
                               _ms(getattr(ttft_hopbase, field)), limit, ttft_hopbase.errors))
    return rows


def memory_rows(memory: Memory) -> list[Row]:
    """HopBase's RSS idle and with open streams, per stream and projected to 10,000."""
    rows = [Row("RSS idle (after a short warm-up)", "MiB", None, memory.idle_kib / MIB, "",
                "≤ 60 MiB", memory.idle_kib / MIB <= 60)]
    for requested, opened, rss in memory.open_streams:
        per_stream = memory.per_stream_kib(requested)
        projected = (memory.idle_kib + 10_000 * per_stream) / MIB
        failed = f", {requested - opened} failed to open" if opened < requested else ""
        rows.append(Row(
            f"RSS with {requested:,} open slow streams", "MiB", None, rss / MIB,
            f"{per_stream:.1f} KiB/stream; 10,000 ≈ {projected:.0f} MiB{failed}",
            "≤ 32 KiB/stream; 10,000 < 400 MiB",
            per_stream <= 32 and projected < TEN_THOUSAND_LIMIT_MIB and opened == requested,
        ))
    return rows


def workers_row(one_worker: Run, workers: Run) -> Row:
    """Two unpinned workers against one pinned worker."""
    ratio = workers.per_second / one_worker.per_second if one_worker.per_second else math.nan
    return Row("non-streaming requests/s, `--workers 2` unpinned (direct: 1 worker)", "req/s",
               one_worker.per_second, workers.per_second,
               _with_errors(f"{ratio:.2f}× one worker", workers.errors), "≥ 1.6× one worker",
               ratio >= 1.6 and workers.errors == 0)


def peer_rows(runs: Mapping[str, Run], peer: Peer) -> dict[str, Row]:
    """The peer's figures by figure, computed as HopBase's are from the peer's runs.

    A group of rows is left out when one of its runs is missing (the peer failed
    or ran out of time).
    """
    measured = {phase: runs[f"{phase}_{peer.name}"] for phase in PHASES
                if f"{phase}_{peer.name}" in runs}
    as_hopbase = {**runs, **{f"{phase}_hopbase": run for phase, run in measured.items()}}
    found: list[Row] = []
    if {"unary", "latency"} <= measured.keys():
        found += unary_rows(as_hopbase)
    if {"stream", "ttft"} <= measured.keys():
        found += stream_rows(as_hopbase)
    if peer.memory is not None:
        found += memory_rows(peer.memory)
    return {row.figure: row for row in found}


def rows(results: Results) -> list[Row]:
    """Every row of the table, in order."""
    table = [*unary_rows(results.runs), *stream_rows(results.runs)]
    if results.memory is not None:
        table += memory_rows(results.memory)
    if results.workers is not None:
        table.append(workers_row(results.runs["unary_hopbase"], results.workers))
    if results.peer is not None:
        by_figure = peer_rows(results.runs, results.peer)
        table = [_with_peer(row, by_figure.get(row.figure)) for row in table]
    return table


def _with_peer(row: Row, peer_row: Row | None) -> Row:
    if peer_row is None:
        return row
    return attrs.evolve(row, peer=peer_row.hopbase, peer_comparison=peer_row.comparison)


def _number(value: float | None) -> str:
    if not _finite(value):
        return "—"
    assert value is not None
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _met(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "**no**")


def markdown(table: list[Row], peer: str | None = None) -> str:
    """The rows as a markdown table: figure, direct, HopBase, comparison, target, met?

    With a ``peer`` name, the peer's value follows HopBase's and its comparison
    with direct follows HopBase's; target and met? stay HopBase's.
    """
    if peer is not None:
        return _markdown_with_peer(table, peer)
    lines = ["| figure | unit | direct | hopbase | ratio / added | target | met? |",
             "|---|---|---:|---:|---|---|---|"]
    lines += [f"| {row.figure} | {row.unit} | {_number(row.direct)} | {_number(row.hopbase)} | "
              f"{row.comparison} | {row.target} | {_met(row.met)} |" for row in table]
    return "\n".join(lines)


def _markdown_with_peer(table: list[Row], peer: str) -> str:
    lines = [f"| figure | unit | direct | hopbase | {peer} | hopbase: ratio / added | "
             f"{peer}: ratio / added | target (hopbase) | met? |",
             "|---|---|---:|---:|---:|---|---|---|---|"]
    lines += [f"| {row.figure} | {row.unit} | {_number(row.direct)} | {_number(row.hopbase)} | "
              f"{_number(row.peer)} | {row.comparison} | {row.peer_comparison} | {row.target} | "
              f"{_met(row.met)} |" for row in table]
    return "\n".join(lines)


def runs_markdown(runs: Mapping[str, Run]) -> str:
    """A second table: every run's tool, answers, errors, length and foreign CPU."""
    lines = ["| run | tool | answers | errors | seconds | answers/s | foreign CPU |",
             "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {run.tool} | {run.succeeded:,} | {run.errors} | "
              f"{run.elapsed_s:.1f} | {run.per_second:,.0f} | {100 * run.foreign_share:.0f} % |"
              for name, run in runs.items()]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(results: Results, table: list[Row], about: Mapping[str, Any]) -> dict[str, Any]:
    """Everything measured, as plain JSON values (NaN becomes null)."""
    def serialize(_instance: Any, _field: Any, value: Any) -> Any:
        return _jsonable(value)

    runs = {name: {**attrs.asdict(run, value_serializer=serialize),
                   "per_second": _jsonable(run.per_second),
                   "foreign_share": _jsonable(run.foreign_share)}
            for name, run in results.runs.items()}
    if results.workers is not None:
        runs["workers_2"] = attrs.asdict(results.workers, value_serializer=serialize)
    # Without a peer the rows keep exactly the fields they had before peers existed.
    no_peer = attrs.filters.exclude(attrs.fields(Row).peer, attrs.fields(Row).peer_comparison)
    row_filter = None if results.peer is not None else no_peer
    document: dict[str, Any] = {
        "about": dict(about),
        "rows": [attrs.asdict(row, filter=row_filter, value_serializer=serialize)
                 for row in table],
        "runs": runs,
        "memory": None if results.memory is None else attrs.asdict(results.memory),
    }
    if results.peer is not None:
        document["peer"] = attrs.asdict(results.peer)
    return document
