"""A Spark standalone cluster on loopback for the tests: one master and N workers started
from the installed pyspark's ``spark-class``, each in a process group of its own, so that
stopping one by its PID also stops the executors and Python workers it started."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests._harness.wait import wait_for_blocking

__all__ = ["Cluster", "executor_pids", "group_alive", "standalone_cluster", "two_workers"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _proc_stats() -> Iterator[tuple[int, list[str]]]:
    """Each process's PID and the fields of its ``/proc/PID/stat`` after the command (state,
    parent PID, process group...); processes gone meanwhile are left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command may hold spaces and parentheses: the fields follow the last ")"
        yield int(entry.name), stat[stat.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    return [p for p, fields in _proc_stats() if int(fields[1]) == pid]


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def group_alive(pgid: int) -> list[int]:
    """The live processes (not zombies) of process group ``pgid``."""
    return [p for p, fields in _proc_stats() if int(fields[2]) == pgid and fields[0] != "Z"]


def executor_pids(worker_pid: int) -> list[int]:
    """The executor JVMs a worker started (``CoarseGrainedExecutorBackend`` children)."""
    return [p for p in _children(worker_pid) if "CoarseGrainedExecutorBackend" in _cmdline(p)]


@dataclass
class Cluster:
    """A running standalone cluster."""

    url: str
    master: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pgids(self) -> list[int]:
        """The process groups of the master and the workers (each leads its own)."""
        return [self.master.pid, *(w.pid for w in self.workers)]


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(_spark_class()), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: executors and workers follow it
        )


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int = 2, cores: int = 1) -> Iterator[Cluster]:
    """A master and ``workers`` workers (``cores`` each, 1 GiB) on 127.0.0.1; all stopped,
    executors included, when the block ends."""
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_HOST": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_DAEMON_MEMORY": "256m",
    }
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(_free_port()),
        ],
        work / "master.log",
        env,
    )
    cluster = Cluster(url, master)
    try:
        wait_for_blocking(
            lambda: _listening(port) or master.poll() is not None,
            timeout=60,
            what="the Spark master",
        )
        if master.poll() is not None:
            raise RuntimeError((work / "master.log").read_text()[-2000:])
        for i in range(workers):
            wdir = work / f"worker-{i}"
            wdir.mkdir()
            cluster.workers.append(
                _start(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        str(cores),
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(_free_port()),
                        "--work-dir",
                        str(wdir),
                    ],
                    work / f"worker-{i}.log",
                    env,
                )
            )
        wait_for_blocking(
            lambda: all(
                "Successfully registered with master" in (work / f"worker-{i}.log").read_text()
                for i in range(workers)
            ),
            timeout=60,
            what="the workers to register",
        )
        yield cluster
    finally:
        for w in cluster.workers:
            _stop(w)
        _stop(master)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def two_workers(work: Path) -> Iterator[Cluster]:
    """A master and two one-core workers (skipped without Spark) for drivers that run in
    processes of their own; afterwards nothing of it is left (checked by process group)."""
    from tests.spark._support import spark_missing

    reason = spark_missing()
    if reason is not None:
        pytest.skip(reason)
    work.mkdir(parents=True, exist_ok=True)
    with standalone_cluster(work, workers=2, cores=1) as c:
        yield c
    for pgid in c.pgids:
        assert group_alive(pgid) == [], f"processes of group {pgid} still run"


def cluster_spark_session(master: str, app_name: str, pythonpath: str) -> Any:
    """A SparkSession on the standalone cluster at ``master``: loopback only, two one-core
    executors of 512 MB running this Python with ``pythonpath``, tasks retried up to 8 times
    (an executor is killed on purpose)."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.executor.memory", "512m")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", pythonpath)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "8")
        .getOrCreate()
    )
