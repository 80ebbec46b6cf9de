"""``python -m bench --profile``: where HopBase spends its CPU under non-streaming load.

py-spy samples the pinned HopBase process from outside while 32 closed-loop
clients load it, only the thread holding the GIL (``--gil``: Python work, not
threads waiting). Each sample's stack is charged to its innermost HopBase frame
(``hopbase/`` or ``routing/``, the CLI entry excluded), so the first table names
the HopBase functions whose own code, or the library calls they make, cost the
most; the second shows the innermost frames of any code and the third sums them
by package (aiohttp, asyncio, hopbase, …). Without py-spy (``pip install py-spy``) HopBase runs
under cProfile instead and the top of its ``tottime`` table is printed.
"""

from __future__ import annotations

import asyncio
import io
import pstats
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import attrs

from bench import loadgen, processes, wrk
from bench.phases import WARMUP_S
from bench.stack import UNARY_BODY, Stack

_FRAME = re.compile(r"^(?P<function>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_OWN_CODE = ("hopbase/", "routing/")
_ENTRY = "hopbase/__main__.py"


@attrs.frozen
class Profile:
    """Samples charged to frames: innermost HopBase frame, innermost frame, and the total."""

    hopbase: Counter[str]
    leaf: Counter[str]
    package: Counter[str]
    samples: int


def _frame_name(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame, ""
    return f"{match['function']} ({match['file']})", match["file"]


def _package(path: str) -> str:
    if path.startswith("<attrs generated"):
        return "attrs (generated methods)"
    return path.split("/")[0] or "?"


def parse_collapsed(text: str) -> Profile:
    """Parse py-spy's ``--format raw`` output (``frame;frame;... count`` per line)."""
    hopbase: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    package: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_frame_name(frame) for frame in stack.split(";")]
        leaf[frames[-1][0]] += count
        package[_package(frames[-1][1])] += count
        own = [name for name, path in frames
               if path.startswith(_OWN_CODE) and not path.startswith(_ENTRY)]
        hopbase[own[-1] if own else "(no HopBase frame: aiohttp server, event loop)"] += count
    return Profile(hopbase, leaf, package, total)


def summary(profile: Profile, top: int = 15) -> str:
    """The two top-``top`` tables of ``profile`` as markdown."""
    lines = [f"{profile.samples} samples.", "",
             "| innermost HopBase frame (self + callees outside HopBase) | share |", "|---|---:|"]
    lines += [f"| {name} | {100 * count / profile.samples:.1f} % |"
              for name, count in profile.hopbase.most_common(top)]
    lines += ["", "| innermost frame (any code) | share |", "|---|---:|"]
    lines += [f"| {name} | {100 * count / profile.samples:.1f} % |"
              for name, count in profile.leaf.most_common(top)]
    lines += ["", "| package of the innermost frame | share |", "|---|---:|"]
    lines += [f"| {name} | {100 * count / profile.samples:.1f} % |"
              for name, count in profile.package.most_common(top)]
    return "\n".join(lines)


async def _load(stack: Stack, duration_s: float, use_wrk: bool) -> None:
    target = stack.through_hopbase()
    if use_wrk:
        await wrk.run(target, UNARY_BODY, 32, duration_s, stack.load_core)
    else:
        await loadgen.closed_loop(target, UNARY_BODY, 32, duration_s)


def py_spy_executable() -> str | None:
    """py-spy next to this Python (a venv's bin/), else on PATH; None when not installed."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


async def _py_spy(
    py_spy: str, stack: Stack, duration_s: float, use_wrk: bool, output: Path
) -> str:
    assert stack.hopbase is not None
    spy = await asyncio.create_subprocess_exec(
        py_spy, "record", "--pid", str(stack.hopbase.pid), "--duration", str(int(duration_s)),
        "--rate", "200", "--format", "raw", "--function", "--gil", "--output", str(output),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    await _load(stack, duration_s + 1, use_wrk)
    _, errors = await spy.communicate()
    if not output.exists():
        raise RuntimeError(f"py-spy wrote no profile: {errors.decode(errors='replace')}")
    return summary(parse_collapsed(output.read_text()))


async def _cprofile(stack: Stack, duration_s: float, use_wrk: bool, output: Path) -> str:
    stack.profile_to = output
    try:
        await stack.start_hopbase()
        await _load(stack, duration_s, use_wrk)
        # cProfile writes its stats when HopBase exits cleanly on SIGTERM.
        stack.stop_hopbase()
    finally:
        stack.profile_to = None
    buffer = io.StringIO()
    stats = pstats.Stats(str(output), stream=buffer)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(25)
    return buffer.getvalue()


async def run(duration_s: float, use_wrk: bool) -> str:
    """Profile HopBase under ``duration_s`` of non-streaming load; return the summary."""
    with tempfile.TemporaryDirectory(prefix="hopbase-profile-") as directory:
        stack = Stack(Path(directory), pinned=processes.can_pin())
        stack.pin_self()
        try:
            await stack.start_mock()
            await stack.start_hopbase()
            await loadgen.closed_loop(stack.through_hopbase(), UNARY_BODY, 8, WARMUP_S)
            py_spy = py_spy_executable()
            if py_spy is not None:
                return await _py_spy(py_spy, stack, duration_s, use_wrk,
                                     Path(directory) / "spy.txt")
            return await _cprofile(stack, duration_s, use_wrk, Path(directory) / "hopbase.prof")
        finally:
            stack.close()
