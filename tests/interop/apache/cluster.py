"""Apache RocketMQ servers of an install as test peers: a name server, brokers (single, master
and slave, DLedger groups) and, for 5.x, a proxy in cluster mode, on free loopback ports.

Servers listen on loopback where the version lets them choose (5.x's ``bindAddress``); a 4.9.x
server and the 5.x proxy have no such setting and listen on every interface, so their ports are
only ever used through 127.0.0.1. A broker is ready when the name server routes to it (its
cluster info lists the broker's address as master), not when it logs "boot success": a 5.x
broker restarted under the same name can be missing from the name server for seconds after that
line. Every process runs in its own process group and is stopped by PID: SIGTERM with a bounded
wait, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiorocket._protocol.bodies import ClusterInfo, TopicRouteData
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import decode_frame, encode_command
from tests.interop.apache.install import (
    BROKER_MAIN,
    ENV,
    NAMESRV_MAIN,
    PROXY_MAIN,
    SERVER_HEAP,
    Install,
    InstallError,
    home_options,
    require_install,
    run_admin,
    tail_of,
    write_home,
)

__all__ = [
    "BOOT_TIMEOUT",
    "STOP_GRACE",
    "BrokerNode",
    "JavaCluster",
    "JavaProcess",
    "cluster_info",
    "dledger_group",
    "free_port",
    "master_slave",
    "request",
]

#: seconds a name server or broker may take to be routed to (3-6 s on an idle 2-core machine;
#: much more while the rest of the suite keeps both cores busy)
BOOT_TIMEOUT = 90.0

#: seconds a graceful stop may take before SIGKILL (a 5.x broker takes 11-19 s to shut down)
STOP_GRACE = 30.0


def _ports_free(ports: Sequence[int]) -> bool:
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


def _below_ephemeral() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(span: Sequence[int] = (0,)) -> int:
    """A port ``p`` such that ``p + d`` is free for every ``d`` in ``span``.

    A Java broker listens on its port, port - 2 (the VIP channel) and port + 1 (HA), so a
    broker asks for ``span=(-2, -1, 0, 1)``. Ports come from below the kernel's ephemeral
    range: any process's outgoing connection takes a port from that range, and a server
    binds its port seconds after it was chosen (a proxy's gRPC port there was once in use by then).
    """
    rng = random.Random()
    top = max(_below_ephemeral(), 12000) - 2
    for _ in range(500):
        base = rng.randrange(10002, top)
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
        text = tail_of(self.log, lines)
        logs = self.log.parent / self.name / "logs" / f"{self.name}.log"
        if logs.is_file():
            text += f"\n--- {logs.name} ---\n" + tail_of(logs, lines)
        return text


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
        proxy: also start a 5.x proxy in cluster mode in front of the brokers
            (:attr:`proxy`: its remoting address, which clients use as their name server;
            :attr:`proxy_grpc`: its gRPC address).
        proxy_conf: settings added to the proxy's ``rmq-proxy.json``.
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
        proxy: bool = False,
        proxy_conf: Mapping[str, object] | None = None,
    ) -> None:
        self.install = install or require_install()
        if proxy and not self.install.v5:
            raise InstallError(f"the proxy is RocketMQ 5.x; this install is {self.install.version}")
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
        self.with_proxy = proxy
        self.proxy_conf = dict(proxy_conf or {})
        self.proxy_port = free_port() if proxy else 0
        self.proxy_grpc_port = free_port() if proxy else 0
        self.processes: dict[str, JavaProcess] = {}
        self._env = {**os.environ, "TMPDIR": str(root)}

    def _env_for(self, home: Path) -> dict[str, str]:
        return {**self._env, ENV: str(home)}

    def _namesrv_process(self) -> JavaProcess:
        home = self.root / "namesrv"
        logback = write_home(home, "namesrv")
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
            PROXY_MAIN,
            "-c",
            str(conf),
            jvm_options=[*home_options(home, logback), *self.jvm_options],
            heap=SERVER_HEAP,
        )
        return JavaProcess("namesrv", argv, self.root / "namesrv.out", self._env_for(home))

    def _allocate_port(self, name: str) -> int:
        port = self.broker_ports.get(name)
        if port is None:
            taken = {p + d for p in self.broker_ports.values() for d in (-2, -1, 0, 1)}
            taken |= set(self.dledger_ports.values())
            taken |= {self.namesrv_port, self.proxy_port, self.proxy_grpc_port}
            port = free_port((-2, -1, 0, 1))
            while {port + d for d in (-2, -1, 0, 1)} & taken:
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
        logback = write_home(home, "broker", self.files)
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
        options = [*home_options(home, logback)]
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

    @property
    def proxy(self) -> str:
        """The proxy's remoting address (a remoting client's name server)."""
        if not self.with_proxy:
            raise InstallError("this cluster was started without a proxy")
        return f"127.0.0.1:{self.proxy_port}"

    @property
    def proxy_grpc(self) -> str:
        """The proxy's gRPC address (the 5.x SDKs' endpoint)."""
        if not self.with_proxy:
            raise InstallError("this cluster was started without a proxy")
        return f"127.0.0.1:{self.proxy_grpc_port}"

    def _proxy_process(self) -> JavaProcess:
        home = self.root / "proxy"
        logback = write_home(home, "proxy")
        conf = home / "conf" / "rmq-proxy.json"
        values: dict[str, object] = {
            "proxyMode": "cluster",
            "proxyName": "proxy-a",
            "rocketMQClusterName": "DefaultCluster",
            "namesrvAddr": self.namesrv,
            "remotingListenPort": self.proxy_port,
            "grpcServerPort": self.proxy_grpc_port,
            # the address the proxy gives clients for every broker of a route
            "localServeAddr": "127.0.0.1",
            "enablePrintJstack": False,
            **self.proxy_conf,
        }
        conf.write_text(json.dumps(values, indent=2))
        argv = self.install.java_argv(
            PROXY_MAIN,
            "-pc",
            str(conf),
            jvm_options=[*home_options(home, logback), *self.jvm_options],
            heap=SERVER_HEAP,
        )
        env = {**self._env_for(home), "RMQ_PROXY_HOME": str(home)}
        return JavaProcess("proxy", argv, self.root / "proxy.out", env)

    def proxy_routes(self, topic: str) -> TopicRouteData:
        """The proxy's answer to a route request for ``topic`` (what a client sees).

        Raises:
            OSError: the proxy did not answer.
            InstallError: it answered with an error.
        """
        header = {"topic": topic}
        cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header)
        resp = request(self.proxy, cmd)
        if resp.code != 0:
            raise InstallError(f"proxy {self.proxy}: route of {topic} refused: {resp.remark}")
        return TopicRouteData.from_json(resp.body)

    def _wait_proxy(self) -> None:
        # ready when it routes the broker-created TBW102 to itself: it has reached the name
        # server and rewrites every broker address to its own
        def routes_to_itself() -> bool:
            route = self.proxy_routes("TBW102")
            addrs = {a for b in route.broker_datas for a in b.broker_addrs.values()}
            return addrs == {self.proxy}

        self.processes["proxy"].wait_until(routes_to_itself, "routing", BOOT_TIMEOUT)

    def start_proxy(self) -> None:
        """Start the proxy (again, after :meth:`stop_proxy`); wait until it routes."""
        if "proxy" in self.processes and self.processes["proxy"].alive():
            raise InstallError("the proxy is still running")
        self.processes["proxy"] = self._proxy_process()
        self.processes["proxy"].start()
        self._wait_proxy()

    def stop_proxy(self) -> None:
        """SIGKILL the proxy."""
        self.processes["proxy"].kill()

    def start(self) -> JavaCluster:
        """Start the name server, then every broker (in parallel), then the proxy if asked;
        wait until the name server routes to all of them (and the proxy to itself)."""
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
        if self.with_proxy:
            self.start_proxy()
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
