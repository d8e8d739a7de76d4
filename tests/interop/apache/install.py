"""An Apache RocketMQ install (``ROCKETMQ_HOME``) as test peers: name servers, brokers,
``mqadmin`` and Java client programs.

RocketMQ users have Apache RocketMQ as a binary distribution whose ``lib/`` holds every jar;
``ROCKETMQ_HOME`` (Apache's own variable) names it. Nothing else of the install is used: each
process runs as ``java -cp "$ROCKETMQ_HOME/lib/*" <main class>`` on the machine's JDK, and this
harness writes its own ``namesrv.conf``, ``broker.conf`` and logging configuration, so the same
code drives 4.9.x and 5.x (the version is read off the install's jars).

* No ``ROCKETMQ_HOME``: the interop modules are skipped, one line each (``conftest.py``).
* ``ROCKETMQ_HOME`` set but unusable (no jars, no JDK, unknown version): the run stops at
  collection with one message saying what is wrong.

Servers listen on loopback where the version lets them choose (5.x's ``bindAddress``); a 4.9.x
server has no such setting and listens on every interface, so its ports are only ever used
through 127.0.0.1. A broker is ready when the name server routes to it (its cluster info lists the broker's
address as master), not when it logs "boot success": a 5.x broker restarted under the same
name can be missing from the name server for seconds after that line. Every process runs in
its own process group and is stopped by PID: SIGTERM with a bounded wait, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiorocket._protocol.bodies import ClusterInfo
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import decode_frame, encode_command

__all__ = [
    "ENV",
    "JAVA5_SOURCES",
    "JAVA_SOURCES",
    "Install",
    "InstallError",
    "JavaClient",
    "JavaCluster",
    "JavaProcess",
    "cluster_info",
    "compile_java",
    "find_install",
    "free_port",
    "install",
    "BrokerNode",
    "dledger_group",
    "master_slave",
    "request",
    "require_install",
    "run_admin",
    "run_java",
]

#: Apache RocketMQ's own variable naming an install
ENV = "ROCKETMQ_HOME"
#: the Java client programs the tests compile (ours, written for these tests)
JAVA_SOURCES = Path(__file__).with_name("java")
#: the programs that need a 5.x install (``java5/``); they print with ``java/JsonOut.java``
JAVA5_SOURCES = (
    *sorted(Path(__file__).with_name("java5").glob("*.java")),
    JAVA_SOURCES / "JsonOut.java",
)

#: seconds a name server or broker may take to be routed to (3-6 s on an idle 2-core machine;
#: much more while the rest of the suite keeps both cores busy)
BOOT_TIMEOUT = 90.0

#: seconds a graceful stop may take before SIGKILL (a 5.x broker takes 11-19 s to shut down)
STOP_GRACE = 30.0

#: JVM options of every process: on JDK 9+ RocketMQ reaches into ``java.nio`` internals by
#: reflection (``UtilAll.cleanBuffer`` unmapping a ``MappedByteBuffer``, which a broker does
#: when it recovers after SIGKILL and destroys index files newer than the checkpoint), and the
#: JDK refuses it unless the packages are opened; small heaps, since a test runs several.
JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:-OmitStackTraceInFastThrow",
    "-Dfile.encoding=UTF-8",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
)
SERVER_HEAP = ("-Xms128m", "-Xmx768m", "-XX:MaxDirectMemorySize=1g")
CLIENT_HEAP = ("-Xms32m", "-Xmx512m")

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
ADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"

#: The logging configuration every process gets, written by the harness: one file per process.
#: 4.9.x servers load ``$rocketmqHome/conf/logback_<role>.xml`` themselves; 5.x loads the file
#: named by ``logback.configurationFile`` (its shaded logback maps the class names).
LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <append>true</append>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5p [%t] %c{{1}} - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""

_VERSION_JAR = re.compile(r"^rocketmq-(?:common|client|broker|remoting)-(\d+\.\d+\.\d+)\b")


class InstallError(AssertionError):
    """The install cannot run here, or one of its processes failed; says why."""


@dataclass(frozen=True)
class Install:
    """A usable Apache RocketMQ install: ``home/lib/*.jar`` and a JDK to run it."""

    home: Path
    version: str
    java: str
    javac: str

    @property
    def lib(self) -> Path:
        """The jars' directory."""
        return self.home / "lib"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        """``(5, 3, 3)`` for ``"5.3.3"``."""
        return tuple(int(p) for p in self.version.split("."))

    @property
    def v5(self) -> bool:
        """Whether this is a 5.x install (where several behaviours differ from 4.9.x)."""
        return self.version_tuple >= (5,)

    @property
    def version_name(self) -> str:
        """The version as RocketMQ names it on the wire and in ``mqadmin``: ``V4_9_8``."""
        return "V" + self.version.replace(".", "_")

    def classpath(self, *extra: Path | str) -> str:
        """``extra`` entries, then every jar of the install."""
        return os.pathsep.join([*map(str, extra), str(self.lib / "*")])

    def java_argv(
        self,
        main: str,
        *args: str,
        classpath: Sequence[Path | str] = (),
        jvm_options: Sequence[str] = (),
        heap: Sequence[str] = CLIENT_HEAP,
    ) -> list[str]:
        """``java`` with the harness's options running ``main`` of the install (and of
        ``classpath``, searched first)."""
        return [
            self.java,
            *JVM_OPTIONS,
            *heap,
            *jvm_options,
            "-cp",
            self.classpath(*classpath),
            main,
            *args,
        ]


def _jdk_tool(name: str, env: Mapping[str, str]) -> str | None:
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name, path=env.get("PATH"))


def _jar_version(jar: Path) -> str | None:
    """The version in a RocketMQ jar's Maven metadata (a renamed jar keeps it)."""
    with contextlib.suppress(OSError, zipfile.BadZipFile), zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if name.startswith("META-INF/maven/org.apache.rocketmq/") and name.endswith(
                "/pom.properties"
            ):
                for line in z.read(name).decode("latin-1").splitlines():
                    if line.startswith("version="):
                        found = re.match(r"\d+\.\d+\.\d+", line[len("version=") :])
                        if found:
                            return found.group(0)
    return None


def _detect_version(lib: Path) -> str | None:
    jars = sorted(lib.glob("rocketmq-*.jar"))
    for jar in jars:
        m = _VERSION_JAR.match(jar.name)
        if m:
            return m.group(1)
    for jar in jars:
        found = _jar_version(jar)
        if found:
            return found
    return None


def find_install(env: Mapping[str, str] | None = None) -> Install | None:
    """The install ``ROCKETMQ_HOME`` names in ``env`` (default: this process's), or ``None``
    when it is unset.

    Raises:
        InstallError: it is set, but names no usable install or there is no JDK; the message
            is one line saying which.
    """
    env = os.environ if env is None else env
    raw = env.get(ENV, "").strip()
    if not raw:
        return None
    home = Path(raw).expanduser().resolve()
    lib = home / "lib"
    if not home.is_dir():
        raise InstallError(f"{ENV}={raw} is not a directory")
    if not any(lib.glob("*.jar")):
        raise InstallError(
            f"{ENV}={raw} has no lib/*.jar: it must name an Apache RocketMQ binary install"
        )
    if not any(lib.glob("rocketmq-*.jar")):
        raise InstallError(f"{ENV}={raw}: lib/ holds no rocketmq-*.jar")
    version = _detect_version(lib)
    if version is None:
        raise InstallError(
            f"{ENV}={raw}: cannot tell the RocketMQ version (no lib/rocketmq-common-<version>.jar "
            "and no Maven metadata in its jars)"
        )
    java, javac = _jdk_tool("java", env), _jdk_tool("javac", env)
    if java is None or javac is None:
        raise InstallError(
            f"{ENV}={raw} is set but no JDK was found (java and javac on PATH or in JAVA_HOME)"
        )
    return Install(home=home, version=version, java=java, javac=javac)


@functools.cache
def install() -> Install | None:
    """:func:`find_install` for this process, looked at once."""
    return find_install()


def require_install() -> Install:
    """The install, or skip the calling test with one line when there is none.

    Raises:
        InstallError: ``ROCKETMQ_HOME`` is set but unusable.
    """
    found = install()
    if found is None:
        pytest.skip(f"{ENV} is not set: no Apache RocketMQ install to test against")
    return found


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

    A Java broker listens on its port, port - 2 (the VIP channel) and port + 1 (HA), so a
    broker asks for ``span=(-2, -1, 0, 1)``.
    """
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(20000, 60000)
        if _ports_free([base + d for d in span]):
            return base
    raise InstallError(f"no free ports with offsets {tuple(span)} after 500 tries")


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed mid-frame")
        out += chunk
    return bytes(out)


def _unverified_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def request(
    addr: str, cmd: RemotingCommand, timeout: float = 3.0, *, tls: bool = False
) -> RemotingCommand:
    """Send one request to ``addr`` on a new blocking connection; its response. With ``tls``
    the connection is TLS without verification (a readiness probe of a TLS-only server).

    Blocking on purpose: the harness is called from synchronous fixtures and from threads.

    Raises:
        OSError: the connection failed or timed out.
    """
    host, port = addr.rsplit(":", 1)
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, int(port)), timeout=timeout))
        if tls:
            sock = stack.enter_context(_unverified_tls().wrap_socket(sock, server_hostname=host))
        sock.settimeout(timeout)
        sock.sendall(encode_command(cmd))
        (length,) = struct.unpack(">i", _read_exact(sock, 4))
        return decode_frame(struct.pack(">i", length) + _read_exact(sock, length))


def cluster_info(namesrv: str, timeout: float = 3.0, *, tls: bool = False) -> ClusterInfo:
    """The name server's GET_BROKER_CLUSTER_INFO answer (over TLS with ``tls``).

    Raises:
        OSError: the name server did not answer.
        InstallError: it answered with an error.
    """
    cmd = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    resp = request(namesrv, cmd, timeout, tls=tls)
    if resp.code != 0:
        raise InstallError(f"{namesrv}: cluster info refused: [{resp.code}] {resp.remark}")
    return ClusterInfo.from_json(resp.body)


class JavaProcess:
    """One Java process in its own process group, its output going to a file."""

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

    def wait_until(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll ``ready`` until it holds.

        Raises:
            InstallError: the process exited first, or ``timeout`` passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return
            if not self.alive():
                raise InstallError(f"{self.name} exited before {what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise InstallError(f"{self.name}: not {what} after {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.2)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process group and reap it."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, grace: float = STOP_GRACE) -> None:
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
        """The last lines of the process's output and of its log file."""
        text = _tail(self.log, lines)
        logs = self.log.parent / self.name / "logs" / f"{self.name}.log"
        if logs.is_file():
            text += f"\n--- {logs.name} ---\n" + _tail(logs, lines)
        return text


def _write_home(home: Path, role: str, files: Mapping[str, str] | None = None) -> Path:
    """A process's ``rocketmqHome``: ``conf/`` with its logging configuration (and
    ``files``), ``logs/``; returns the logging configuration's path."""
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(exist_ok=True)
    logback = conf / f"logback_{role}.xml"
    logback.write_text(LOGBACK.format(log=home / "logs" / f"{home.name}.log"))
    for file_name, text in (files or {}).items():
        (conf / file_name).write_text(text)
    return logback


def _home_options(home: Path, logback: Path) -> list[str]:
    # user.home: where 4.9.x writes what it keeps beside the store (and client logs);
    # rocketmq.home.dir: the servers' rocketmqHome, and where ACL 1.0 reads conf/plain_acl.yml
    return [
        f"-Duser.home={home}",
        f"-Drocketmq.home.dir={home}",
        f"-Dlogback.configurationFile={logback}",
        f"-Drocketmq.client.logRoot={home / 'logs'}",
    ]


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


@dataclass(frozen=True)
class BrokerNode:
    """One broker process of a :class:`JavaCluster`.

    Attributes:
        key: the process's name in the cluster (its data directory, its log).
        broker_name: the broker name it serves (shared by a group's members).
        broker_id: 0 for a master, 1... for a slave (a DLedger member's id follows its role).
        role: ``ASYNC_MASTER``, ``SYNC_MASTER`` or ``SLAVE``.
        dledger_id: the member's DLedger self id (``n0``...) in a DLedger group, else ``None``.
    """

    key: str
    broker_name: str
    broker_id: int = 0
    role: str = "ASYNC_MASTER"
    dledger_id: str | None = None


def master_slave(name: str, role: str = "SYNC_MASTER") -> list[BrokerNode]:
    """A master (``name``) and one slave (``name-s``) of broker name ``name``."""
    return [BrokerNode(name, name, 0, role), BrokerNode(f"{name}-s", name, 1, "SLAVE")]


def dledger_group(name: str, size: int = 3) -> list[BrokerNode]:
    """A DLedger (Raft) group of ``size`` members of broker name ``name`` (``name-n0``...),
    which elect the master among themselves."""
    return [BrokerNode(f"{name}-n{i}", name, dledger_id=f"n{i}") for i in range(size)]


class JavaCluster:
    """A name server and brokers of the install, on free loopback ports under ``root``.

    Args:
        root: a directory for the processes' homes, data and logs.
        brokers: broker names, a master each; or :class:`BrokerNode` lists (groups:
            :func:`master_slave`, :func:`dledger_group`); each process gets its own port and
            data directory.
        broker_conf: settings added to every broker's ``broker.conf``.
        files: extra files written into each broker's ``conf/`` before it starts (e.g.
            ``{"plain_acl.yml": ...}`` for ACL 1.0's ``aclEnable=true``).
        system_properties: JVM system properties (``-Dk=v``) of every broker, for the broker
            settings that are not ``broker.conf`` keys but ``System.getProperty`` reads (e.g.
            ``rocketmq.broker.rebalance.lockMaxLiveTime``).
        jvm_options: JVM options of the name server *and* every broker, for what both
            servers read, such as the TLS system properties (``-Dtls.server.mode=enforcing``).
        broker_classpath: directories or jars put before the install's on every broker's class
            path (the classes a ``broker.conf`` setting names, such as an ACL 2.0 provider).
        install: the install to run (default: ``ROCKETMQ_HOME``'s).
    """

    def __init__(
        self,
        root: Path,
        brokers: Sequence[str | BrokerNode] = ("broker-a",),
        broker_conf: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        system_properties: Mapping[str, str] | None = None,
        jvm_options: Sequence[str] = (),
        broker_classpath: Sequence[Path] = (),
        install: Install | None = None,
    ) -> None:
        self.install = install or require_install()
        self.broker_classpath = list(broker_classpath)
        self.root = root
        self.nodes = {
            n.key: n
            for n in (b if isinstance(b, BrokerNode) else BrokerNode(b, b) for b in brokers)
        }
        self.broker_names = sorted({n.broker_name for n in self.nodes.values()})
        #: DLedger members' peer ports (the Raft channel), allocated up front: every member's
        #: configuration lists all of them
        self.dledger_ports = {k: free_port() for k, n in self.nodes.items() if n.dledger_id}
        self.broker_conf = dict(broker_conf or {})
        self.files = dict(files or {})
        self.system_properties = dict(system_properties or {})
        self.jvm_options = list(jvm_options)
        #: the servers accept TLS only, so the readiness probes speak it
        self.tls = "-Dtls.server.mode=enforcing" in self.jvm_options
        self.namesrv_port = free_port()
        self.namesrv = f"127.0.0.1:{self.namesrv_port}"
        self.broker_ports: dict[str, int] = {}
        self.processes: dict[str, JavaProcess] = {}
        self._env = {**os.environ, "TMPDIR": str(root)}

    def _env_for(self, home: Path) -> dict[str, str]:
        return {**self._env, ENV: str(home)}

    def _namesrv_process(self) -> JavaProcess:
        home = self.root / "namesrv"
        logback = _write_home(home, "namesrv")
        conf = home / "namesrv.conf"
        values = {
            "listenPort": str(self.namesrv_port),
            "rocketmqHome": str(home),
            "kvConfigPath": str(home / "kvConfig.json"),
            "configStorePath": str(home / "namesrv.properties"),
        }
        if self.install.v5:
            values["bindAddress"] = "127.0.0.1"
        conf.write_text(_properties(values))
        argv = self.install.java_argv(
            NAMESRV_MAIN,
            "-c",
            str(conf),
            jvm_options=[*_home_options(home, logback), *self.jvm_options],
            heap=SERVER_HEAP,
        )
        return JavaProcess("namesrv", argv, self.root / "namesrv.out", self._env_for(home))

    def _allocate_port(self, name: str) -> int:
        port = self.broker_ports.get(name)
        if port is None:
            taken = {p + d for p in self.broker_ports.values() for d in (-2, -1, 0, 1)}
            taken |= set(self.dledger_ports.values())
            port = free_port((-2, -1, 0, 1))
            while {port + d for d in (-2, -1, 0, 1)} & (taken | {self.namesrv_port}):
                port = free_port((-2, -1, 0, 1))
            self.broker_ports[name] = port
        return port

    def _dledger_conf(self, node: BrokerNode) -> dict[str, str]:
        if node.dledger_id is None:
            return {}
        peers = ";".join(
            f"{n.dledger_id}-127.0.0.1:{self.dledger_ports[n.key]}"
            for n in self.nodes.values()
            if n.broker_name == node.broker_name and n.dledger_id
        )
        return {
            "enableDLegerCommitLog": "true",
            "dLegerGroup": node.broker_name,
            "dLegerPeers": peers,
            "dLegerSelfId": node.dledger_id,
        }

    def _broker_process(self, name: str, log: Path | None = None) -> JavaProcess:
        node = self.nodes[name]
        port = self._allocate_port(name)
        home = self.root / name
        logback = _write_home(home, "broker", self.files)
        conf = home / "broker.conf"
        values = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": node.broker_name,
            "brokerId": str(node.broker_id),
            "namesrvAddr": self.namesrv,
            "listenPort": str(port),
            "brokerIP1": "127.0.0.1",
            "brokerIP2": "127.0.0.1",
            "rocketmqHome": str(home),
            "storePathRootDir": str(home / "store"),
            "storePathCommitLog": str(home / "store" / "commitlog"),
            "brokerRole": node.role,
            "flushDiskType": "ASYNC_FLUSH",
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            **({"bindAddress": "127.0.0.1"} if self.install.v5 else {}),
            **self._dledger_conf(node),
            **self.broker_conf,
        }
        conf.write_text(_properties(values))
        options = [*_home_options(home, logback)]
        options += [f"-D{k}={v}" for k, v in self.system_properties.items()]
        options += self.jvm_options
        argv = self.install.java_argv(
            BROKER_MAIN,
            "-c",
            str(conf),
            classpath=self.broker_classpath,
            jvm_options=options,
            heap=SERVER_HEAP,
        )
        return JavaProcess(name, argv, log or self.root / f"{name}.out", self._env_for(home))

    def broker_addr(self, name: str) -> str:
        """``127.0.0.1:port`` of a broker process."""
        return f"127.0.0.1:{self.broker_ports[name]}"

    def routed(self, name: str) -> bool:
        """Whether the name server lists broker process ``name`` under its id (a DLedger
        member: under any id, and its group has a master)."""
        node = self.nodes[name]
        data = cluster_info(self.namesrv, tls=self.tls).broker_addr_table.get(node.broker_name)
        if data is None:
            return False
        addr = self.broker_addr(name)
        if node.dledger_id is not None:
            return addr in data.broker_addrs.values() and 0 in data.broker_addrs
        return data.broker_addrs.get(node.broker_id) == addr

    def master_of(self, broker_name: str) -> str | None:
        """The process the name server names as ``broker_name``'s master, if any."""
        data = cluster_info(self.namesrv, tls=self.tls).broker_addr_table.get(broker_name)
        addr = data.broker_addrs.get(0) if data is not None else None
        return next((k for k in self.nodes if addr == self.broker_addr(k)), None)

    def _wait_namesrv(self) -> None:
        def answers() -> bool:
            cluster_info(self.namesrv, tls=self.tls)
            return True

        self.processes["namesrv"].wait_until(answers, "answering", BOOT_TIMEOUT)

    def _wait_broker(self, name: str) -> None:
        self.processes[name].wait_until(
            lambda: self.routed(name), "routed to by the name server", BOOT_TIMEOUT
        )

    def start(self) -> JavaCluster:
        """Start the name server, then every broker (in parallel); wait until the name server
        routes to all of them."""
        ns = self._namesrv_process()
        self.processes["namesrv"] = ns
        ns.start()
        self._wait_namesrv()
        # masters first: a slave learns its master's HA address from the answer to its
        # registration, and registers again only every 30 s (registerNameServerPeriod)
        for phase in (False, True):
            names = [k for k, n in self.nodes.items() if (n.role == "SLAVE") == phase]
            for name in names:
                self.processes[name] = self._broker_process(name)
                self.processes[name].start()
            for name in names:
                self._wait_broker(name)
        return self

    def kill_broker(self, name: str) -> None:
        """SIGKILL a broker (its data directory stays for :meth:`restart_broker`)."""
        self.processes[name].kill()

    def stop_broker(self, name: str) -> None:
        """Stop a broker with SIGTERM (it unregisters from the name server)."""
        self.processes[name].stop()

    def restart_broker(self, name: str) -> None:
        """Start a stopped or killed broker again on its port and data; wait until routed."""
        old = self.processes[name]
        if old.alive():
            raise InstallError(f"{name} is still running")
        proc = self._broker_process(name, self.root / f"{name}.{int(time.time() * 1000)}.out")
        self.processes[name] = proc
        proc.start()
        self._wait_broker(name)

    def stop(self, *, graceful: bool = False) -> None:
        """Stop every process, brokers first, then the name server: SIGKILL by default (the
        cluster's data is thrown away, and a JVM's shutdown hooks take seconds per broker),
        SIGTERM first when ``graceful``."""
        order = [n for n in reversed(self.processes) if n != "namesrv"]
        order += ["namesrv"] if "namesrv" in self.processes else []
        for name in order:
            if graceful:
                self.processes[name].stop()
            else:
                self.processes[name].kill()

    def admin(self, *args: str, timeout: float = 90.0) -> str:
        """Run ``mqadmin`` against this cluster's name server; its stdout.

        Raises:
            InstallError: it exited non-zero.
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


def tools_home(tmp: Path) -> Path:
    """A ``rocketmqHome`` for ``mqadmin`` under ``tmp``: its logging configuration (4.9.x's
    ``MQAdminStartup`` loads ``$rocketmq.home.dir/conf/logback_tools.xml``)."""
    home = tmp / "tools-home"
    if not (home / "conf" / "logback_tools.xml").is_file():
        _write_home(home, "tools")
    return home


def tools_options(tmp: Path) -> list[str]:
    """The JVM options of a process that runs ``mqadmin`` commands."""
    home = tools_home(tmp)
    return _home_options(home, home / "conf" / "logback_tools.xml")


def run_java(
    main: str,
    *args: str,
    classpath: Sequence[Path | str] = (),
    tmp: Path,
    jvm_options: Sequence[str] = (),
    timeout: float = 120.0,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``main`` (of ``classpath`` or the install) to completion in ``tmp``; its result
    (the exit code is the caller's to check).

    Raises:
        InstallError: it timed out.
    """
    found = require_install()
    tmp.mkdir(parents=True, exist_ok=True)
    argv = found.java_argv(
        main, *args, classpath=classpath, jvm_options=[*tools_options(tmp), *jvm_options]
    )
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "TMPDIR": str(tmp)},
            check=False,
            cwd=tmp,
            input=input,
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{main} {' '.join(args)} timed out after {timeout:.0f} s") from exc


def run_admin(namesrv: str, *args: str, timeout: float = 90.0, tmp: Path) -> str:
    """Run ``mqadmin SUBCOMMAND ... -n NAMESRV`` in ``tmp``; its stdout.

    In ``tmp`` because ``consumerStatus -g`` writes each client's running info to
    ``<millis>/<clientId>`` under its working directory (``ConsumerStatusSubCommand``).

    Raises:
        InstallError: it exited non-zero or timed out.
    """
    proc = run_java(ADMIN_MAIN, *args, "-n", namesrv, tmp=tmp, timeout=timeout)
    if proc.returncode != 0:
        raise InstallError(
            f"mqadmin {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout


def compile_java(out: Path, sources: Sequence[Path] | None = None) -> Path:
    """Compile the test programs (``java/*.java`` by default) against the install into
    ``out``."""
    found = require_install()
    if sources is None:
        sources = sorted(JAVA_SOURCES.glob("*.java"))
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            found.javac,
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-proc:none",
            "-cp",
            found.classpath(),
            "-d",
            str(out),
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise InstallError(f"javac failed:\n{proc.stdout}\n{proc.stderr}")
    return out


class JavaClient:
    """A running Java client program and the JSON lines it printed so far.

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
        found = require_install()
        tmp.mkdir(parents=True, exist_ok=True)
        label = name or main
        log = tmp / f"{label}-{os.urandom(3).hex()}.out"
        argv = found.java_argv(
            main,
            *args,
            classpath=[classes],
            jvm_options=[*tools_options(tmp), *jvm_options],
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "TMPDIR": str(tmp)},
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
            InstallError: the timeout passed or the program exited first.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            if self._reader.done():
                await self._reap()
                raise InstallError(
                    f"{self.name} exited ({self.returncode}) before {what or 'the condition'}\n"
                    + self.diagnostics()
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise InstallError(
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
            InstallError: it timed out or exited with another code than ``expect``.
        """
        try:
            rc = await asyncio.wait_for(self._reap(), timeout)
        except TimeoutError:
            await self.kill()
            raise InstallError(
                f"{self.name} still running after {timeout:.0f} s\n" + self.diagnostics()
            ) from None
        if expect is not None and rc != expect:
            raise InstallError(f"{self.name} exited {rc}, expected {expect}\n" + self.diagnostics())
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
