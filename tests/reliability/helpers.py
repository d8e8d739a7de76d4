"""Shared pieces of the reliability tests: a broker behind a ChaosProxy, a delivery ledger,
resource counts and polling helpers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiorocket import ConcurrentContext, PushConsumer, ReceivedMessage
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.testing import ChaosProxy


@contextlib.asynccontextmanager
async def broker_behind_proxy(
    tmp_path: Path, config: BrokerConfig | None = None
) -> AsyncIterator[tuple[EmbeddedBroker, ChaosProxy]]:
    """An embedded broker whose routes advertise a ChaosProxy in front of it: clients given
    ``broker.address`` send everything (name server and broker requests) through the proxy."""
    base = config if config is not None else BrokerConfig()
    async with ChaosProxy() as proxy:
        cfg = replace(base, advertised_port=proxy.port)
        async with EmbeddedBroker(data_dir=tmp_path / "broker", config=cfg) as broker:
            proxy.upstream = broker.listen_address
            assert broker.address == proxy.address
            yield broker, proxy


def open_fds() -> int:
    """File descriptors open in this process."""
    return len(os.listdir("/proc/self/fd"))


def task_count() -> int:
    """Tasks alive on the running loop."""
    return len(asyncio.all_tasks())


@dataclass
class Ledger:
    """Acknowledged sends and deliveries, by message body (unique per message)."""

    acked: set[bytes] = field(default_factory=set)
    delivered: Counter[bytes] = field(default_factory=Counter)
    #: monotonic time of each first delivery
    first_seen: dict[bytes, float] = field(default_factory=dict)
    corrupt: list[bytes] = field(default_factory=list)

    def record(self, msgs: list[ReceivedMessage]) -> None:
        now = time.monotonic()
        for m in msgs:
            body = m.body
            if not check_body(body):
                self.corrupt.append(body)
            self.delivered[body] += 1
            self.first_seen.setdefault(body, now)

    @property
    def lost(self) -> set[bytes]:
        return self.acked - set(self.delivered)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.delivered.values() if n > 1)


def make_body(i: int, size: int = 128) -> bytes:
    """A body naming message ``i``, padded to ``size`` bytes, ending in a checksum of the
    rest: a partial or garbled body fails :func:`check_body`."""
    head = b"msg-%08d:" % i
    pad = bytes((i + k) % 251 for k in range(max(0, size - len(head) - 8)))
    payload = head + pad
    return payload + b"%08x" % (sum(payload) & 0xFFFFFFFF)


def check_body(body: bytes) -> bool:
    """Whether ``body`` is one :func:`make_body` made, intact."""
    if len(body) < 9:
        return False
    payload, tail = body[:-8], body[-8:]
    return tail == b"%08x" % (sum(payload) & 0xFFFFFFFF)


def first_consumer(namesrv: str, group: str, **settings: Any) -> PushConsumer:
    """A push consumer of ``group`` that starts a new group at the first stored message."""
    return PushConsumer(group=group, namesrv=namesrv, consume_from="first", **settings)


def recording_consumer(
    namesrv: str, group: str, topic: str, ledger: Ledger, **settings: Any
) -> PushConsumer:
    """A push consumer of ``topic`` that records every delivery in ``ledger``."""
    consumer = first_consumer(namesrv, group, **settings)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        ledger.record(msgs)

    return consumer
