"""``aiorocket admin`` against the embedded broker: tables, ``--json``, and one-line errors
with a non-zero exit (``aiorocket.cli._admin``). The same ``lag`` against the Java broker, and
beside ``mqadmin consumerProgress``, is in ``tests/interop/apache/test_mqadmin_embedded.py``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.cli import main
from aiorocket.cli._admin import parse_time, render_table
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
FAST: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "offset_persist_interval": 0.2,
    "pull_suspend_timeout": 1.0,
    "shutdown_grace": 2.0,
}


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``aiorocket`` in a thread (it runs its own event loop); exit code, out, err."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def setup_group(addr: str, produced: int, consumed: int) -> list[rmq.SendResult]:
    """A 2-queue topic ``cliT``: ``consumed`` messages consumed by ``cliG``, then the rest."""
    async with rmq.Admin(namesrv=addr) as admin:
        await admin.create_topic("cliT", queues=2)
    async with rmq.Producer(namesrv=addr, group="cliP") as p:
        sent = [await p.send(rmq.Message("cliT", f"m{i}", keys=[f"k{i}"])) for i in range(consumed)]
    got: list[bytes] = []
    c = rmq.PushConsumer(group="cliG", namesrv=addr, consume_from="first", **FAST)
    c.subscribe("cliT")

    @c.listener
    async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    async with c:
        while len(got) < consumed:
            await asyncio.sleep(0.05)
    async with rmq.Producer(namesrv=addr, group="cliP") as p:
        sent += [
            await p.send(rmq.Message("cliT", f"m{i}", keys=[f"k{i}"]))
            for i in range(consumed, produced)
        ]
    return sent


async def test_topics_route_lag_and_messages(
    broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    sent = await setup_group(broker.address, produced=17, consumed=10)
    n = ("-n", broker.address)
    code, out, _ = await cli(capsys, "admin", "topics", *n)
    assert code == 0
    assert "cliT" in out.split()
    code, out, _ = await cli(capsys, "admin", "route", "cliT", *n, "--json")
    assert json.loads(out)["queues"] == {"broker-a": {"read": 2, "write": 2, "perm": 6}}
    # lag: a table with totals on a terminal...
    code, out, _ = await cli(capsys, "admin", "lag", "cliG", *n)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "TOPIC",
        "BROKER",
        "QUEUE",
        "BROKER",
        "OFFSET",
        "COMMITTED",
        "LAG",
        "LAST",
    ]
    rows = [line.split() for line in lines[1:] if line.startswith("cliT ")]
    assert len(rows) == 2
    assert sum(int(r[5]) for r in rows) == 7  # LAG column
    assert all(int(r[3]) - int(r[4]) == int(r[5]) for r in rows)
    assert "total lag 7" in out
    # ... and JSON for scripts, with the numbers the broker holds
    code, out, _ = await cli(capsys, "admin", "lag", "cliG", *n, "--json")
    data = json.loads(out)
    assert data["total"] == 7
    assert data["by_topic"]["cliT"] == 7
    store = broker.store
    for q in (q for q in data["queues"] if q["topic"] == "cliT"):
        assert q["broker_offset"] == store.max_offset("cliT", q["queue"])
        assert q["lag"] == q["broker_offset"] - q["committed_offset"]
    # messages
    code, out, _ = await cli(capsys, "admin", "message", sent[3].offset_msg_id, *n, "--json")
    assert json.loads(out)["body"] == "m3"
    code, out, _ = await cli(
        capsys, "admin", "message", sent[5].msg_id, "--topic", "cliT", *n, "--json"
    )
    assert json.loads(out)["msg_id"] == sent[5].msg_id
    code, out, _ = await cli(capsys, "admin", "message", "--key", "k12", "--topic", "cliT", *n)
    assert code == 0
    assert sent[12].msg_id in out


async def test_reset_offset_and_topic_admin(
    broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    await setup_group(broker.address, produced=12, consumed=12)
    n = ("-n", broker.address)
    code, out, _ = await cli(
        capsys, "admin", "reset-offset", "cliG", "cliT", "--to", "earliest", *n, "--json"
    )
    assert code == 0
    assert {r["offset"] for r in json.loads(out)} == {0}
    code, out, _ = await cli(capsys, "admin", "lag", "cliG", *n, "--json")
    assert json.loads(out)["by_topic"]["cliT"] == 12
    future = datetime.now(UTC).replace(year=datetime.now(UTC).year + 1).isoformat()
    code, out, _ = await cli(capsys, "admin", "reset-offset", "cliG", "cliT", "--to", future, *n)
    assert code == 0
    code, out, _ = await cli(capsys, "admin", "lag", "cliG", *n, "--json")
    # after the newest message: each queue's last message (Java's search by time)
    assert json.loads(out)["by_topic"]["cliT"] == 2
    code, out, _ = await cli(capsys, "admin", "reset-offset", "cliG", "cliT", "--to", "latest", *n)
    code, out, _ = await cli(capsys, "admin", "lag", "cliG", *n, "--json")
    assert json.loads(out)["by_topic"]["cliT"] == 0
    code, out, _ = await cli(capsys, "admin", "create-topic", "cliNew", "--queues", "3", *n)
    assert code == 0
    assert broker.topics.get("cliNew") is not None
    code, out, _ = await cli(capsys, "admin", "delete-topic", "cliNew", *n)
    assert code == 0
    assert broker.topics.get("cliNew") is None


async def test_set_consume_mode(broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    n = ("-n", broker.address)
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic("cliPopT", queues=2)
    code, out, _ = await cli(capsys, "admin", "set-consume-mode", "cliPopG", "cliPopT", "pop", *n)
    assert code == 0
    assert "cliPopG reads cliPopT by pop" in out
    table = json.loads((broker.data_dir / "config" / "messageRequestMode.json").read_text())
    assert table["messageRequestModeMap"]["cliPopT"]["cliPopG"]["mode"] == "POP"
    code, out, _ = await cli(
        capsys, "admin", "set-consume-mode", "cliPopG", "cliPopT", "pull", "--json", *n
    )
    assert json.loads(out)["mode"] == "pull"
    table = json.loads((broker.data_dir / "config" / "messageRequestMode.json").read_text())
    assert table["messageRequestModeMap"]["cliPopT"]["cliPopG"]["mode"] == "PULL"
    with pytest.raises(SystemExit) as exited:  # argparse: usage and exit 2
        await cli(capsys, "admin", "set-consume-mode", "g", "t", "push", *n)
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


async def test_errors_are_one_line_with_a_nonzero_exit(
    broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    n = ("-n", broker.address)
    # a group brokers know (its retry topic exists) that has no offset anywhere; an unknown
    # group is test_admin_lookups.py's
    code, _, _ = await cli(capsys, "admin", "create-topic", "%RETRY%ghost", "--queues", "1", *n)
    assert code == 0
    code, out, err = await cli(capsys, "admin", "lag", "ghost", *n)
    assert code == 1
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("aiorocket admin: ConsumerNotOnlineError")
    code, _, err = await cli(capsys, "admin", "reset-offset", "g", "t", "--to", "yesterday", *n)
    assert code == 2
    assert "--to must be" in err
    code, _, err = await cli(capsys, "admin", "message", *n)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    code, _, err = await cli(capsys, "admin", "message", "nothex", *n)
    assert code == 1
    assert "QueryNotFoundError" in err
    code, _, err = await cli(capsys, "admin", "create-topic", "bad topic", *n)
    assert code == 2
    assert len(err.strip().splitlines()) == 1


def test_unreachable_server_exits_1_with_one_line() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiorocket",
            "admin",
            "topics",
            "-n",
            "127.0.0.1:1",
            "--timeout",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("aiorocket admin: cannot reach 127.0.0.1:1")


def test_time_parsing_and_tables() -> None:
    assert parse_time("earliest") == "earliest"
    assert parse_time("1700000000000") == 1700000000000
    when = parse_time("2024-05-01T12:00:00+00:00")
    assert isinstance(when, datetime)
    assert when.timestamp() == 1714564800
    local = parse_time("2024-05-01T12:00:00")
    assert isinstance(local, datetime)
    assert local.tzinfo is not None
    with pytest.raises(ConfigurationError):
        parse_time("soon")
    table = render_table(["A", "N"], [["x", 5], ["long", 12]])
    assert table.splitlines() == ["A      N", "x      5", "long  12"]
