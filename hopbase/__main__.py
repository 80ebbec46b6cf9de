"""The command line: ``hopbase serve | check | sim``."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
from collections.abc import Sequence

from aiohttp import web

from hopbase.config import Config, format_table, load_config
from hopbase.errors import ConfigError, LogStoreError

log = logging.getLogger("hopbase")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hopbase`` command; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("HOPBASE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    return int(args.command(args))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hopbase", description="an LLM API gateway")
    commands = parser.add_subparsers(required=True)
    serve = commands.add_parser("serve", help="serve the gateway")
    serve.add_argument("--config", default="deployments.yaml")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(command=serve_command)
    check = commands.add_parser("check", help="validate a config and print its table")
    check.add_argument("--config", default="deployments.yaml")
    check.set_defaults(command=check_command)
    sim = commands.add_parser("sim", help="run the simulated provider")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=9090)
    sim.add_argument("--first-output-ms", type=float, default=50.0)
    sim.add_argument("--tokens-per-s", type=float, default=200.0)
    sim.add_argument("--output-tokens", type=int, default=32)
    sim.add_argument("--fail-status", type=int)
    sim.add_argument("--fail-every", type=int, default=0)
    sim.add_argument("--retry-after-s", type=float)
    sim.set_defaults(command=sim_command)
    return parser


def check_command(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    print(format_table(config))
    for line in config.warnings:
        print(f"warning: {line}")
    return 0


def sim_command(args: argparse.Namespace) -> int:
    from hopbase.config import SimulatedConfig
    from hopbase.sim.server import run_sim

    settings = SimulatedConfig(
        first_output_ms=args.first_output_ms,
        tokens_per_s=args.tokens_per_s,
        output_tokens=args.output_tokens,
        fail_status=args.fail_status,
        fail_every=args.fail_every,
        retry_after_s=args.retry_after_s,
    )
    _install_uvloop()
    run_sim(args.host, args.port, settings)
    return 0


def serve_command(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    if args.workers <= 1:
        serve(config, host, port, reuse_port=False)
        return 0
    return _serve_workers(args.config, host, port, args.workers)


def _serve_workers(config_path: str, host: str, port: int, workers: int) -> int:
    """N processes accepting on one port (SO_REUSEPORT); each keeps its own memory state.

    The parent forwards SIGTERM, SIGINT and SIGHUP to every worker. A worker that
    exits on its own (a crash, a failed start) stops the others, so the supervisor
    sees the failure instead of a server running short of workers. Returns the
    highest exit status of the workers (see `_exit_status`).
    """
    context = multiprocessing.get_context("spawn")
    # spawn pickles the target by module and name; under `python -m hopbase` this module
    # is "__main__", which the workers cannot import, so name it by its package path.
    target = importlib.import_module("hopbase.__main__")._worker
    processes = [
        context.Process(target=target, args=(config_path, host, port), name=f"hopbase-worker-{n}")
        for n in range(workers)
    ]
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = stopping or signum != signal.SIGHUP
        for process in processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    for process in processes:
        process.start()
    if stopping:  # a signal that came while the workers were starting reaches them all
        forward(signal.SIGTERM, None)
    running, statuses = list(processes), []
    while running:
        multiprocessing.connection.wait([process.sentinel for process in running])
        for process in [process for process in running if not process.is_alive()]:
            process.join()
            running.remove(process)
            statuses.append(_exit_status(process.exitcode, stopping))
            if not stopping:
                log.error("worker %s exited with %s: stopping the others", process.pid,
                          process.exitcode)
                forward(signal.SIGTERM, None)
    return max(statuses)


def _exit_status(exitcode: int | None, stopping: bool) -> int:
    """A worker's exit code as a shell reports it (128 + N when killed by signal N).

    A worker still booting when asked to stop dies of the signal itself: that is a stop.
    """
    if exitcode is None:
        return 1
    if exitcode >= 0:
        return exitcode
    if stopping and -exitcode in (signal.SIGTERM, signal.SIGINT):
        return 0
    return 128 - exitcode


def _worker(config_path: str, host: str, port: int) -> None:
    """One worker process of ``serve --workers N``."""
    # Its own process group: a terminal's Ctrl-C reaches only the parent, which forwards
    # it once; a second signal would cut the worker's graceful shutdown short.
    os.setpgrp()
    logging.basicConfig(
        level=os.environ.get("HOPBASE_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    serve(load_config(config_path), host, port, reuse_port=True)


def serve(config: Config, host: str, port: int, reuse_port: bool) -> None:
    """Serve ``config`` until SIGTERM/SIGINT; SIGHUP reloads the config.

    Raises:
        SystemExit: 1 when the request log's database cannot be opened at start-up.
    """
    from hopbase.app import make_app
    from hopbase.views import GATEWAY, reload_config

    _install_uvloop()
    app = make_app(config)

    async def on_startup(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, _reload, app)
        _tune_garbage_collection()

    def _reload(app: web.Application) -> None:
        try:
            reload_config(app[GATEWAY])
        except Exception as error:  # noqa: BLE001 - a bad reload must never stop the server
            log.warning("reload failed: %s", error)

    app.on_startup.append(on_startup)
    sock = None
    if reuse_port:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    log.info("hopbase serving %d model groups on http://%s:%d", len(config.models), host, port)
    try:
        web.run_app(
            app,
            host=None if sock else host,
            port=None if sock else port,
            sock=sock,
            handler_cancellation=True,
            shutdown_timeout=config.server.shutdown_grace_s,
            access_log=None,
            print=None,
        )
    except LogStoreError as error:  # an operator's mistake, not a bug: no traceback
        log.error("%s", error)
        raise SystemExit(1) from None


def _tune_garbage_collection() -> None:
    """Keep collector pauses and GIL waits off the request path.

    What is alive after start-up (modules, config, routes) lives as long as the
    process: freezing it keeps full collections short. Requests churn through many
    small objects, so a larger first threshold makes young collections rarer.
    """
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    # the request log's writer thread holds the GIL while it encodes a batch; a short
    # switch interval hands it back to the event loop within half a millisecond
    sys.setswitchinterval(0.0005)


def _install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


if __name__ == "__main__":
    raise SystemExit(main())
