"""Look-ups of what does not exist, on an embedded broker whose name server answers as Java's
(``create_topics_on_lookup`` off, the default): ``aiorocket admin`` names the missing topic or
group in one line, exits 1, and creates nothing; and the ``--help`` texts."""

from __future__ import annotations

import pytest

from aiorocket.cli import _parser, main
from aiorocket.embedded import EmbeddedBroker
from tests.cli.test_admin_cli import cli

_NO_ROUTE = "No topic route info in name server for the topic: "


async def test_missing_topics_and_groups_are_named_and_not_created(
    broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    n = ("-n", broker.address)
    _, before, _ = await cli(capsys, "admin", "topics", *n)
    cases = [
        (("route", "Ghost"), f"topic Ghost not found ([code 17] {_NO_ROUTE}Ghost)"),
        (("message", "AB12", "--topic", "Ghost"), f"topic Ghost not found ([code 17] {_NO_ROUTE}"),
        (("message", "--key", "k", "--topic", "Ghost"), "topic Ghost not found"),
        (
            ("lag", "ghostG"),
            "consumer group ghostG not found: no broker knows it (no route for %RETRY%ghostG; "
            f"[code 17] {_NO_ROUTE}%RETRY%ghostG)",
        ),
        (("reset-offset", "ghostG", "Ghost", "--to", "earliest"), "topic Ghost not found"),
    ]
    for argv, message in cases:
        code, out, err = await cli(capsys, "admin", *argv, *n)
        assert code == 1, argv
        assert out == ""
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"aiorocket admin: {message}"), err
    code, out, _ = await cli(capsys, "admin", "dlq", "ghostG", *n)
    assert (code, out.strip()) == (0, "no dead letters for ghostG")
    _, after, _ = await cli(capsys, "admin", "topics", *n)
    assert after == before
    assert not {"Ghost", "%RETRY%ghostG", "%DLQ%ghostG"} & set(after.split())


def test_help_lists_demo_and_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    def help_of(*argv: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--help"])
        assert exit_.value.code == 0
        return capsys.readouterr().out

    top = help_of()
    demo = next(line for line in top.splitlines() if line.strip().startswith("demo"))
    assert "run the orders demo on an in-process embedded broker" in demo
    assert "The orders app of examples/orders.py" in help_of("demo")
    assert "(default: 5.0)" in help_of("admin", "lag")
    assert "(default: 16)" in help_of("admin", "dlq")
    broker = help_of("broker")
    assert "(default: 9876)" in broker
    assert "(default: None)" not in broker  # nothing shown where there is nothing to show
    assert "(default: False)" not in broker


def test_broker_creates_topics_on_lookup_only_when_asked() -> None:
    def flag(*argv: str) -> object:
        return _parser().parse_args(["broker", *argv]).create_topics_on_lookup

    assert flag() is False
    assert flag("--create-topics-on-lookup") is True
    assert flag("--no-create-topics-on-lookup") is False
