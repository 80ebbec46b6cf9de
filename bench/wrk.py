"""Closed-loop non-streaming load with ``wrk`` and ``bench/post.lua``, when wrk is installed.

wrk is C: on a core shared with the mock it costs a fraction of what a Python
generator would, so the direct runs measure the mock and not the generator.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import attrs
import orjson

from bench import loadgen, processes

SCRIPT = Path(__file__).with_name("post.lua")
_MARKER = "BENCH "


@attrs.frozen
class WrkResult:
    """What wrk reported: answers, errors, run length and latency percentiles (seconds).

    ``requests`` counts every answer; ``status_errors`` the answers with status >= 400
    among them; ``errors`` those plus socket errors and timeouts.
    """

    requests: int
    status_errors: int
    errors: int
    elapsed_s: float
    p50_s: float
    p99_s: float

    @property
    def per_second(self) -> float:
        """Successful answers per second."""
        return self.succeeded / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def succeeded(self) -> int:
        """Answers with a status below 400."""
        return self.requests - self.status_errors


def executable() -> str | None:
    """The wrk binary, or None when it is not installed."""
    return shutil.which("wrk")


async def run(
    target: loadgen.Target, body: bytes, connections: int, duration_s: float, core: int | None
) -> WrkResult:
    """POST ``body`` to ``target`` over ``connections`` connections for ``duration_s``.

    Raises:
        RuntimeError: wrk failed or printed no result line.
    """
    binary = executable()
    if binary is None:
        raise RuntimeError("wrk is not installed")
    url = f"http://{target.host}:{target.port}{target.path}"
    command = [binary, "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s",
               "--timeout", "10s", "-s", str(SCRIPT), url]
    command = [*processes.pinning(core), *command]
    env = {**os.environ, "BENCH_BODY": body.decode(), "BENCH_KEY": target.key}
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await process.communicate()
    return parse(stdout.decode(errors="replace"), stderr.decode(errors="replace"))


def parse(stdout: str, stderr: str = "") -> WrkResult:
    """The `WrkResult` in wrk's output (the line ``bench/post.lua`` prints).

    Raises:
        RuntimeError: no such line.
    """
    for line in stdout.splitlines():
        if line.startswith(_MARKER):
            fields = orjson.loads(line[len(_MARKER) :])
            return WrkResult(
                requests=fields["requests"],
                status_errors=fields["status_errors"],
                errors=fields["errors"],
                elapsed_s=fields["duration_us"] / 1e6,
                p50_s=fields["p50_us"] / 1e6,
                p99_s=fields["p99_us"] / 1e6,
            )
    raise RuntimeError(f"wrk printed no result:\n{stdout}\n{stderr}")
