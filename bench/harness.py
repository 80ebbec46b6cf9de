"""One benchmark run: start the stack, run every phase directly and through HopBase, report.

Phases, each a fixed duration (seconds: full run / ``--quick``):

==============================  ===========  ==========================================
phase                           duration     load
==============================  ===========  ==========================================
unary_direct / unary_hopbase    10 / 3       32 closed-loop clients, non-streaming (wrk)
latency_direct / _hopbase       10 / 3       1 client, non-streaming (wrk)
stream_direct / _hopbase        10 / 3       32 closed-loop streams, 20 chunks 5 ms apart
ttft_direct / ttft_hopbase      8 / 3        1 stream at a time, first output after 5 ms
memory                          ~15 / ~5     fresh HopBase: idle, then 500 (and 5,000) slow streams
workers                         10 / —       ``--workers 2`` unpinned, as unary_hopbase
==============================  ===========  ==========================================

With ``--peer litellm`` the same four load phases then run through LiteLLM's
proxy (``<phase>_litellm``, on HopBase's core with HopBase stopped), and a fresh
LiteLLM gets the memory phase with 500 streams; no 5,000 step, no workers run.
All of it is cut off after `PEER_BUDGET_S`.
"""

from __future__ import annotations

import asyncio
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import orjson

from bench import loadgen, peer, phases, processes, report, wrk
from bench.stack import Stack

RESULTS = Path(__file__).with_name("results") / "latest.json"
PEER_BUDGET_S = 225.0  # the peer must add under 4 minutes to a run (its install aside)
PEER_OPEN_STREAMS = (500,)


@attrs.frozen
class Settings:
    """How long and how hard each phase runs."""

    quick: bool = False
    use_wrk: bool = True
    unary_s: float = 10.0
    latency_s: float = 10.0
    stream_s: float = 10.0
    ttft_s: float = 8.0
    open_streams: tuple[int, ...] = (500, 5000)
    settle_s: float = 2.0
    workers: bool = True

    @classmethod
    def create(cls, quick: bool, use_wrk: bool, many_streams: bool) -> Settings:
        """Full or ``quick`` settings; wrk only when asked for and installed."""
        use_wrk = use_wrk and wrk.executable() is not None
        if quick:
            return cls(quick=True, use_wrk=use_wrk, unary_s=3.0, latency_s=3.0, stream_s=3.0,
                       ttft_s=3.0, open_streams=(500,), settle_s=1.0, workers=False)
        return cls(use_wrk=use_wrk, open_streams=(500, 5000) if many_streams else (500,))


Progress = Callable[[str], None]


def _raise_file_limit(needed: int) -> None:
    """Let this process and its children hold ``needed`` sockets (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _paired(
    name: str,
    progress: Progress,
    measure: Callable[[loadgen.Target], Awaitable[phases.Run]],
    stack: Stack,
    runs: dict[str, phases.Run],
) -> None:
    """Run ``measure`` directly against the mock, then through HopBase."""
    for side, target in (("direct", stack.direct()), ("hopbase", stack.through_hopbase())):
        progress(f"{name} {side} …")
        runs[f"{name}_{side}"] = await measure(target)


Measure = Callable[[loadgen.Target], Awaitable[phases.Run]]


def _measures(settings: Settings, stack: Stack) -> list[tuple[str, Measure]]:
    """The four load phases, each a measurement of one target."""

    async def unary(target: loadgen.Target) -> phases.Run:
        return await phases.unary(stack, target, 32, settings.unary_s, settings.use_wrk)

    async def latency(target: loadgen.Target) -> phases.Run:
        return await phases.unary(stack, target, 1, settings.latency_s, settings.use_wrk)

    async def streams(target: loadgen.Target) -> phases.Run:
        return await phases.streams(stack, target, 32, settings.stream_s)

    async def first_token(target: loadgen.Target) -> phases.Run:
        return await phases.streams(stack, target, 1, settings.ttft_s, burst=True)

    return [("unary", unary), ("latency", latency), ("stream", streams), ("ttft", first_token)]


async def _throughput_phases(settings: Settings, stack: Stack, progress: Progress
                             ) -> dict[str, phases.Run]:
    runs: dict[str, phases.Run] = {}
    for name, measure in _measures(settings, stack):
        await _paired(name, progress, measure, stack, runs)
    return runs


async def _peer_phases(settings: Settings, stack: Stack, progress: Progress, name: str,
                       runs: dict[str, phases.Run]) -> phases.Memory:
    """The load phases through the peer into ``runs``, then its memory on a fresh one."""
    progress(f"starting {name} (one worker, HopBase's core) …")
    await stack.start_peer()
    for phase, measure in _measures(settings, stack):
        progress(f"{phase} {name} …")
        runs[f"{phase}_{name}"] = await measure(stack.through_peer())
    progress(f"{name} memory: fresh {name}, idle, then open slow streams …")
    return await phases.memory(stack, PEER_OPEN_STREAMS, settings.settle_s, peer=True)


async def _peer(settings: Settings, stack: Stack, progress: Progress, name: str,
                version: str, runs: dict[str, phases.Run]) -> report.Peer:
    """Run the peer's phases within `PEER_BUDGET_S`; what fails is noted, not raised."""
    started = time.monotonic()
    memory: phases.Memory | None = None
    note = ""
    try:
        async with asyncio.timeout(PEER_BUDGET_S):
            memory = await _peer_phases(settings, stack, progress, name, runs)
    except TimeoutError:
        note = f"the {name} phases ran over {PEER_BUDGET_S:.0f} s and were cut short"
    except RuntimeError as error:
        note = f"{name} failed: {error}"
    finally:
        stack.stop_gateways()
    progress(note or f"{name} phases took {time.monotonic() - started:.0f} s")
    return report.Peer(name, version, memory, note)


def about(settings: Settings, stack: Stack, started: float) -> dict[str, Any]:
    """What the run was: machine, pinning, tools, settings and when."""
    return {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - started, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "pinned": stack.pinned,
        "non_stream_load": "wrk" if settings.use_wrk else "python",
        "load_average": os.getloadavg(),
        "settings": attrs.asdict(settings),
    }


async def run(settings: Settings, progress: Progress, output: Path = RESULTS,
              peer_name: str | None = None) -> str:
    """Run every phase and return the printed report; the JSON goes to ``output``.

    With ``peer_name`` (one of `bench.peer.NAMES`) the peer is installed first if
    needed, and its phases run after HopBase's.

    Raises:
        RuntimeError: the peer could not be installed.
    """
    peer_version = peer.install(progress) if peer_name is not None else ""
    started = time.monotonic()
    _raise_file_limit(4 * max(settings.open_streams) + 1024)
    busy_before = processes.machine_busy_share(1.0)
    if busy_before > 0.1:
        progress(f"the machine is busy before the start ({100 * busy_before:.0f} % of a core): "
                 "latency and rate figures will be disturbed")
    with tempfile.TemporaryDirectory(prefix="hopbase-bench-") as directory:
        stack = Stack(Path(directory), pinned=processes.can_pin())
        stack.pin_self()
        try:
            progress("starting the mock and HopBase …")
            await stack.start_mock()
            await stack.start_hopbase()
            runs = await _throughput_phases(settings, stack, progress)
            progress("memory: idle, then open slow streams …")
            memory = await phases.memory(stack, settings.open_streams, settings.settle_s)
            workers = None
            if settings.workers:
                progress("two workers, unpinned …")
                workers = await phases.scaled_workers(stack, 2, settings.unary_s,
                                                      settings.use_wrk)
            peer_results = None
            if peer_name is not None:
                peer_results = await _peer(settings, stack, progress, peer_name, peer_version,
                                           runs)
        finally:
            stack.close()
        results = report.Results(runs, memory, workers, peer_results)
        table = report.rows(results)
        facts = {**about(settings, stack, started), "busy_before_start": round(busy_before, 3)}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(orjson.dumps(report.to_json(results, table, facts),
                                    option=orjson.OPT_INDENT_2))
    return _printed(table, results, facts, output)


def _printed(table: list[report.Row], results: report.Results, facts: dict[str, Any],
             output: Path) -> str:
    pinning = ("HopBase pinned to core 0; mock and load generators to core 1"
               if facts["pinned"] else "unpinned (fewer than 2 cores or no taskset)")
    foreign = max((run.foreign_share for run in results.runs.values()), default=0.0)
    peer_name = None if results.peer is None else results.peer.name
    lines = [
        f"HopBase benchmark, {facts['generated_at']}, {facts['seconds']} s; Python "
        f"{facts['python']}, {facts['cores']} cores, {pinning}; non-streaming load by "
        f"{facts['non_stream_load']}.",
        *_peer_lines(results.peer),
        "",
        report.markdown(table, peer_name),
        "",
        report.runs_markdown(results.runs),
        "",
        f"Most foreign CPU in one run: {100 * foreign:.0f} % of a core "
        "(other processes on the machine; above ~10 % the latency and rate figures are "
        "disturbed, CPU per request is not).",
        f"JSON: {output}",
    ]
    return "\n".join(lines)


def _peer_lines(peer_results: report.Peer | None) -> list[str]:
    if peer_results is None:
        return []
    lines = [f"Peer: LiteLLM {peer_results.version} proxy on HopBase's core (HopBase stopped), "
             "one uvicorn worker, latency-based routing over two deployments per model, "
             "master key, no database, no callbacks, telemetry off; memory with 500 streams "
             "only, no workers run."]
    if peer_results.note:
        lines.append(f"**The peer's figures are incomplete:** {peer_results.note}")
    return lines
