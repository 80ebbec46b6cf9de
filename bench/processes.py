"""The benchmark's child processes: start pinned, read CPU time and memory from /proc, stop.

CPU time is the process's ``utime + stime`` from ``/proc/PID/stat`` (all its
threads), so it does not depend on how busy the rest of the machine is; memory is
``VmRSS`` from ``/proc/PID/status``. `core_busy_s` reads a core's busy time from
``/proc/stat``, so a run can tell how much CPU went to processes that are not ours.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# Read at import, before the harness pins itself: an unpinned child gets these cores
# back (a child inherits its parent's affinity, and the harness runs on one core).
STARTING_CORES = frozenset(os.sched_getaffinity(0))


def can_pin() -> bool:
    """Whether there are two cores to split and ``taskset`` to split them with."""
    return {0, 1} <= STARTING_CORES and shutil.which("taskset") is not None


def pinning(core: int | None) -> list[str]:
    """The ``taskset`` prefix that runs a command on ``core``, or on every starting core."""
    if shutil.which("taskset") is None:
        return []
    cores = [core] if core is not None else sorted(STARTING_CORES)
    return ["taskset", "-c", ",".join(str(each) for each in cores)]


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) that process ``pid`` has used."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces and parentheses: fields are counted after its ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def process_rss_kib(pid: int) -> int:
    """Resident memory of process ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for process {pid}")


def _busy_s(line: str) -> float:
    # user nice system idle iowait irq softirq steal: busy is all but idle and iowait
    values = [int(value) for value in line.split()[1:9]]
    return (sum(values) - values[3] - values[4]) / TICKS_PER_S


def core_busy_s(core: int) -> float:
    """Seconds core ``core`` has spent busy (anything but idle and iowait) since boot."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            return _busy_s(line)
    raise ValueError(f"no core {core} in /proc/stat")


def machine_busy_s() -> float:
    """Seconds all cores together have spent busy since boot."""
    first_line = Path("/proc/stat").read_text().partition("\n")[0]
    return _busy_s(first_line)  # the "cpu" line sums every core


def machine_busy_share(seconds: float) -> float:
    """How many cores' worth of CPU the whole machine keeps busy over ``seconds`` (blocking)."""
    before = machine_busy_s()
    time.sleep(seconds)
    return (machine_busy_s() - before) / seconds


@attrs.define
class Child:
    """A started child process, its log file and the core it is pinned to (None: unpinned)."""

    name: str
    popen: subprocess.Popen[bytes]
    core: int | None
    log_path: Path

    @property
    def pid(self) -> int:
        """The process id (taskset execs the command, so this is the command's own)."""
        return self.popen.pid

    def cpu_s(self) -> float:
        """CPU seconds used so far."""
        return process_cpu_s(self.pid)

    def rss_kib(self) -> int:
        """Resident memory now, in KiB."""
        return process_rss_kib(self.pid)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the process's output (for error messages)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited after ``timeout_s``."""
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def start(
    name: str,
    command: Sequence[str],
    core: int | None,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    unset: Sequence[str] = (),
) -> Child:
    """Start ``command`` pinned to ``core`` (None: any core), its output in ``log_dir``.

    The child gets this process's environment with ``env`` added and ``unset`` removed.
    """
    pinned = [*pinning(core), *command]
    environment = {**os.environ, **(env or {})}
    for name in unset:
        environment.pop(name, None)
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log_file:
        popen = subprocess.Popen(
            pinned,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            cwd=cwd,
        )
    return Child(name, popen, core, log_path)
