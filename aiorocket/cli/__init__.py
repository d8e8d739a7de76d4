"""The ``aiorocket`` command: ``broker``, ``run``, ``demo``, ``admin`` and ``asyncapi``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

__all__ = ["HelpFormatter", "main"]

_DESCRIPTION = (
    "aiorocket: an asyncio RocketMQ client and embedded broker. Run a broker, run an App as a "
    "worker, try the demo, or administer a cluster; `aiorocket COMMAND --help` for each."
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` of every subcommand: each option's default appended, as
    `argparse.ArgumentDefaultsHelpFormatter` does, except where there is nothing to
    show (``None``, a flag's ``False``) or the help text already tells it (mentions a default,
    or ends with the value in parentheses)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default is None
            or default is False
            or "default" in text.lower()
            or text.rstrip().endswith(f"({default})")
        ):
            return text
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level", default=None, help="logging level (default WARNING; INFO for run)"
    )
    parser = argparse.ArgumentParser(
        prog="aiorocket",
        description=_DESCRIPTION,
        parents=[common],
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from aiorocket.cli._admin import add_admin_parser
    from aiorocket.cli._asyncapi import add_asyncapi_parser
    from aiorocket.cli._broker import add_broker_parser
    from aiorocket.cli._demo import add_demo_parser
    from aiorocket.cli._run import add_run_parser

    for add in (
        add_broker_parser,
        add_run_parser,
        add_demo_parser,
        add_admin_parser,
        add_asyncapi_parser,
    ):
        add(_WithParents(sub, common))
    return parser


class _WithParents:
    """Passes the shared options to every subcommand parser."""

    def __init__(
        self,
        sub: argparse._SubParsersAction[argparse.ArgumentParser],
        common: argparse.ArgumentParser,
    ) -> None:
        self._sub = sub
        self._common = common

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", HelpFormatter)
        return self._sub.add_parser(name, parents=[self._common], **kwargs)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    level = args.log_level or ("INFO" if args.command == "run" else "WARNING")
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.command == "broker":
        from aiorocket.cli._broker import run_broker

        return run_broker(args)
    if args.command == "run":
        from aiorocket.cli._run import run_worker

        return run_worker(args)
    if args.command == "admin":
        from aiorocket.cli._admin import run_admin

        return run_admin(args)
    if args.command == "asyncapi":
        from aiorocket.cli._asyncapi import run_asyncapi

        return run_asyncapi(args)
    if args.command == "demo":
        from aiorocket.cli._demo import run_demo_command

        return run_demo_command(args)
    print(f"unknown command {args.command!r}", file=sys.stderr)  # pragma: no cover
    return 2
