"""TLS between aiorocket's clients and the embedded broker + name server, over loopback TCP.

The broker's modes follow Java's ``tls.server.mode``: "enforcing" closes plain connections,
"permissive" serves TLS and plain on one port (told apart by the first byte), "disabled" is
plain only. Clients verify certificates unless told not to; every refusal must be a clear
error, never a hang.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest

from aiorocket import (
    Admin,
    Message,
    Producer,
    PullConsumer,
    QueueReader,
    ReceivedMessage,
    TransactionProducer,
    TransactionState,
)
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.errors import ConfigurationError, ConnectError, ConnectionClosedError, RocketError
from aiorocket.testing import ChaosProxy
from aiorocket.tls import client_context
from tests._harness.consume import consume_until
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST
from tests.tls.pki import Pki, tls_config

#: Fail fast: a refused client must not retry for the default 3 s per send.
QUICK: dict[str, Any] = {"send_timeout": 2.0, "retries": 0, "connect_timeout": 2.0}


async def produce(namesrv: str, topic: str, bodies: list[bytes], **client: Any) -> None:
    """Send ``bodies`` to ``topic``, one sync send each."""
    async with Producer(namesrv=namesrv, **QUICK, **client) as producer:
        for body in bodies:
            await producer.send(Message(topic, body))


async def consume(namesrv: str, topic: str, group: str, expect: int, **client: Any) -> list[bytes]:
    """Bodies a push consumer gets from ``topic`` until it has ``expect`` of them."""
    got = await consume_until(namesrv, topic, group, expect, timeout=8, **FAST, **client)
    return [m.body for m in got]


async def test_enforcing_tls_clients_produce_and_consume(
    enforcing: EmbeddedBroker, pki: Pki
) -> None:
    """With TLS enforced, a producer and a push consumer configured with ``tls=True`` and the
    private CA round-trip messages through the name server and the broker."""
    bodies = [f"m{i}".encode() for i in range(20)]
    await produce(enforcing.address, "TlsTopic", bodies, tls=True, tls_ca=pki.ca)
    got = await consume(enforcing.address, "TlsTopic", "tls-g", 20, tls=True, tls_ca=pki.ca)
    assert sorted(got) == sorted(bodies)
    # every connection the broker holds is TLS
    for conn in enforcing._server.connections if enforcing._server else ():
        assert conn._transport is not None
        assert conn._transport.get_extra_info("ssl_object") is not None


async def test_enforcing_refuses_plain_client_with_clear_error(enforcing: EmbeddedBroker) -> None:
    """A plain client against an enforcing broker fails at once with an error that names the
    cause (the server closed before answering; TLS may be needed), instead of hanging."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(RocketError) as info:
        await produce(enforcing.address, "TlsTopic", [b"x"])
    assert loop.time() - start < 2.0
    chain = [info.value, info.value.__cause__, info.value.__context__]
    assert any(isinstance(e, ConnectionClosedError) and "TLS enforcing" in str(e) for e in chain), (
        repr(chain)
    )


async def test_permissive_serves_tls_and_plain_on_one_port(
    permissive: EmbeddedBroker, pki: Pki
) -> None:
    """In permissive mode a plain producer and a TLS producer share the port, and a TLS
    consumer and a plain consumer each read everything both wrote."""
    await produce(permissive.address, "Mixed", [b"plain-1", b"plain-2"])
    await produce(permissive.address, "Mixed", [b"tls-1", b"tls-2"], tls=True, tls_ca=pki.ca)
    expected = [b"plain-1", b"plain-2", b"tls-1", b"tls-2"]
    got_tls = await consume(permissive.address, "Mixed", "g-tls", 4, tls=True, tls_ca=pki.ca)
    got_plain = await consume(permissive.address, "Mixed", "g-plain", 4)
    assert sorted(got_tls) == expected
    assert sorted(got_plain) == expected


async def test_wrong_ca_is_a_clear_verification_error(enforcing: EmbeddedBroker, pki: Pki) -> None:
    """A client trusting another CA (and one trusting only the system's CAs, ``tls=True``)
    fails with a ConnectError saying that certificate verification failed."""
    for client in ({"tls": True, "tls_ca": pki.other_ca}, {"tls": True}):
        with pytest.raises(RocketError) as info:
            await produce(enforcing.address, "TlsTopic", [b"x"], **client)
        chain = [info.value, info.value.__cause__, info.value.__context__]
        errors = [e for e in chain if isinstance(e, ConnectError)]
        assert errors, repr(chain)
        assert "certificate verification failed" in str(errors[0])
        assert isinstance(errors[0].__cause__, ssl.SSLCertVerificationError)


async def test_unverified_tls_is_possible_when_asked(enforcing: EmbeddedBroker) -> None:
    """``tls_verify=False`` (Java's default) connects to a broker whose CA it does not know."""
    await produce(enforcing.address, "Insecure", [b"x"], tls=True, tls_verify=False)
    ctx = client_context(verify=False)
    async with QueueReader(namesrv=enforcing.address, tls=ctx) as reader:
        queues = await reader.queues("Insecure")
        assert queues


async def test_hostname_is_checked(pki: Pki, tmp_path: Path) -> None:
    """The certificate must name the address connected to: a broker advertising an address
    its certificate lacks is refused, unless ``check_hostname=False``."""
    config = tls_config(pki, advertised_host="127.0.0.2")
    async with EmbeddedBroker(host="0.0.0.0", data_dir=tmp_path / "b", config=config) as b:
        assert b.address.startswith("127.0.0.2:")
        with pytest.raises(RocketError) as info:
            await produce(b.address, "Host", [b"x"], tls=True, tls_ca=pki.ca)
        chain = [info.value, info.value.__cause__, info.value.__context__]
        assert any("mismatch" in str(e) for e in chain), repr(chain)
        lax = client_context(pki.ca, check_hostname=False)
        await produce(b.address, "Host", [b"x"], tls=lax)


async def test_tls_client_against_plain_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A TLS client against a plain-only broker fails fast and says the handshake was cut;
    the broker's log says the peer spoke TLS, not only that a frame length was absurd."""
    async with EmbeddedBroker(data_dir=tmp_path / "b") as b:
        with pytest.raises(RocketError) as info:
            await produce(b.address, "T", [b"x"], tls=True, tls_verify=False)
        chain = [info.value, info.value.__cause__, info.value.__context__]
        assert any("TLS handshake" in str(e) for e in chain), repr(chain)
    closing = [r.getMessage() for r in caplog.records if r.getMessage().startswith("closing")]
    assert closing, caplog.text
    assert all("the peer speaks TLS" in m for m in closing), closing


async def test_client_certificates_required(pki: Pki, tmp_path: Path) -> None:
    """With ``tls_client_ca`` the broker refuses TLS clients without a certificate from that
    CA and serves those with one (Java ``tls.server.need.client.auth=require``)."""
    config = tls_config(pki, tls_client_ca=pki.ca)
    async with EmbeddedBroker(data_dir=tmp_path / "b", config=config) as b:
        with pytest.raises(RocketError):
            await produce(b.address, "M", [b"x"], tls=True, tls_ca=pki.ca)
        ctx = client_context(pki.ca, certfile=pki.client_cert, keyfile=pki.client_key)
        await produce(b.address, "M", [b"x"], tls=ctx)


async def test_every_client_kind_connects_over_tls(enforcing: EmbeddedBroker, pki: Pki) -> None:
    """TransactionProducer, Admin, QueueReader and PullConsumer take the same ``tls``
    settings."""
    tls: dict[str, Any] = {"tls": True, "tls_ca": pki.ca}
    await produce(enforcing.address, "Kinds", [b"a"], **tls)

    async def commit(msg: Message, arg: Any) -> TransactionState:
        return TransactionState.COMMIT

    async def check(msg: ReceivedMessage) -> TransactionState:
        return TransactionState.COMMIT

    async with TransactionProducer(
        namesrv=enforcing.address, group="kinds-tx", execute_local=commit, check=check, **tls
    ) as tx:
        result = await tx.send_in_transaction(Message("Kinds", b"b"))
        assert result.state is TransactionState.COMMIT
    async with Admin(namesrv=enforcing.address, **tls) as admin:
        assert "Kinds" in await admin.topics()
    async with QueueReader(namesrv=enforcing.address, **tls) as reader:
        assert await reader.queues("Kinds")
    consumer = PullConsumer(
        group="kinds-pull", namesrv=enforcing.address, consume_from="first", **tls
    )
    consumer.subscribe("Kinds")
    async with consumer:
        got: list[bytes] = []
        async with asyncio.timeout(8):
            while len(got) < 2:
                got += [m.body for m in await consumer.poll(32, timeout=1)]
    assert sorted(got) == [b"a", b"b"]


def test_round_trip_under_uvloop(pki: Pki, tmp_path: Path) -> None:
    """The TLS connector and the broker's first-byte sniffing work on uvloop too."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> list[bytes]:
        config = tls_config(pki, tls_mode="permissive")
        async with EmbeddedBroker(data_dir=tmp_path / "b", config=config) as b:
            await produce(b.address, "Uv", [b"tls"], tls=True, tls_ca=pki.ca)
            await produce(b.address, "Uv", [b"plain"])
            return await consume(b.address, "Uv", "uv-g", 2, tls=True, tls_ca=pki.ca)

    assert sorted(uvloop.run(scenario())) == [b"plain", b"tls"]


def test_settings_are_validated(pki: Pki) -> None:
    """Contradictory TLS settings are refused when the client or broker is built."""
    with pytest.raises(ConfigurationError, match="need tls=True"):
        Producer(namesrv="127.0.0.1:9876", tls_ca=pki.ca)
    with pytest.raises(ConfigurationError, match="not to an SSLContext"):
        Producer(namesrv="127.0.0.1:9876", tls=client_context(), tls_verify=False)
    with pytest.raises(ConfigurationError, match="needs tls_cert"):
        BrokerConfig(tls_mode="permissive")
    with pytest.raises(ConfigurationError, match="tls_mode"):
        BrokerConfig(tls_cert=pki.server_cert, tls_mode="strict")  # type: ignore[arg-type]
    assert BrokerConfig().effective_tls_mode == "disabled"
    assert BrokerConfig(tls_cert=pki.server_cert).effective_tls_mode == "enforcing"
    with pytest.raises(ConfigurationError, match="cannot build"):
        client_context(pki.server_key)


async def test_close_is_bounded_when_the_peer_goes_silent(pki: Pki, tmp_path: Path) -> None:
    """Closing a TLS client whose broker stopped answering (no close_notify comes back) takes
    about ``connect_timeout``, not asyncio's 30 s TLS shutdown timeout."""
    async with (
        ChaosProxy() as proxy,
        EmbeddedBroker(
            data_dir=tmp_path / "b", config=tls_config(pki, advertised_port=proxy.port)
        ) as b,
    ):
        proxy.upstream = b.listen_address
        producer = Producer(
            namesrv=b.address,
            tls=True,
            tls_ca=pki.ca,
            connect_timeout=1.0,
            request_timeout=1.0,
        )
        await producer.start()
        await producer.send(Message("Silent", b"x"))
        proxy.stall()
        loop = asyncio.get_running_loop()
        start = loop.time()
        await producer.close()
        assert loop.time() - start < 5.0
        proxy.reset()  # the broker's side of the connection goes too


async def test_silent_connections_are_dropped_after_the_handshake_timeout(
    pki: Pki, tmp_path: Path
) -> None:
    """A connection that never sends its first byte (or never finishes the handshake) is
    closed after ``tls_handshake_timeout``; refused handshakes leave nothing behind."""
    config = tls_config(pki, tls_mode="permissive", tls_handshake_timeout=0.3)
    async with EmbeddedBroker(data_dir=tmp_path / "b", config=config) as b:
        host, port = b.listen_address.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            async with asyncio.timeout(3):
                assert await reader.read() == b""  # EOF: the broker hung up
        finally:
            writer.close()
        with pytest.raises(RocketError):
            await produce(b.address, "T", [b"x"], tls=True, tls_ca=pki.other_ca)
        server = b._server
        assert server is not None
        await wait_for(
            lambda: not server.connections, timeout=2.0, what="refused connections to go"
        )
