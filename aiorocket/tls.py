"""TLS contexts for clients and the embedded broker.

Apache RocketMQ 4.x speaks its remoting protocol inside TLS unchanged (Netty's ``SslHandler``
in front of the frame codec); there is no STARTTLS request, so the client decides before it
connects. Java's clients enable it with ``-Dtls.enable=true`` (or ``setUseTLS(true)``) and then,
unless ``tls.client.authServer=true``, trust any certificate. aiorocket verifies by default:
``tls=True`` checks the chain against the system's CAs (plus ``tls_ca``) and the host name or
IP address of every name server and broker; [`client_context`][aiorocket.tls.client_context] with
``verify=False`` is Java's default, for test clusters only.

A server in ``"permissive"`` mode (Java's ``tls.server.mode`` default) serves TLS and plain
connections on one port, telling them apart by the first byte a client sends (0x16 opens a TLS
handshake); ``"enforcing"`` closes plain connections; ``"disabled"`` is plain TCP only.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal

from aiorocket.errors import ConfigurationError

__all__ = ["TLS_MODES", "TlsMode", "client_context", "server_context"]

TlsMode = Literal["disabled", "permissive", "enforcing"]
"""``tls.server.mode`` of a RocketMQ server: which connections one port accepts."""
TLS_MODES: tuple[TlsMode, ...] = ("disabled", "permissive", "enforcing")
"""The modes, in the order Java's ``TlsMode`` enum lists them."""


def client_context(
    cafile: str | Path | None = None,
    *,
    verify: bool = True,
    check_hostname: bool = True,
    certfile: str | Path | None = None,
    keyfile: str | Path | None = None,
) -> ssl.SSLContext:
    """An ``ssl.SSLContext`` for clients (what ``tls=True`` uses with the defaults).

    Args:
        cafile: a PEM file of CA certificates to trust besides the system's (a private CA).
        verify: ``False`` checks nothing, as a Java client without ``tls.client.authServer``
            does: the connection is encrypted but anyone in between can read it. Test
            clusters only.
        check_hostname: ``False`` verifies the certificate chain but not that the certificate
            names the host or IP address connected to (brokers are reached at the IP address
            the name server hands out; use this when their certificates do not carry it).
        certfile: a client certificate chain (PEM) for servers that require one (Java
            ``tls.server.need.client.auth=require``).
        keyfile: the private key (PEM) of ``certfile``.

    Raises:
        ConfigurationError: a file cannot be read or holds no valid certificate or key.
    """
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if cafile is not None:
            ctx.load_verify_locations(cafile=str(cafile))
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif not check_hostname:
            ctx.check_hostname = False
        if certfile is not None:
            ctx.load_cert_chain(str(certfile), None if keyfile is None else str(keyfile))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"cannot build the client TLS context: {exc}") from None
    return ctx


def server_context(
    certfile: str | Path,
    keyfile: str | Path | None = None,
    *,
    client_cafile: str | Path | None = None,
) -> ssl.SSLContext:
    """An ``ssl.SSLContext`` for a server (the embedded broker and name server).

    Args:
        certfile: the server's certificate chain (PEM), leaf first (``tls.server.certPath``).
        keyfile: its private key (PEM, PKCS#1 or PKCS#8; Java's broker needs PKCS#8);
            ``None`` when ``certfile`` holds the key too.
        client_cafile: when given, clients must present a certificate issued by one of these
            CAs (Java ``tls.server.need.client.auth=require`` with ``tls.server.trustCertPath``).

    Raises:
        ConfigurationError: a file cannot be read, or the key does not match the certificate.
    """
    try:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(certfile), None if keyfile is None else str(keyfile))
        if client_cafile is not None:
            ctx.load_verify_locations(cafile=str(client_cafile))
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"cannot build the server TLS context: {exc}") from None
    return ctx
