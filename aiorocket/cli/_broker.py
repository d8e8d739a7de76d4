"""``aiorocket broker``: run the embedded broker + name server until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import signal
import sys
from typing import Any

__all__ = ["add_broker_parser", "run_broker"]


def add_broker_parser(sub: Any) -> None:
    """Add the ``broker`` subcommand to an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = sub.add_parser(
        "broker",
        help="run the embedded broker and name server on one port",
        description="Run the embedded RocketMQ broker and name server. Clients use the "
        "printed address as their name server; routes point at the same port.",
    )
    p.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on")
    p.add_argument("--port", type=int, default=9876, help="port (0 picks a free one)")
    p.add_argument("--data-dir", default=".aiorocket", help="where messages and state live")
    p.add_argument("--flush", choices=("async", "sync"), default="async", help="flush mode")
    p.add_argument("--default-queues", type=int, default=4, help="queues of created topics")
    p.add_argument(
        "--no-auto-create-topics",
        dest="auto_create_topics",
        action="store_false",
        help="refuse unknown topics instead of creating them",
    )
    p.add_argument(
        "--create-topics-on-lookup",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="create an unknown topic when a client asks for its route (a shortcut, not "
        "Java's: an operator's `admin route X` or `admin lag G` creates too); by default a "
        "lookup answers TOPIC_NOT_EXIST as a Java name server does",
    )
    p.add_argument("--retention-hours", type=float, default=72.0, help="message retention")
    p.add_argument(
        "--max-pull-messages", type=int, default=32, help="messages served per pull at most"
    )
    p.add_argument("--broker-name", default="broker-a", help="broker name in routes")
    p.add_argument("--cluster-name", default="DefaultCluster", help="cluster name")
    p.add_argument("--advertised-host", default=None, help="IPv4 address put in routes")
    p.add_argument("--advertised-port", type=int, default=None, help="port put in routes")
    p.add_argument(
        "--enable-property-filter",
        action="store_true",
        help="serve consumers that filter by SQL92 (Java's enablePropertyFilter)",
    )
    p.add_argument("--access-key", default=None, help="ACL access key (with --secret-key)")
    p.add_argument("--secret-key", default=None, help="ACL secret key")
    p.add_argument("--tls-cert", default=None, help="TLS certificate chain (PEM)")
    p.add_argument("--tls-key", default=None, help="TLS private key (PEM)")
    p.add_argument(
        "--tls-mode",
        choices=("enforcing", "permissive", "disabled"),
        default=None,
        help="enforcing: TLS only (default with --tls-cert); permissive: TLS and plain on "
        "one port; disabled: plain only",
    )
    p.add_argument(
        "--tls-client-ca", default=None, help="require client certificates from this CA (PEM)"
    )
    p.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="asyncio",
        help="event loop (auto: uvloop when it is installed)",
    )


async def _serve(args: argparse.Namespace) -> int:
    from aiorocket.embedded import BrokerConfig, EmbeddedBroker

    config = BrokerConfig(
        broker_name=args.broker_name,
        cluster_name=args.cluster_name,
        advertised_host=args.advertised_host,
        advertised_port=args.advertised_port,
        flush=args.flush,
        default_queues=args.default_queues,
        auto_create_topics=args.auto_create_topics,
        create_topics_on_lookup=args.create_topics_on_lookup,
        retention_hours=args.retention_hours,
        max_pull_messages=args.max_pull_messages,
        enable_property_filter=args.enable_property_filter,
        access_key=args.access_key,
        secret_key=args.secret_key,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_mode=args.tls_mode,
        tls_client_ca=args.tls_client_ca,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with EmbeddedBroker(
        host=args.host, port=args.port, data_dir=args.data_dir, config=config
    ) as broker:
        print(
            f"aiorocket broker listening on {broker.address} (data in {broker.data_dir}, "
            f"{config.flush} flush, TLS {config.effective_tls_mode})",
            flush=True,
        )
        await stop.wait()
        print("aiorocket broker stopping", flush=True)
    print("aiorocket broker stopped", flush=True)
    return 0


def run_broker(args: argparse.Namespace) -> int:
    """Run the broker described by the parsed arguments; returns the exit code (0 after a
    clean shutdown, 1 when it cannot start)."""
    from aiorocket.errors import RocketError

    use_uvloop = args.loop == "uvloop"
    if args.loop == "auto":
        use_uvloop = importlib.util.find_spec("uvloop") is not None
    try:
        if use_uvloop:
            import uvloop

            return uvloop.run(_serve(args))
        return asyncio.run(_serve(args))
    except (OSError, RocketError, ValueError) as exc:
        print(f"aiorocket broker: {exc}", file=sys.stderr)
        return 1
