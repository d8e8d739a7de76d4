"""Certificates made at test time (``trustme``): nothing secret is ever committed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography.hazmat.primitives import serialization

from aiorocket.embedded import BrokerConfig

__all__ = ["Pki", "make_pki", "tls_config"]


@dataclass(frozen=True)
class Pki:
    """PEM files of a private CA, a server certificate for 127.0.0.1 signed by it, a client
    certificate signed by it, and a second CA that signed nothing of the above."""

    ca: Path
    #: the server's certificate chain, leaf first
    server_cert: Path
    #: the server's private key, PKCS#8 (what Java's broker reads)
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _pkcs8(pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_pki(root: Path) -> Pki:
    """Write a fresh :class:`Pki` under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    # RSA: the JDK's TLS stack under the Java broker takes it in every configuration.
    server = ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.RSA)
    client = ca.issue_cert("aiorocket-test-client")
    pki = Pki(
        ca=root / "ca.pem",
        server_cert=root / "server.pem",
        server_key=root / "server.key",
        client_cert=root / "client.pem",
        client_key=root / "client.key",
        other_ca=root / "other-ca.pem",
    )
    ca.cert_pem.write_to_path(str(pki.ca))
    pki.server_cert.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    pki.server_key.write_bytes(_pkcs8(server.private_key_pem.bytes()))
    pki.client_cert.write_bytes(b"".join(blob.bytes() for blob in client.cert_chain_pems))
    pki.client_key.write_bytes(_pkcs8(client.private_key_pem.bytes()))
    trustme.CA().cert_pem.write_to_path(str(pki.other_ca))
    return pki


def tls_config(pki: Pki, **kw: Any) -> BrokerConfig:
    """An embedded broker configuration with the test server certificate (``kw`` on top)."""
    return BrokerConfig(default_queues=2, tls_cert=pki.server_cert, tls_key=pki.server_key, **kw)
