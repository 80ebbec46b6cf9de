"""The benchmark's measurements: each one a load run with CPU and noise accounting.

Every `Run` records the CPU time the mock and the gateway (HopBase, or the
peer in the peer's runs) used during it (from /proc, so other load on the
machine does not inflate it) and the CPU time that
processes other than ours used on the machine meanwhile ("foreign" CPU): the
latency and throughput figures of a run with much foreign CPU are disturbed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import attrs

from bench import loadgen, processes, wrk
from bench.stack import BURST_BODY, SLOW_BODY, STREAM_BODY, UNARY_BODY, Stack

WARMUP_S = 1.0


@attrs.frozen
class Run:
    """One load run against one target (direct, through HopBase or through the peer).

    ``hopbase_cpu_s`` is the CPU of the gateway that ran: HopBase's, or the
    peer's in the peer's runs (the two never run at the same time).
    """

    tool: str
    succeeded: int
    errors: int
    elapsed_s: float
    p50_s: float
    p99_s: float
    first_output_p50_s: float | None = None
    first_output_p99_s: float | None = None
    hopbase_cpu_s: float = 0.0
    mock_cpu_s: float = 0.0
    foreign_cpu_s: float = 0.0

    @property
    def per_second(self) -> float:
        """Successful answers per second."""
        return self.succeeded / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def cpu_ms_per_answer(self, process: str) -> float:
        """Milliseconds of CPU per successful answer, of "hopbase" or "mock"."""
        used = self.hopbase_cpu_s if process == "hopbase" else self.mock_cpu_s
        return 1000.0 * used / self.succeeded if self.succeeded else float("nan")

    @property
    def foreign_share(self) -> float:
        """Foreign CPU as a share of one core over the run (0.25 = a quarter core)."""
        return self.foreign_cpu_s / self.elapsed_s if self.elapsed_s > 0 else 0.0


@attrs.define
class Meter:
    """CPU of the gateway, of the mock, and of everything else on the machine, over one span."""

    stack: Stack
    _start: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def _sample(self) -> tuple[float, float, float, float]:
        gateway = self.stack.gateway()
        gateway_cpu = gateway.cpu_s() if gateway is not None else 0.0
        mock = self.stack.mock.cpu_s() if self.stack.mock is not None else 0.0
        own = os.times()
        # This process and its waited-for children (wrk): the mock and HopBase are not waited yet.
        ours = own.user + own.system + own.children_user + own.children_system
        busy = processes.machine_busy_s()
        return gateway_cpu, mock, ours, busy

    def start(self) -> None:
        """Begin the span."""
        self._start = self._sample()

    def stop(self) -> tuple[float, float, float]:
        """End the span: (gateway CPU s, mock CPU s, foreign CPU s)."""
        gateway, mock, ours, busy = (
            now - then for now, then in zip(self._sample(), self._start, strict=True)
        )
        return gateway, mock, max(0.0, busy - gateway - mock - ours)


async def _measured(stack: Stack, load: Callable[[], Awaitable[Run]]) -> Run:
    meter = Meter(stack)
    meter.start()
    run = await load()
    hopbase_cpu, mock_cpu, foreign_cpu = meter.stop()
    return attrs.evolve(run, hopbase_cpu_s=hopbase_cpu, mock_cpu_s=mock_cpu,
                        foreign_cpu_s=foreign_cpu)


def _from_loadgen(result: loadgen.LoadResult) -> Run:
    latencies = result.latencies_s()
    first_outputs = result.first_outputs_s()
    return Run(
        tool="python",
        succeeded=result.succeeded,
        errors=result.errors,
        elapsed_s=result.elapsed_s,
        p50_s=loadgen.percentile(latencies, 50),
        p99_s=loadgen.percentile(latencies, 99),
        first_output_p50_s=loadgen.percentile(first_outputs, 50) if first_outputs else None,
        first_output_p99_s=loadgen.percentile(first_outputs, 99) if first_outputs else None,
    )


def _from_wrk(result: wrk.WrkResult) -> Run:
    return Run(tool="wrk", succeeded=result.succeeded, errors=result.errors,
               elapsed_s=result.elapsed_s, p50_s=result.p50_s, p99_s=result.p99_s)


async def unary(
    stack: Stack, target: loadgen.Target, concurrency: int, duration_s: float, use_wrk: bool
) -> Run:
    """Closed-loop non-streaming load: ``concurrency`` clients back to back for ``duration_s``."""

    async def load() -> Run:
        if use_wrk:
            return _from_wrk(await wrk.run(target, UNARY_BODY, concurrency, duration_s,
                                           stack.load_core))
        return _from_loadgen(await loadgen.closed_loop(target, UNARY_BODY, concurrency,
                                                       duration_s))

    await loadgen.closed_loop(target, UNARY_BODY, min(concurrency, 8), WARMUP_S)
    return await _measured(stack, load)


async def streams(
    stack: Stack, target: loadgen.Target, concurrency: int, duration_s: float, burst: bool = False
) -> Run:
    """Closed-loop streams (20 chunks 5 ms apart, or ``burst``: all right after the first)."""
    body = BURST_BODY if burst else STREAM_BODY

    async def load() -> Run:
        return _from_loadgen(await loadgen.closed_loop(target, body, concurrency, duration_s))

    await loadgen.closed_loop(target, body, concurrency, WARMUP_S / 2)
    return await _measured(stack, load)


@attrs.frozen
class Memory:
    """A gateway's resident memory idle and with open slow streams (KiB)."""

    idle_kib: int
    open_streams: tuple[tuple[int, int, int], ...]  # (streams asked for, streams open, RSS KiB)

    def per_stream_kib(self, requested: int) -> float:
        """RSS growth per open stream in the sample that asked for ``requested`` streams."""
        for asked, opened, rss in self.open_streams:
            if asked == requested and opened:
                return (rss - self.idle_kib) / opened
        return float("nan")


async def memory(stack: Stack, counts: tuple[int, ...], settle_s: float,
                 peer: bool = False) -> Memory:
    """Start a fresh HopBase (or peer), warm it up, then hold ``counts`` slow streams open."""
    gateway = await (stack.start_peer() if peer else stack.start_hopbase())
    target = stack.through_peer() if peer else stack.through_hopbase()
    # Warm-up loads every code path once, so "idle" is a server that has served traffic.
    await loadgen.closed_loop(target, UNARY_BODY, 4, 0.5)
    await loadgen.closed_loop(target, STREAM_BODY, 4, 0.5)
    await asyncio.sleep(settle_s)
    idle = gateway.rss_kib()
    held = loadgen.OpenStreams()
    samples: list[tuple[int, int, int]] = []
    try:
        for count in sorted(counts):
            await loadgen.open_streams(target, SLOW_BODY, count - len(held.connections), held)
            await asyncio.sleep(settle_s)
            samples.append((count, len(held.connections), gateway.rss_kib()))
    finally:
        held.close()
    await asyncio.sleep(0.5)
    stack.stop_gateways()
    return Memory(idle, tuple(samples))


async def scaled_workers(stack: Stack, workers: int, duration_s: float, use_wrk: bool) -> Run:
    """Non-streaming throughput of HopBase with ``workers`` processes, unpinned."""
    await stack.start_hopbase(workers=workers, pinned=False)
    target = stack.through_hopbase()
    await loadgen.closed_loop(target, UNARY_BODY, 8, WARMUP_S)

    async def load() -> Run:
        if use_wrk:
            return _from_wrk(await wrk.run(target, UNARY_BODY, 32, duration_s, None))
        return _from_loadgen(await loadgen.closed_loop(target, UNARY_BODY, 32, duration_s))

    try:
        return await load()
    finally:
        stack.stop_hopbase()
