"""The command line: ``hopbase serve | check | sim``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import Sequence

from aiohttp import web

from hopbase.config import Config, format_table, load_config
from hopbase.errors import ConfigError

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
    """N processes accepting on one port (SO_REUSEPORT); each keeps its own memory state."""
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_worker, args=(config_path, host, port), daemon=False)
        for _ in range(workers)
    ]
    for process in processes:
        process.start()

    def forward(signum: int, _frame: object) -> None:
        for process in processes:
            if process.pid is not None:
                os.kill(process.pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    for process in processes:
        process.join()
    return max((process.exitcode or 0) for process in processes)


def _worker(config_path: str, host: str, port: int) -> None:
    logging.basicConfig(level=os.environ.get("HOPBASE_LOG_LEVEL", "INFO"))
    serve(load_config(config_path), host, port, reuse_port=True)


def serve(config: Config, host: str, port: int, reuse_port: bool) -> None:
    """Serve ``config`` until SIGTERM/SIGINT; SIGHUP reloads the config."""
    from hopbase.app import make_app
    from hopbase.views import GATEWAY, reload_config

    _install_uvloop()
    app = make_app(config)

    async def on_startup(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, _reload, app)

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


def _install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


if __name__ == "__main__":
    raise SystemExit(main())
