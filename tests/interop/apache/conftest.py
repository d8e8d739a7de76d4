"""Fixtures of the Apache RocketMQ interop tests: a Java cluster per module, compiled programs.

A module picks its cluster with module-level constants: ``JAVA_BROKERS`` (broker names, default
one broker), ``JAVA_BROKER_CONF`` (``k=v`` settings added to :data:`DEFAULT_BROKER_CONF`),
``JAVA_BROKER_FILES`` (files for each broker's ``conf/``, e.g. ``plain_acl.yml``) and
``JAVA_BROKER_PROPERTIES`` (JVM system properties of each broker). Tests of one module share
the cluster, so each uses its own topics and groups (``unique_name``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.apache.kit import JavaCluster, compile_java, kit_problem, require_kit

#: Every delay level at 1 s, so retries (level 3 + reconsume times) come back quickly; the
#: Java broker's default starts at "1s 5s 10s" and a first retry would wait 10 s.
FAST_DELAY_LEVELS = " ".join(["1s"] * 18)

#: settings every test cluster's brokers get (a module's ``JAVA_BROKER_CONF`` adds to them)
DEFAULT_BROKER_CONF = {"messageDelayLevel": FAST_DELAY_LEVELS}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # every test here needs the kit: mark them so `-m "not interop"` leaves them out
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.interop)


@pytest.fixture(autouse=True)
def _kit() -> None:
    require_kit()


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test programs (``java/*.java``) and the kit's own (``Peer``, ``Drain``), compiled."""
    if kit_problem() is not None:
        pytest.skip(kit_problem() or "")
    return compile_java(tmp_path_factory.mktemp("java-classes"))


@pytest.fixture(scope="module")
def java_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    """A Java name server and broker(s) shared by the tests of one module."""
    if kit_problem() is not None:
        require_kit()
    module = request.module
    conf = {**DEFAULT_BROKER_CONF, **getattr(module, "JAVA_BROKER_CONF", {})}
    cluster = JavaCluster(
        tmp_path_factory.mktemp("java-cluster"),
        brokers=getattr(module, "JAVA_BROKERS", ("broker-a",)),
        broker_conf=conf,
        files=getattr(module, "JAVA_BROKER_FILES", None),
        system_properties=getattr(module, "JAVA_BROKER_PROPERTIES", None),
    )
    with cluster:
        yield cluster
