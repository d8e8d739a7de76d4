"""Shared pieces of the reliability tests: a broker behind a ChaosProxy, a delivery ledger,
resource counts and polling helpers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiorocket import ConcurrentContext, PushConsumer, ReceivedMessage
from aiorocket.embedded import BrokerConfig, EmbeddedBroker, parse_delay_levels
from aiorocket.testing import ChaosProxy

#: every delay level at 100 ms: retried messages come back at once
FAST_DELAYS = parse_delay_levels(" ".join(["100ms"] * 18))


@contextlib.asynccontextmanager
async def broker_behind_proxy(
    tmp_path: Path, config: BrokerConfig | None = None
) -> AsyncIterator[tuple[EmbeddedBroker, ChaosProxy]]:
    """An embedded broker whose routes advertise a ChaosProxy in front of it: clients given
    ``broker.address`` send everything (name server and broker requests) through the proxy."""
    base = config if config is not None else BrokerConfig(default_queues=8)
    async with ChaosProxy() as proxy:
        cfg = replace(base, advertised_port=proxy.port)
        async with EmbeddedBroker(data_dir=tmp_path / "broker", config=cfg) as broker:
            proxy.upstream = broker.listen_address
            assert broker.address == proxy.address
            yield broker, proxy


async def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``cond`` every 10 ms; returns the seconds it took.

    Raises:
        AssertionError: not true within ``timeout``.
    """
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


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


def recording_consumer(
    namesrv: str, group: str, topic: str, ledger: Ledger, **settings: Any
) -> PushConsumer:
    """A push consumer of ``topic`` that records every delivery in ``ledger``."""
    consumer = PushConsumer(group=group, namesrv=namesrv, consume_from="first", **settings)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        ledger.record(msgs)

    return consumer
