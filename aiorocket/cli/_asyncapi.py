"""``aiorocket asyncapi pkg.module:app [--yaml]``: print an App's AsyncAPI 3.0 document
(`aiorocket.app.asyncapi`). Nothing is started: the document comes from the app's
declarations alone."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from aiorocket.app.asyncapi import to_yaml
from aiorocket.cli._run import StartupError, load_app

__all__ = ["add_asyncapi_parser", "run_asyncapi"]


def add_asyncapi_parser(sub: Any) -> None:
    """Add the ``asyncapi`` subcommand to an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = sub.add_parser(
        "asyncapi",
        help="print an App's AsyncAPI 3.0 document",
        description="Print the AsyncAPI 3.0 document of an aiorocket App (pkg.module:app): "
        "its name servers, a channel per topic, an operation per subscriber and declared "
        "publisher, the message schemas. JSON unless --yaml.",
    )
    p.add_argument("target", help="the App, as pkg.module:attribute")
    p.add_argument("--yaml", action="store_true", help="print YAML instead of JSON")
    p.add_argument("--title", default="aiorocket app", help="the document's info.title")
    p.add_argument("--app-version", default="1.0.0", help="the document's info.version")


def run_asyncapi(args: argparse.Namespace) -> int:
    """Entry point of ``aiorocket asyncapi``: 0, or 2 when the target is not an App."""
    try:
        app = load_app(args.target)
    except StartupError as exc:
        print(f"aiorocket asyncapi: {exc}", file=sys.stderr)
        return 2
    doc = app.asyncapi(title=args.title, version=args.app_version)
    print(to_yaml(doc) if args.yaml else json.dumps(doc, indent=2))
    return 0
