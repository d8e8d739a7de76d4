"""The ``aiorocket`` command: ``aiorocket demo`` and, as they land, ``broker`` and ``run``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiorocket", description=__doc__)
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the end-to-end demo on loopback")
    demo.add_argument("--requests", type=int, default=50_000, help="requests to exchange")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.command == "demo":
        from aiorocket.cli._demo import run_demo

        return asyncio.run(run_demo(requests=args.requests))
    print(f"unknown command {args.command!r}", file=sys.stderr)  # pragma: no cover
    return 2
