"""Operability of a running App: lag in the consumer statistics, Prometheus metrics (the
worker's server, the FastAPI route, a real ``aiorocket run --metrics-port``), OpenTelemetry
instruments, and ``/readyz`` naming the queue a blocked handler holds."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from aiorocket import Admin, App, Message, Producer, ReceivedMessage
from aiorocket.embedded import EmbeddedBroker
from aiorocket.integrations.fastapi import health_router, metrics_router
from aiorocket.integrations.opentelemetry import instrument
from aiorocket.integrations.prometheus import serve
from tests._harness.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
CONSUMER: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "pull_suspend_timeout": 0.5,
    "offset_persist_interval": 0.2,
    "consume_from": "first",
    "shutdown_grace": 1.0,
}
TOPIC, GROUP = "opsT", "opsG"
QUEUES = 2


@pytest.fixture
async def broker(broker: EmbeddedBroker) -> EmbeddedBroker:
    """The suite's broker, with ``TOPIC`` created."""
    async with Admin(namesrv=broker.address) as admin:
        await admin.create_topic(TOPIC, queues=QUEUES)
    return broker


async def produce(addr: str, bodies: list[str]) -> None:
    async with Producer(namesrv=addr, group="opsP") as p:
        for b in bodies:
            await p.send(Message(TOPIC, b))


async def scrape(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def value(text: str, name: str, **labels: str) -> float:
    """The sample of ``name`` whose labels include ``labels`` (summed over the rest)."""
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(r"(\w+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    assert found, f"no {name} {labels} in:\n{text}"
    return total


def blocking_app(addr: str, *, block_on: str, release: asyncio.Event, seen: list[str]) -> App:
    app = App(namesrv=addr, consumer=CONSUMER, stuck_after=0.5)

    @app.subscriber(TOPIC, group=GROUP)
    async def handle(body: str, msg: ReceivedMessage) -> None:
        if body == "fail":
            raise RuntimeError("transient")
        if body == block_on:
            await release.wait()
        seen.append(body)

    return app


async def test_lag_metrics_and_readiness_under_a_blocked_handler(broker: EmbeddedBroker) -> None:
    release = asyncio.Event()
    seen: list[str] = []
    app = blocking_app(broker.address, block_on="block", release=release, seen=seen)
    await produce(broker.address, [f"m{i}" for i in range(10)])
    async with app:
        server = await serve(app, host="127.0.0.1", port=0)
        port = server.sockets[0].getsockname()[1]
        try:
            await wait_for(lambda: len(seen) == 10, timeout=20.0, what="the first 10 messages")
            status, _ = await scrape(port, "/readyz")
            assert status == 200
            # a handler blocks one queue; 6 more messages go to the same... any queues
            await produce(broker.address, ["block", *[f"n{i}" for i in range(6)]])
            consumer = app.consumers()[GROUP]

            def lag_seen() -> bool:
                return consumer.statistics().topics.get(TOPIC) is not None and bool(
                    app.stuck_queues()
                )

            await wait_for(lag_seen, timeout=20.0, what="the blocked queue to count as stuck")
            stats = consumer.statistics()
            blocked = [q for q in stats.queues.values() if q.in_flight]
            assert len(blocked) == 1
            (bq,) = blocked
            store = broker.store
            # lag = broker max offset - committed, per queue, equal to what the store says
            for mq, q in stats.queues.items():
                if mq.topic != TOPIC:
                    continue
                assert q.broker_offset == store.max_offset(TOPIC, mq.queue_id)
                assert q.lag == q.broker_offset - q.committed_offset
            assert bq.lag >= 1  # the blocked message itself is not committed
            assert stats.topics[TOPIC].lag == sum(
                q.lag for mq, q in stats.queues.items() if mq.topic == TOPIC
            )
            status, body = await scrape(port, "/readyz")
            assert status == 503
            assert str(bq.queue) in body
            assert "handler call has run" in body
            # the Prometheus view of the same state
            status, text = await scrape(port, "/metrics")
            assert status == 200
            q_labels = {"group": GROUP, "topic": TOPIC, "queue": str(bq.queue.queue_id)}
            assert value(text, "aiorocket_consumer_in_flight_handlers", **q_labels) == 1
            assert value(text, "aiorocket_consumer_queue_stuck", **q_labels) == 1
            assert value(text, "aiorocket_consumer_oldest_in_flight_seconds", **q_labels) > 0.5
            assert value(text, "aiorocket_consumer_lag_messages", **q_labels) == bq.lag
            assert value(text, "aiorocket_consumer_lag_messages", group=GROUP, topic=TOPIC) == (
                stats.topics[TOPIC].lag
            )
            assert value(
                text, "aiorocket_app_messages_total", group=GROUP, result="handled"
            ) == len(seen)
            assert value(text, "aiorocket_consumer_pulled_messages_total", topic=TOPIC) >= 16
            assert value(text, "aiorocket_consumer_rebalances_total", group=GROUP) >= 1
            release.set()
            await wait_for(lambda: len(seen) == 17, timeout=20.0, what="all 17 messages")
            await wait_for(
                lambda: not app.stuck_queues(), timeout=20.0, what="the queue to recover"
            )
            await wait_for(
                lambda: consumer.statistics().topics[TOPIC].lag == 0,
                timeout=20.0,
                what="the lag to reach 0",
            )
            status, text = await scrape(port, "/metrics")
            assert value(text, "aiorocket_consumer_lag_messages", topic=TOPIC) == 0
            assert value(text, "aiorocket_app_messages_total", result="handled") == 17
            assert (await scrape(port, "/readyz"))[0] == 200
            assert (await scrape(port, "/nope"))[0] == 404
        finally:
            release.set()
            server.close()


async def test_failed_and_ok_counts_and_opentelemetry(broker: EmbeddedBroker) -> None:
    release = asyncio.Event()
    release.set()
    seen: list[str] = []
    app = blocking_app(broker.address, block_on="-", release=release, seen=seen)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    await produce(broker.address, ["a", "fail", "b", "c"])
    async with app:
        inst = instrument(app, meter_provider=provider, interval=0.2)
        try:
            await wait_for(lambda: len(seen) == 3, timeout=20.0, what="three good messages")
            stats = app.statistics()
            await wait_for(
                lambda: next(iter(app.statistics().values())).failed >= 1,
                timeout=20.0,
                what="the failure",
            )
            data = reader.get_metrics_data()  # collected on the loop: live values
            points: dict[str, list[Any]] = {}
            assert data is not None
            for rm in data.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        points[metric.name] = list(metric.data.data_points)
            handled = [
                p.value
                for p in points["aiorocket_app_messages"]
                if p.attributes["result"] == "handled"
            ]
            failed = [
                p.value
                for p in points["aiorocket_app_messages"]
                if p.attributes["result"] == "failed"
            ]
            assert handled == [3]
            assert failed[0] >= 1
            ok = sum(
                p.value
                for p in points["aiorocket_consumer_consumed_messages"]
                if p.attributes["result"] == "ok"
            )
            assert ok >= 3
            assert {p.attributes["queue"] for p in points["aiorocket_consumer_lag_messages"]} >= {
                "0",
                "1",
            }
            del stats
        finally:
            await inst.stop()


async def test_fastapi_metrics_and_readiness_routes(broker: EmbeddedBroker) -> None:
    release = asyncio.Event()
    seen: list[str] = []
    app = blocking_app(broker.address, block_on="block", release=release, seen=seen)
    api = FastAPI(lifespan=app.lifespan)
    api.include_router(health_router(app))
    api.include_router(metrics_router(app))
    transport = httpx.ASGITransport(app=api)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        api.router.lifespan_context(api),
    ):
        await produce(broker.address, ["x", "block"])
        await wait_for(lambda: bool(app.stuck_queues()), timeout=20.0, what="a stuck queue")
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        body = ready.json()
        (stuck,) = body["stuck_queues"]
        assert stuck.startswith(f"{TOPIC}@broker-a:")
        assert any(q["queue"] == stuck and q["in_flight"] == 1 for q in body["queues"])
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].startswith("text/plain")
        assert value(metrics.text, "aiorocket_consumer_queue_stuck", topic=TOPIC) == 1
        release.set()
        await wait_for(lambda: not app.stuck_queues(), timeout=20.0, what="recovery")
        assert (await client.get("/readyz")).status_code == 200


@pytest.mark.slow
async def test_worker_cli_serves_metrics(broker: EmbeddedBroker, tmp_path: Path) -> None:
    log = tmp_path / "handled.txt"
    env = {
        **os.environ,
        "AIOROCKET_NAMESRV": broker.address,
        "AIOROCKET_CONSUMER": '{"rebalance_interval": 0.5, "pull_suspend_timeout": 1, '
        '"offset_persist_interval": 0.2, "consume_from": "first"}',
        "WORKER_LOG": str(log),
        "WORKER_TOPIC": TOPIC,
        "WORKER_GROUP": GROUP,
        "PYTHONPATH": str(ROOT),
    }
    await produce(broker.address, [f"w{i}" for i in range(25)])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorocket",
        "run",
        "examples.worker:app",
        "--metrics-port",
        "0",
        "--metrics-host",
        "127.0.0.1",
        "--status-interval",
        "0.3",
        cwd=ROOT,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        port = 0
        while not port:
            line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
            assert line, "the worker exited"
            m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
            if m:
                port = int(m.group(1))

        def handled() -> int:
            return len(log.read_text().splitlines()) if log.exists() else 0

        await wait_for(
            lambda: handled() == 25, timeout=20.0, what="25 messages handled by the worker"
        )
        text = ""
        for _ in range(100):
            _status, text = await scrape(port, "/metrics")
            if value(text, "aiorocket_consumer_lag_messages", topic=TOPIC) == 0:
                break
            await asyncio.sleep(0.1)
        assert value(text, "aiorocket_app_messages_total", group=GROUP, result="handled") == 25
        assert value(text, "aiorocket_consumer_consumed_messages_total", result="ok") == 25
        assert value(text, "aiorocket_consumer_lag_messages", topic=TOPIC) == 0
        assert (await scrape(port, "/readyz"))[0] == 200
        status_line = ""
        while "lag" not in status_line:
            status_line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert f"lag {TOPIC}=0" in status_line
    finally:
        proc.send_signal(2)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0


def test_metrics_port_without_prometheus_says_which_extra(tmp_path: Path) -> None:
    # prometheus_client hidden: the worker refuses --metrics-port with the extra's name
    shim = tmp_path / "prometheus_client"
    shim.mkdir()
    (shim / "__init__.py").write_text("raise ImportError('hidden for the test')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "aiorocket", "run", "examples.worker:app", "--metrics-port", "0"],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
            "AIOROCKET_NAMESRV": "127.0.0.1:1",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert 'pip install "aiorocketmq[prometheus]"' in proc.stderr
