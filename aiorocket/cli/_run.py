"""``aiorocket run pkg.module:app``: run an [`App`][aiorocket.app.App] as a worker process.

SIGINT/SIGTERM start a graceful drain (handlers finish within the consumers' grace period,
offsets are flushed, clients unregister); a second signal stops at once. A status line shows
consumed/s, failures and lag per topic: live on a terminal, as periodic log lines otherwise.
``--metrics-port`` serves ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.
Start-up failures (a bad ``module:app``, an unreachable name server) exit non-zero with one line.
A crash of the app (an unexpected error in a background task of one of its clients: a bug)
exits non-zero within a second, the last line naming it, so that a supervisor restarts it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import anyio

from aiorocket._concurrency import describe_crash
from aiorocket._names import is_retry_topic
from aiorocket.app import App
from aiorocket.errors import RocketError

__all__ = ["add_run_parser", "load_app", "run_worker"]

log = logging.getLogger("aiorocket.worker")


#: how often the worker looks for a crash of the app (known before the app has closed its
#: other clients, which may take their grace periods)
_CRASH_POLL = 0.1
#: how long a crashed app may close its other clients before the worker exits anyway
_CRASH_CLEANUP = 0.5


class StartupError(Exception):
    """Why the worker could not start (printed as one line)."""


class _Crashed(Exception):
    """The app crashed; printed as the worker's last line once the event loop is closed."""


def add_run_parser(sub: Any) -> None:
    """Add the ``run`` subcommand to an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run an App (pkg.module:app) as a worker",
        description="Run the subscribers of an aiorocket App until SIGINT or SIGTERM.",
    )
    p.add_argument("target", help="the App to run, as pkg.module:attribute")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--loop", choices=("auto", "uvloop", "asyncio"), default="auto", help="event loop"
    )
    p.add_argument(
        "--status-interval", type=float, default=None, help="seconds between status lines"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve /metrics (Prometheus), /healthz and /readyz on this port "
        '(needs "aiorocketmq[prometheus]"; with --workers N, worker i uses port + i)',
    )
    p.add_argument(
        "--metrics-host", default="0.0.0.0", help="address of the metrics server (0.0.0.0)"
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="TLS to name servers and brokers for an App that does not set tls itself "
        "(sets AIOROCKET_TLS)",
    )
    p.add_argument("--tls-ca", default=None, help="also trust this CA (PEM; sets AIOROCKET_TLS_CA)")


def apply_tls_options(args: argparse.Namespace, environ: MutableMapping[str, str]) -> None:
    """Put ``--tls``/``--tls-ca`` into ``environ`` as ``AIOROCKET_TLS*``: the App is built when
    its module is imported, and reads what its keyword arguments leave open from there (worker
    processes inherit it)."""
    if args.tls or args.tls_ca:
        environ["AIOROCKET_TLS"] = "true"
    if args.tls_ca:
        environ["AIOROCKET_TLS_CA"] = str(args.tls_ca)


def load_app(target: str) -> App:
    """Import ``pkg.module:attribute`` and return the App it names (or builds, if callable).

    Raises:
        StartupError: the target is malformed, cannot be imported, or is not an App.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise StartupError(f"expected pkg.module:attribute, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StartupError(f"cannot import {module_name!r}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise StartupError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, App):
        try:
            obj = obj()  # an app factory
        except Exception as exc:
            raise StartupError(f"{target} is not an App, and calling it failed: {exc}") from None
    if not isinstance(obj, App):
        raise StartupError(f"{target} is a {type(obj).__name__}, not an aiorocket.App")
    return obj


class _Status:
    """Consumed/s, failures and lag per topic, computed from the app's counters: the lag is
    what the broker holds beyond each queue's committed offset (the pull responses' max
    offset), not what sits in the local cache."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.last_time = time.monotonic()
        self.last_handled = 0

    def line(self) -> str:
        stats = self.app.statistics().values()
        handled = sum(s.handled for s in stats)
        failed = sum(s.failed for s in stats)
        dead = sum(s.dead_lettered for s in stats)
        now = time.monotonic()
        rate = (handled - self.last_handled) / max(now - self.last_time, 1e-6)
        self.last_time, self.last_handled = now, handled
        lag: dict[str, int] = {}
        for consumer in self.app.consumers().values():
            for topic, t in consumer.statistics().topics.items():
                lag[topic] = lag.get(topic, 0) + t.lag
        # retry topics only when something waits there
        topics = " ".join(f"{t}={n}" for t, n in sorted(lag.items()) if n or not is_retry_topic(t))
        return (
            f"consumed {handled} ({rate:,.0f}/s) failed {failed} dead-lettered {dead}"
            f" | lag {topics or '-'}"
        )


async def _status_loop(status: _Status, interval: float, tty: bool) -> None:
    while True:
        await asyncio.sleep(1.0 if tty else interval)
        if tty:
            sys.stderr.write("\r\x1b[2K" + status.line())
            sys.stderr.flush()
        else:
            log.info("%s", status.line())


async def _serve(
    app: App,
    status_interval: float | None,
    metrics_port: int | None = None,
    metrics_host: str = "0.0.0.0",
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            print("aiorocket worker draining (signal again to stop at once)", file=sys.stderr)
            stop.set()
        else:
            print("aiorocket worker stopping at once", file=sys.stderr)
            os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    serve: Callable[..., Awaitable[asyncio.Server]] | None = None
    if metrics_port is not None:
        try:  # before connecting: a missing extra is a usage error
            from aiorocket.integrations import prometheus
        except ImportError as exc:
            print(f"aiorocket worker: {exc}", file=sys.stderr)
            return 2
        serve = prometheus.serve
    try:
        await app.start()
    except (RocketError, OSError) as exc:
        print(f"aiorocket worker could not start: {exc}", file=sys.stderr)
        return 1
    metrics_server: asyncio.Server | None = None
    if serve is not None:
        try:
            metrics_server = await serve(app, host=metrics_host, port=metrics_port or 0)
        except OSError as exc:
            print(f"aiorocket worker: cannot serve metrics: {exc}", file=sys.stderr)
            await app.stop()
            return 1
        bound = metrics_server.sockets[0].getsockname()
        print(
            f"aiorocket worker metrics on http://{bound[0]}:{bound[1]}/metrics",
            file=sys.stderr,
            flush=True,
        )
    print(f"aiorocket worker started (pid {os.getpid()})", file=sys.stderr, flush=True)
    tty = sys.stderr.isatty()
    status = _Status(app)
    status_task = asyncio.create_task(
        _status_loop(status, status_interval or app.settings.status_interval, tty)
    )
    crash: BaseException | None = None
    try:
        crash = await _until_stopped_or_crashed(stop, app)
    finally:
        status_task.cancel()
        if metrics_server is not None:
            metrics_server.close()
        if crash is None:
            await app.close()
    if crash is not None:
        # The app closes its other clients meanwhile; bounded, so a supervisor sees the
        # process go within a second.
        with contextlib.suppress(Exception), anyio.move_on_after(_CRASH_CLEANUP):
            await app.wait_closed()
        if tty:
            sys.stderr.write("\n")
        raise _Crashed(describe_crash(crash))
    if tty:
        sys.stderr.write("\n")
    print(f"aiorocket worker stopped: {status.line()}", file=sys.stderr, flush=True)
    return 0


async def _until_stopped_or_crashed(stop: asyncio.Event, app: App) -> BaseException | None:
    """Wait for a stop signal (``None``) or a crash of the app (the crash)."""
    while app.crash is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), _CRASH_POLL)
            return None
    return app.crash


def _run_one(args: argparse.Namespace) -> int:
    try:
        app = load_app(args.target)
    except StartupError as exc:
        print(f"aiorocket run: {exc}", file=sys.stderr)
        return 2
    run: Callable[[Coroutine[Any, Any, int]], int] = asyncio.run
    if args.loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if args.loop == "uvloop":
                print(
                    'aiorocket run: uvloop is not installed (pip install "aiorocketmq[uvloop]")',
                    file=sys.stderr,
                )
                return 2
        else:
            run = uvloop.run
    try:
        return int(run(_serve(app, *_serve_options(args))))
    except _Crashed as exc:
        # After the loop closed: nothing the clients log while they are cancelled comes later.
        print(f"aiorocket worker crashed: {exc}", file=sys.stderr, flush=True)
        return 1


def _serve_options(args: argparse.Namespace) -> tuple[float | None, int | None, str]:
    return args.status_interval, args.metrics_port, args.metrics_host


def _supervise(args: argparse.Namespace) -> int:
    """Run ``--workers`` copies of this command and forward signals to them."""
    cmd = [
        sys.executable,
        "-m",
        "aiorocket",
        "run",
        args.target,
        "--workers",
        "1",
        "--loop",
        args.loop,
    ]
    if args.status_interval:
        cmd += ["--status-interval", str(args.status_interval)]
    cmd += ["--metrics-host", args.metrics_host]

    def worker_cmd(i: int) -> list[str]:
        if args.metrics_port is None:
            return cmd
        return [*cmd, "--metrics-port", str(args.metrics_port + i)]

    children = [subprocess.Popen(worker_cmd(i)) for i in range(args.workers)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    return max(child.wait() for child in children)


def run_worker(args: argparse.Namespace) -> int:
    """Entry point of ``aiorocket run``; returns the exit code."""
    if args.workers < 1:
        print("aiorocket run: --workers must be at least 1", file=sys.stderr)
        return 2
    apply_tls_options(args, os.environ)
    if args.workers > 1:
        return _supervise(args)
    return _run_one(args)
