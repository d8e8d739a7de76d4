"""The real Apache RocketMQ 4.9.8 (name server, broker, Java client) as test peers.

The kit lives outside this repository (``../shared/peers/apache-rocketmq-4.9.8`` beside the
checkout, or wherever ``AIOROCKET_ROCKETMQ_KIT`` points). :func:`require_kit` skips a test with
one line when it is absent, and fails instead when ``CI`` is set, so CI cannot go green by
silently skipping the interop suite.

Every Java process runs in its own process group and is stopped by PID: :class:`JavaCluster`
starts a name server and brokers on free loopback ports and waits for their "boot success";
:class:`JavaClient` runs a compiled client program and collects the JSON lines it prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "JAVA_SOURCES",
    "JavaClient",
    "JavaCluster",
    "JavaProcess",
    "KitError",
    "compile_java",
    "kit_dir",
    "kit_problem",
    "require_kit",
    "rmq",
]

#: where the kit is looked for when ``AIOROCKET_ROCKETMQ_KIT`` is unset: beside the checkout
_DEFAULT_KIT = Path(__file__).resolve().parents[3].parent / "shared/peers/apache-rocketmq-4.9.8"
#: the Java client programs the tests compile (ours, written for these tests)
JAVA_SOURCES = Path(__file__).with_name("java")

#: seconds a name server or broker may take to print "boot success" (3-6 s on an idle 2-core
#: machine; much more while the rest of the suite keeps both cores busy)
BOOT_TIMEOUT = 90.0

#: JVM options every broker gets on top of ``rmq broker``'s (through ``JDK_JAVA_OPTIONS``):
#: a broker restarted after SIGKILL recovers abnormally, and ``IndexService.load`` then
#: destroys the index files newer than the checkpoint; unmapping them calls
#: ``jdk.internal.ref.Cleaner.clean()`` by reflection (``UtilAll.cleanBuffer``), which JDK 17
#: refuses unless the package is opened, and the broker exits with "load exception".
BROKER_JVM_OPTIONS = ("--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",)


class KitError(AssertionError):
    """A Java process of the kit failed to start or misbehaved; carries its log tail."""


def kit_dir() -> Path:
    """The kit's directory (it may not exist)."""
    env = os.environ.get("AIOROCKET_ROCKETMQ_KIT")
    return Path(env).expanduser().resolve() if env else _DEFAULT_KIT


@functools.cache
def kit_problem() -> str | None:
    """Why the kit cannot run here, or ``None`` when it can (checked once per session)."""
    kit = kit_dir()
    if not (kit / "bin" / "rmq").is_file():
        return (
            f"Apache RocketMQ 4.9.8 kit not found at {kit} "
            "(set AIOROCKET_ROCKETMQ_KIT to its directory)"
        )
    if shutil.which("java") is None or shutil.which("javac") is None:
        return "the Apache RocketMQ kit needs a JDK 17 (java and javac on PATH)"
    return None


def require_kit() -> None:
    """Skip the calling test when the kit is missing; fail instead when ``CI`` is set."""
    problem = kit_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{problem}; CI must run the interop tests", pytrace=False)
    pytest.skip(problem)


def rmq() -> str:
    """The kit's ``bin/rmq`` launcher."""
    return str(kit_dir() / "bin" / "rmq")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_bytes()[-32768:].decode("utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _ports_free(ports: Sequence[int]) -> bool:
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


def free_port(span: Sequence[int] = (0,)) -> int:
    """A port ``p`` such that ``p + d`` is free for every ``d`` in ``span``.

    The Java broker listens on its port, port - 2 (the VIP channel) and port + 1 (HA), on all
    interfaces, so a broker asks for ``span=(-2, -1, 0, 1)``.
    """
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(20000, 60000)
        if _ports_free([base + d for d in span]):
            return base
    raise KitError(f"no free ports with offsets {tuple(span)} after 500 tries")


class JavaProcess:
    """One Java process of the kit in its own process group, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str]) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self._env = dict(env)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process (its output goes to :attr:`log`)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self._env,
            )

    @property
    def pid(self) -> int:
        """The process's PID (also its process group id)."""
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the process is running."""
        return self.proc is not None and self.proc.poll() is None

    def wait_for_line(self, text: str, timeout: float = BOOT_TIMEOUT) -> None:
        """Wait until ``text`` appears in the log.

        Raises:
            KitError: the process exited first, or ``timeout`` passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):
                if text in self.log.read_text("utf-8", errors="replace"):
                    return
            if not self.alive():
                raise KitError(f"{self.name} exited before {text!r}:\n{_tail(self.log)}")
            if time.monotonic() > deadline:
                raise KitError(
                    f"{self.name}: no {text!r} after {timeout:.0f} s:\n{_tail(self.log)}"
                )
            time.sleep(0.1)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process group and reap it."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM (Java runs its shutdown hooks), SIGKILL after ``grace`` seconds."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        # whatever the JVM left in its group (none expected) goes too
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def tail(self, lines: int = 40) -> str:
        """The last lines of the log."""
        return _tail(self.log, lines)


def _with_jvm_options(env: Mapping[str, str], options: Sequence[str]) -> dict[str, str]:
    """``env`` with ``options`` appended to ``JDK_JAVA_OPTIONS`` (which ``java`` prepends to
    its arguments; ``rmq`` passes no options of its own)."""
    out = dict(env)
    if options:
        out["JDK_JAVA_OPTIONS"] = " ".join([out.get("JDK_JAVA_OPTIONS", ""), *options]).strip()
    return out


class JavaCluster:
    """A Java name server and brokers on free loopback ports, under ``root``.

    Args:
        root: a directory for the processes' data and logs.
        brokers: broker names; each gets its own port and data directory.
        broker_conf: ``k=v`` settings added to every broker's ``broker.conf``.
        files: extra files written into each broker's ``conf/`` before it starts (e.g.
            ``{"plain_acl.yml": ...}`` for ``aclEnable=true``).
        system_properties: JVM system properties (``-Dk=v``) of every broker, for the broker
            settings that are not ``broker.conf`` keys but ``System.getProperty`` reads (e.g.
            ``rocketmq.broker.rebalance.lockMaxLiveTime``). ``rmq broker`` passes no JVM
            options, so they go through ``JDK_JAVA_OPTIONS``, which the JDK's ``java``
            launcher itself prepends to its arguments.
        jvm_options: JVM options of the name server *and* every broker (also through
            ``JDK_JAVA_OPTIONS``), for what both servers read, such as the TLS system
            properties (``-Dtls.server.mode=enforcing``, ...).
    """

    def __init__(
        self,
        root: Path,
        brokers: Sequence[str] = ("broker-a",),
        broker_conf: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        system_properties: Mapping[str, str] | None = None,
        jvm_options: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.broker_names = list(brokers)
        self.broker_conf = dict(broker_conf or {})
        self.files = dict(files or {})
        self.system_properties = dict(system_properties or {})
        self.jvm_options = list(jvm_options)
        self.namesrv_port = free_port()
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self.broker_ports: dict[str, int] = {}
        self.processes: dict[str, JavaProcess] = {}
        self._env = {**os.environ, "TMPDIR": str(root)}

    def _namesrv_process(self) -> JavaProcess:
        env = _with_jvm_options(self._env, self.jvm_options)
        return JavaProcess(
            "namesrv",
            [rmq(), "namesrv", str(self.namesrv_port), str(self.root / "namesrv")],
            self.root / "namesrv.log",
            env,
        )

    def _broker_process(self, name: str) -> JavaProcess:
        port = self.broker_ports.get(name)
        if port is None:
            taken = {p + d for p in self.broker_ports.values() for d in (-2, -1, 0, 1)}
            port = free_port((-2, -1, 0, 1))
            while {port + d for d in (-2, -1, 0, 1)} & (taken | {self.namesrv_port}):
                port = free_port((-2, -1, 0, 1))
            self.broker_ports[name] = port
        data = self.root / name
        conf = data / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        for file_name, text in self.files.items():
            (conf / file_name).write_text(text)
        kvs = [f"{k}={v}" for k, v in self.broker_conf.items()]
        env = dict(self._env)
        options = [*BROKER_JVM_OPTIONS]
        options += [f"-D{k}={v}" for k, v in self.system_properties.items()]
        options += self.jvm_options
        env["JDK_JAVA_OPTIONS"] = " ".join([env.get("JDK_JAVA_OPTIONS", ""), *options]).strip()
        return JavaProcess(
            name,
            [rmq(), "broker", self.namesrv, str(port), str(data), name, *kvs],
            self.root / f"{name}.log",
            env,
        )

    def broker_addr(self, name: str) -> str:
        """``127.0.0.1:port`` of a broker."""
        return f"127.0.0.1:{self.broker_ports[name]}"

    def start(self) -> JavaCluster:
        """Start the name server, then every broker (in parallel); wait until all booted."""
        ns = self._namesrv_process()
        self.processes["namesrv"] = ns
        ns.start()
        for name in self.broker_names:
            self.processes[name] = self._broker_process(name)
            self.processes[name].start()
        ns.wait_for_line("boot success")
        for name in self.broker_names:
            self.processes[name].wait_for_line("boot success")
        return self

    def kill_broker(self, name: str) -> None:
        """SIGKILL a broker (its data directory stays for :meth:`restart_broker`)."""
        self.processes[name].kill()

    def stop_broker(self, name: str) -> None:
        """Stop a broker with SIGTERM (it unregisters from the name server)."""
        self.processes[name].stop()

    def restart_broker(self, name: str) -> None:
        """Start a stopped or killed broker again on its port and data; wait for boot."""
        old = self.processes[name]
        if old.alive():
            raise KitError(f"{name} is still running")
        proc = self._broker_process(name)
        # a new "boot success" must be told apart from the previous run's
        proc.log = self.root / f"{name}.{int(time.time() * 1000)}.log"
        self.processes[name] = proc
        proc.start()
        proc.wait_for_line("boot success")

    def stop(self, *, graceful: bool = False) -> None:
        """Stop every process, brokers first, then the name server: SIGKILL by default (the
        cluster's data is thrown away, and a JVM's shutdown hooks take seconds per broker),
        SIGTERM first when ``graceful``."""
        order = [n for n in reversed(self.processes) if n != "namesrv"]
        order += ["namesrv"] if "namesrv" in self.processes else []
        for name in order:
            if graceful:
                self.processes[name].stop(grace=10.0)
            else:
                self.processes[name].kill()

    def admin(self, *args: str, timeout: float = 90.0) -> str:
        """Run ``mqadmin`` against this cluster's name server; its stdout.

        Raises:
            KitError: it exited non-zero.
        """
        return run_admin(self.namesrv, *args, timeout=timeout, tmp=self.root)

    def __enter__(self) -> JavaCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_admin(namesrv: str, *args: str, timeout: float = 90.0, tmp: Path | None = None) -> str:
    """Run ``rmq admin SUBCOMMAND ... -n NAMESRV``; its stdout.

    Raises:
        KitError: it exited non-zero or timed out.
    """
    env = dict(os.environ)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    argv = [rmq(), "admin", *args, "-n", namesrv]
    try:
        # In ``tmp``: ``consumerStatus -g`` writes each client's running info to
        # ``<millis>/<clientId>`` under its working directory (ConsumerStatusSubCommand).
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
            cwd=tmp,
        )
    except subprocess.TimeoutExpired as exc:
        raise KitError(f"mqadmin {' '.join(args)} timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise KitError(
            f"mqadmin {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout


def compile_java(out: Path, sources: Sequence[Path] | None = None) -> Path:
    """Compile the test programs (``java/*.java`` and the kit's ``src/``) into ``out``."""
    if sources is None:
        sources = sorted(JAVA_SOURCES.glob("*.java")) + sorted((kit_dir() / "src").glob("*.java"))
    proc = subprocess.run(
        [rmq(), "javac", str(out), *map(str, sources)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise KitError(f"javac failed:\n{proc.stdout}\n{proc.stderr}")
    return out


class JavaClient:
    """A running Java client program (``rmq run``) and the JSON lines it printed so far.

    The Java client logs to stdout too; only lines starting with ``{`` are events. Create with
    :meth:`start`; always :meth:`stop` or :meth:`kill` it (the fixtures' ``finally`` does).
    """

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read(), name=f"{name}-stdout")
        self.returncode: int | None = None

    @classmethod
    async def start(
        cls,
        classes: Path,
        main: str,
        *args: str,
        name: str | None = None,
        tmp: Path,
        jvm_options: Sequence[str] = (),
    ) -> JavaClient:
        """Run ``main`` from ``classes`` with ``args``; ``tmp`` holds its client logs;
        ``jvm_options`` go to its JVM (e.g. ``-Dtls.enable=true``)."""
        tmp.mkdir(parents=True, exist_ok=True)
        label = name or main
        log = tmp / f"{label}-{os.urandom(3).hex()}.out"
        proc = await asyncio.create_subprocess_exec(
            rmq(),
            "run",
            str(classes),
            main,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env=_with_jvm_options({**os.environ, "TMPDIR": str(tmp)}, jvm_options),
            # a JSON line may carry a large body: asyncio's default 64 KiB line limit would
            # stop the reader and leave the program blocked on a full pipe
            limit=64 * 1024 * 1024,
        )
        return cls(label, proc, log)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("ab") as out:
            async for raw in self.proc.stdout:
                out.write(raw)
                out.flush()
                line = raw.decode("utf-8", errors="replace").strip()
                if line.startswith("{"):
                    with contextlib.suppress(json.JSONDecodeError):
                        self.events.append(json.loads(line))
                        self._changed.set()
        self._changed.set()

    def of(self, kind: str) -> list[dict[str, Any]]:
        """Events whose ``"ev"`` field is ``kind``."""
        return [e for e in self.events if e.get("ev") == kind]

    def diagnostics(self) -> str:
        """The tail of the program's output, for assertion messages."""
        return f"--- {self.name} (pid {self.proc.pid}) output tail ---\n{_tail(self.log, 60)}"

    async def wait_until(
        self, predicate: Callable[[JavaClient], bool], timeout: float, what: str = ""
    ) -> None:
        """Wait until ``predicate(self)`` holds, re-checking after each new line.

        Raises:
            KitError: the timeout passed or the program exited first.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            if self._reader.done():
                await self._reap()
                raise KitError(
                    f"{self.name} exited ({self.returncode}) before {what or 'the condition'}\n"
                    + self.diagnostics()
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise KitError(
                    f"{self.name}: timed out after {timeout:.0f} s waiting for "
                    f"{what or 'a condition'}\n" + self.diagnostics()
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    async def wait_event(self, kind: str, timeout: float) -> dict[str, Any]:
        """The first event of ``kind``, waiting up to ``timeout`` for it."""
        await self.wait_until(lambda c: bool(c.of(kind)), timeout, f"a {kind!r} event")
        return self.of(kind)[0]

    async def _reap(self) -> int:
        rc = await self.proc.wait()
        with contextlib.suppress(Exception):
            await self._reader
        self.returncode = rc
        return rc

    async def wait_exit(self, timeout: float, expect: int | None = 0) -> int:
        """Wait for the program to exit (killed after ``timeout``); check its exit code.

        Raises:
            KitError: it timed out or exited with another code than ``expect``.
        """
        try:
            rc = await asyncio.wait_for(self._reap(), timeout)
        except TimeoutError:
            await self.kill()
            raise KitError(
                f"{self.name} still running after {timeout:.0f} s\n" + self.diagnostics()
            ) from None
        if expect is not None and rc != expect:
            raise KitError(f"{self.name} exited {rc}, expected {expect}\n" + self.diagnostics())
        return rc

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def stop(self, grace: float = 15.0) -> int:
        """SIGTERM (the JVM runs its shutdown hooks: the client unregisters), then SIGKILL."""
        if self.proc.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                return await asyncio.wait_for(self._reap(), grace)
            except TimeoutError:
                pass
        await self.kill()
        return self.returncode if self.returncode is not None else -9

    async def kill(self) -> None:
        """SIGKILL the program's process group and reap it."""
        self._signal(signal.SIGKILL)
        await self._reap()
