"""The system under test: the mock upstream and HopBase (or the peer) as pinned child processes.

HopBase runs with its default features on (client-key auth, latency routing over
two deployments, Prometheus metrics, the SQLite request log) and the response
cache off: the benchmark sends one body over and over, so with the cache on it
would measure cache hits, not the proxy path.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import attrs
import orjson
import yaml

from bench import loadgen, peer, processes

REPO = Path(__file__).resolve().parent.parent
CHAT_PATH = "/v1/chat/completions"
CLIENT_KEY = "hb-bench-client-key"
UPSTREAM_KEY = "sk-bench-mock"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Write one sentence about benchmarks."},
]
UNARY_BODY = orjson.dumps({"model": "chat", "messages": MESSAGES, "max_tokens": 64})
STREAM_BODY = orjson.dumps({"model": "chat", "messages": MESSAGES, "stream": True})
BURST_BODY = orjson.dumps({"model": "burst", "messages": MESSAGES, "stream": True})
SLOW_BODY = orjson.dumps({"model": "slow", "messages": MESSAGES, "stream": True})
_MOCK_MODELS = ("chat", "burst", "slow")
_LAUNCH = "import sys; from hopbase.__main__ import main; sys.exit(main())"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def hopbase_config(mock_port: int, log_path: Path) -> dict[str, object]:
    """HopBase's config: each mock model as a group of two deployments on the mock."""
    base_url = f"http://127.0.0.1:{mock_port}/v1"

    def deployment(model: str, letter: str) -> dict[str, str]:
        return {"id": f"{model}-{letter}", "provider": "openai", "base_url": base_url,
                "api_key_env": "BENCH_UPSTREAM_KEY", "model": model}

    return {
        "server": {"host": "127.0.0.1", "shutdown_grace_s": 2},
        "auth": {"keys": [{"name": "bench", "key_env": "HOPBASE_BENCH_KEY"}]},
        "routing": {"strategy": "latency"},
        "models": {model: {"deployments": [deployment(model, "a"), deployment(model, "b")]}
                   for model in _MOCK_MODELS},
        "logs": {"backend": "sqlite", "path": str(log_path)},
        "cache": {"enabled": False},
    }


@attrs.define
class Stack:
    """The mock and HopBase processes of one benchmark run, and how to reach them.

    With two cores HopBase (or the peer, never both at once) is pinned alone to
    core 0 and the mock (and this process, which runs the Python load generator)
    to core 1.
    """

    directory: Path
    pinned: bool
    mock_port: int = attrs.field(factory=free_port)
    mock: processes.Child | None = None
    hopbase: processes.Child | None = None
    hopbase_port: int = 0
    peer: processes.Child | None = None
    peer_port: int = 0
    profile_to: Path | None = None  # run HopBase under cProfile, writing its stats here

    @property
    def hopbase_core(self) -> int | None:
        """HopBase's core, None when unpinned."""
        return 0 if self.pinned else None

    @property
    def load_core(self) -> int | None:
        """The core of the mock and the load generators, None when unpinned."""
        return 1 if self.pinned else None

    def pin_self(self) -> None:
        """Run this process (the Python load generator) on the mock's core, away from HopBase."""
        if self.load_core is not None:
            os.sched_setaffinity(0, {self.load_core})

    def direct(self) -> loadgen.Target:
        """Requests straight to the mock."""
        return loadgen.Target("127.0.0.1", self.mock_port, CHAT_PATH)

    def through_hopbase(self) -> loadgen.Target:
        """The same requests through HopBase."""
        return loadgen.Target("127.0.0.1", self.hopbase_port, CHAT_PATH, CLIENT_KEY)

    def through_peer(self) -> loadgen.Target:
        """The same requests through the peer gateway, with its master key."""
        return loadgen.Target("127.0.0.1", self.peer_port, CHAT_PATH, peer.MASTER_KEY)

    def gateway(self) -> processes.Child | None:
        """The gateway that runs now (HopBase or the peer), None when neither does."""
        return self.hopbase if self.hopbase is not None else self.peer

    async def start_mock(self) -> None:
        """Start the mock upstream and wait until it answers."""
        command = [sys.executable, "-m", "bench.mock", "--port", str(self.mock_port)]
        self.mock = processes.start("mock", command, self.load_core, self.directory,
                                    env=_child_env(), cwd=REPO)
        await _wait(self.mock, self.mock_port)

    async def start_hopbase(self, workers: int = 1, pinned: bool = True) -> processes.Child:
        """Start HopBase (replacing a running gateway) on a new port and wait until it is ready."""
        self.stop_gateways()
        config_path = self.directory / "hopbase.yaml"
        log_path = self.directory / f"requests-{free_port()}.db"
        config_path.write_text(yaml.safe_dump(hopbase_config(self.mock_port, log_path)))
        self.hopbase_port = free_port()
        arguments = ["serve", "--config", str(config_path), "--port", str(self.hopbase_port),
                     "--workers", str(workers)]
        if self.profile_to is not None:
            launcher = ["-m", "cProfile", "-o", str(self.profile_to), "-m", "hopbase"]
        else:
            # Not ``-m hopbase``: ``--workers`` spawns processes that must import the
            # worker function, and multiprocessing cannot re-import a ``-m pkg.__main__``.
            launcher = ["-c", _LAUNCH]
        command = [sys.executable, *launcher, *arguments]
        core = self.hopbase_core if pinned else None
        self.hopbase = processes.start("hopbase", command, core, self.directory,
                                       env=_child_env(), cwd=REPO)
        await _wait(self.hopbase, self.hopbase_port)
        return self.hopbase

    async def start_peer(self) -> processes.Child:
        """Start LiteLLM's proxy (replacing a running gateway) on HopBase's core, one worker."""
        self.stop_gateways()
        config_path = self.directory / "litellm.yaml"
        config_path.write_text(yaml.safe_dump(peer.litellm_config(self.mock_port)))
        self.peer_port = free_port()
        self.peer = processes.start("litellm", peer.command(config_path, self.peer_port),
                                    self.hopbase_core, self.directory, env=peer.environment(),
                                    cwd=self.directory, unset=peer.UNSET_ENVIRONMENT)
        await _wait(self.peer, self.peer_port, peer.READY_PATH, peer.START_TIMEOUT_S)
        return self.peer

    def stop_hopbase(self) -> None:
        """Stop HopBase if it runs."""
        if self.hopbase is not None:
            self.hopbase.stop()
            self.hopbase = None

    def stop_gateways(self) -> None:
        """Stop HopBase and the peer, whichever runs."""
        self.stop_hopbase()
        if self.peer is not None:
            self.peer.stop()
            self.peer = None

    def close(self) -> None:
        """Stop every process of the stack."""
        self.stop_gateways()
        if self.mock is not None:
            self.mock.stop()
            self.mock = None


def _child_env() -> dict[str, str]:
    return {
        "PYTHONPATH": str(REPO),
        "HOPBASE_BENCH_KEY": CLIENT_KEY,
        "BENCH_UPSTREAM_KEY": UPSTREAM_KEY,
        "HOPBASE_LOG_LEVEL": "WARNING",
    }


async def _wait(child: processes.Child, port: int, path: str = "/healthz",
                timeout_s: float = 30.0) -> None:
    """Wait until ``child`` answers ``GET path``; fail early when it exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await loadgen.wait_ready("127.0.0.1", port, path, timeout_s=1.0)
            return
        except TimeoutError:
            if child.alive() and time.monotonic() < deadline:
                continue
        state = "still running" if child.alive() else "exited"
        raise RuntimeError(f"{child.name} did not become ready on port {port} within "
                           f"{timeout_s:.0f} s ({state}):\n{child.log_tail()}")
