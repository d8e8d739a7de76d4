"""TLS through the other ways in: the ``aiorocket`` command line (broker and admin), the App
settings and the Spark source options, each against a broker that enforces TLS."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocket import App, Message, Producer
from aiorocket.cli import main
from aiorocket.embedded import EmbeddedBroker
from tests._harness.child import broker_cli
from tests.tls.pki import Pki

_LISTENING = re.compile(rb"listening on (\d+\.\d+\.\d+\.\d+:\d+).*TLS enforcing")


@contextlib.asynccontextmanager
async def cli_broker(pki: Pki, data: Path) -> AsyncIterator[str]:
    """``aiorocket broker --tls-cert ... --tls-key ...`` in a subprocess; its address."""
    tls = ("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))
    proc = await broker_cli(data, *tls, stderr=None)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        m = _LISTENING.search(line)
        assert m is not None, line
        yield m.group(1).decode()
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)


async def test_cli_broker_and_admin_over_tls(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``aiorocket broker --tls-cert/--tls-key`` enforces TLS; ``aiorocket admin --tls-ca``
    reaches it, and ``aiorocket admin`` without TLS is refused with a hint, exit code 1."""
    async with cli_broker(pki, tmp_path / "data") as address:
        async with Producer(namesrv=address, tls=True, tls_ca=pki.ca) as producer:
            await producer.send(Message("CliTls", b"x"))
        capsys.readouterr()
        code = await asyncio.to_thread(
            main, ["admin", "topics", "-n", address, "--tls-ca", str(pki.ca)]
        )
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "CliTls" in out.out.split()
        code = await asyncio.to_thread(main, ["admin", "topics", "-n", address, "--timeout", "2"])
        out = capsys.readouterr()
        assert code == 1
        assert "TLS enforcing" in out.err


def test_app_settings_carry_tls(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """An App passes ``tls``/``tls_ca``/``tls_verify`` (keyword or ``AIOROCKET_TLS*``) to
    every client it builds."""
    app = App(namesrv="127.0.0.1:9876", tls=True, tls_ca=str(pki.ca))
    assert app.settings.client_settings() == {
        "namesrv": "127.0.0.1:9876",
        "tls": True,
        "tls_ca": pki.ca,
    }
    monkeypatch.setenv("AIOROCKET_TLS", "true")
    monkeypatch.setenv("AIOROCKET_TLS_VERIFY", "false")
    env_app = App(namesrv="127.0.0.1:9876")
    assert env_app.settings.client_settings()["tls"] is True
    assert env_app.settings.client_settings()["tls_verify"] is False


async def test_app_producer_over_tls(enforcing: EmbeddedBroker, pki: Pki) -> None:
    """The App's shared producer connects over TLS with the App's settings."""
    app = App(namesrv=enforcing.address, tls=True, tls_ca=pki.ca)
    async with app:
        await app.producer.send(Message("AppTls", b"x"))


async def test_spark_source_options_tls(enforcing: EmbeddedBroker, pki: Pki) -> None:
    """The Spark source's ``tls``/``tlsCa`` options (plain strings, picklable) give its
    readers TLS to the broker."""
    pytest.importorskip("pyspark")
    from aiorocket.integrations.spark.options import SourceOptions as _Options

    enforcing_broker = enforcing.address
    async with Producer(namesrv=enforcing_broker, tls=True, tls_ca=pki.ca) as producer:
        await producer.send(Message("SparkTls", b"x"))
    opts = _Options.parse({"namesrv": enforcing_broker, "topic": "SparkTls", "tlsCa": str(pki.ca)})
    assert opts.client == {"tls": True, "tls_ca": str(pki.ca), "tls_verify": True}

    def read_queues() -> int:
        reader = opts.open_reader()
        try:
            return len(reader.queues("SparkTls"))
        finally:
            reader.close()

    assert await asyncio.to_thread(read_queues) > 0


def test_cli_run_passes_tls_to_the_app(pki: Pki) -> None:
    """``aiorocket run --tls-ca`` reaches an App built at import time through the
    ``AIOROCKET_TLS*`` environment (keyword arguments of the App still win)."""
    from aiorocket.cli import _parser
    from aiorocket.cli._run import apply_tls_options

    args = _parser().parse_args(["run", "pkg.mod:app", "--tls-ca", str(pki.ca)])
    environ: dict[str, str] = {}
    apply_tls_options(args, environ)
    assert environ == {"AIOROCKET_TLS": "true", "AIOROCKET_TLS_CA": str(pki.ca)}
    plain = _parser().parse_args(["run", "pkg.mod:app"])
    environ = {}
    apply_tls_options(plain, environ)
    assert environ == {}
