"""Fixtures of the Apache RocketMQ interop tests: a Java cluster per module, compiled programs.

The install is the one ``ROCKETMQ_HOME`` names (``install.py``). Without it every module here
is collected as one skipped item, so a run prints one skip line per module and imports none of
them; with ``ROCKETMQ_HOME`` set but unusable, collection stops the run with one message.

A module picks its cluster with module-level constants: ``JAVA_BROKERS`` (broker names, default
one broker), ``JAVA_BROKER_CONF`` (``k=v`` settings added to :data:`DEFAULT_BROKER_CONF`),
``JAVA_BROKER_FILES`` (files for each broker's ``conf/``, e.g. ``plain_acl.yml``) and
``JAVA_BROKER_PROPERTIES`` (JVM system properties of each broker); ``JAVA_PROXY = True`` starts
a 5.x proxy in cluster mode in front of them (a 4.x install skips such a module's tests), with
``JAVA_PROXY_CONF`` added to its ``rmq-proxy.json``. Tests of one module share
the cluster, so each uses its own topics and groups (``unique_name``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import (
    NO_INSTALL,
    Install,
    InstallError,
    compile_java,
    install,
    require_install,
)
from tests.spark._support import spark  # noqa: F401  (the fixture of the Spark source test)

#: Every delay level at 1 s, so retries (level 3 + reconsume times) come back quickly; the
#: Java broker's default starts at "1s 5s 10s" and a first retry would wait 10 s.
FAST_DELAY_LEVELS = " ".join(["1s"] * 18)

#: settings every test cluster's brokers get (a module's ``JAVA_BROKER_CONF`` adds to them):
#: fast delay levels, and sends may wait 1 s in the broker's send queue before it answers
#: SYSTEM_BUSY ("[TIMEOUT_CLEAN_QUEUE]broker busy"; 200 ms by default): on two cores shared by
#: brokers, Spark and the suite, a queue can stall longer than a producer's three attempts
DEFAULT_BROKER_CONF = {"messageDelayLevel": FAST_DELAY_LEVELS, "waitTimeMillsInSendQueue": "1000"}

_HERE = Path(__file__).parent


class _NoInstall(pytest.Item):
    """The one item of a module that cannot run here; marked skip."""

    def runtest(self) -> None:
        raise AssertionError("marked skip: never runs")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, self.name


class _SkippedModule(pytest.Module):
    """A test module collected as a single skipped item, without importing it."""

    def collect(self) -> list[pytest.Item]:
        item = _NoInstall.from_parent(self, name="interop")
        item.add_marker(pytest.mark.skip(reason=NO_INSTALL))
        return [item]


class _UnusableModule(pytest.Module):
    """A test module of a run that :func:`pytest_collection_modifyitems` stops."""

    def collect(self) -> list[pytest.Item]:
        return []


#: why ``ROCKETMQ_HOME`` cannot be used, once a module found out
_unusable: list[str] = []


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    if not module_path.name.startswith("test_"):
        return None
    try:
        found = install()
    except InstallError as exc:
        # pytest.exit inside a collector would be reported as a collection error with a
        # traceback; the run is stopped after collection, with the message alone
        _unusable[:] = [str(exc)]
        return _UnusableModule.from_parent(parent, path=module_path)
    if found is None:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if _unusable:
        pytest.exit(f"interop: {_unusable[0]}", returncode=pytest.ExitCode.USAGE_ERROR)
    # every test here needs the install: mark them so `-m "not interop"` leaves them out
    for item in items:
        if Path(str(item.fspath)).is_relative_to(_HERE):
            item.add_marker(pytest.mark.interop)


@pytest.fixture(scope="session")
def rocketmq() -> Install:
    """The Apache RocketMQ install under test."""
    return require_install()


@pytest.fixture(scope="session")
def java_classes(rocketmq: Install, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test programs (``java/*.java``), compiled against the install."""
    return compile_java(tmp_path_factory.mktemp("java-classes"))


@pytest.fixture(scope="module")
def java_cluster(
    rocketmq: Install, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    """A Java name server and broker(s) shared by the tests of one module."""
    module = request.module
    if getattr(module, "JAVA_PROXY", False) and not rocketmq.v5:
        pytest.skip(f"the proxy is RocketMQ 5.x; this install is {rocketmq.version}")
    conf = {**DEFAULT_BROKER_CONF, **getattr(module, "JAVA_BROKER_CONF", {})}
    cluster = JavaCluster(
        tmp_path_factory.mktemp("java-cluster"),
        brokers=getattr(module, "JAVA_BROKERS", ("broker-a",)),
        broker_conf=conf,
        files=getattr(module, "JAVA_BROKER_FILES", None),
        system_properties=getattr(module, "JAVA_BROKER_PROPERTIES", None),
        install=rocketmq,
        proxy=getattr(module, "JAVA_PROXY", False),
        proxy_conf=getattr(module, "JAVA_PROXY_CONF", None),
    )
    with cluster:
        yield cluster
