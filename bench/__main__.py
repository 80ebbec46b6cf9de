"""``python -m bench`` (``make bench``): run the benchmark and print its table."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from bench import harness, peer, profile, wrk


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="HopBase against a lean mock upstream, directly and through HopBase.",
    )
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of about a minute (short phases, 500 streams only)")
    parser.add_argument("--no-wrk", action="store_true",
                        help="use the Python load generator even when wrk is installed")
    parser.add_argument("--no-5000", action="store_true",
                        help="skip the 5,000 open streams step of the memory phase")
    parser.add_argument("--output", type=Path, default=harness.RESULTS,
                        help="where the JSON results go (default: bench/results/latest.json)")
    parser.add_argument("--profile", type=float, metavar="SECONDS",
                        help="instead of the benchmark, profile HopBase under non-streaming load")
    parser.add_argument("--peer", choices=peer.NAMES,
                        help="also run the workload through this gateway, installed in its own "
                             "venv under bench/ on first use, as a third column")
    return parser


def _run(coroutine: Coroutine[Any, Any, str]) -> str:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a HopBase dependency
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (or the profile) and print the result; returns the exit code."""
    args = _parser().parse_args(argv)
    use_wrk = not args.no_wrk
    if use_wrk and wrk.executable() is None:
        print("wrk is not installed (apt-get install wrk): using the Python load generator",
              file=sys.stderr)
    if args.profile is not None:
        print(_run(profile.run(args.profile, use_wrk and wrk.executable() is not None)))
        return 0
    settings = harness.Settings.create(args.quick, use_wrk, many_streams=not args.no_5000)

    def progress(message: str) -> None:
        print(f"bench: {message}", file=sys.stderr, flush=True)

    if args.peer is not None:
        try:
            peer.install(progress)  # before the stack starts, so a failure costs no run
        except RuntimeError as error:
            progress(f"cannot install {args.peer}: {error}")
            return 1
    print(_run(harness.run(settings, progress, args.output, args.peer)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
