"""Every ``--help`` of the ``aiorocket`` command line exits 0: the whole tree of subcommands,
found by walking argparse's subparsers (a help text is %-formatted, so one unescaped ``%``
crashes it; ``aiorocket admin --help`` did on the ``%DLQ%`` of the ``dlq`` help)."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from aiorocket.cli import _parser, main


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of ``parser``'s tree, the root (``()``) first."""
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(_parser())


def test_the_walk_finds_every_level() -> None:
    assert ("admin", "dlq") in COMMANDS
    assert ("broker",) in COMMANDS
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("aiorocket", *p)))
def test_help_exits_zero(path: tuple[str, ...]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    assert out.getvalue().startswith("usage: aiorocket")
