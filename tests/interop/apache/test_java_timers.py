"""aiorocket's timer messages against an Apache broker (docs/protocol.md §12.4).

On 5.x the Java broker parks a ``deliver_after`` message in its timer wheel and delivers it at
its ``timerPrecisionMs`` (1 s), never early; the delivered copy's properties are the ones the
embedded broker gives it; a time beyond ``timerMaxDelaySec`` is refused with the same remark.
On 4.9.x the producer refuses to send a timer message at all (the broker answers 407-409).
"""

from __future__ import annotations

import asyncio

import pytest

from aiorocket import Producer
from aiorocket._names import now_ms
from aiorocket._protocol import properties as mp
from aiorocket.errors import MessageIllegalError, UnsupportedFeatureError
from aiorocket.models import Message
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import Install
from tests.interop.harness import unique_name
from tests.producer.test_producer import pull_all


async def test_timer_message_on_the_java_broker(
    rocketmq: Install, java_cluster: JavaCluster
) -> None:
    topic = unique_name("jtimer")
    address = java_cluster.broker_addr("broker-a")
    async with Producer(namesrv=java_cluster.namesrv, group=unique_name("jtimer_pg")) as p:
        if not rocketmq.v5:
            with pytest.raises(UnsupportedFeatureError) as info:
                await p.send(Message(topic, b"x"), deliver_after=2.0)
            assert info.value.version == rocketmq.ordinal
            await p.send(Message(topic, b"plain"))
            assert [m.body for m in await pull_all(java_cluster.namesrv, topic)] == [b"plain"]
            return
        await p.send(Message(topic, b"warm-up"))  # the topic's route, on the Java side
        result = await p.send(Message(topic, b"timed", tags="T"), deliver_after=2.0)
        assert (p._client.server_version(address) or 0) >= 412
        with pytest.raises(MessageIllegalError) as refused:
            await p.send(Message(topic, b"x"), deliver_after=3 * 86400 + 60)
        assert refused.value.remark == (
            "timer message illegal, the delay time should not be bigger than the max delay "
            "259200000ms; or if set del msg, the delay time should be bigger than the current "
            "time"
        )
    timed = []
    for _ in range(100):
        timed = [m for m in await pull_all(java_cluster.namesrv, topic) if m.body == b"timed"]
        if timed:
            break
        await asyncio.sleep(0.1)
    [m] = timed
    props = m.properties
    due = int(props[mp.TIMER_DELIVER_MS])
    late = m.store_timestamp - due
    print(f"5.3.3: delivered {late} ms after its time; properties {sorted(props)}")
    assert 0 <= late <= 1500  # the wheel's 1 s slots, and a busy machine
    assert m.queue_id == result.queue.queue_id
    # what the embedded broker reproduces (timers.py): the parked properties stay, plus these
    assert (props[mp.REAL_TOPIC], props[mp.REAL_QID]) == (topic, str(m.queue_id))
    assert int(props[mp.TIMER_OUT_MS]) < due
    assert mp.TIMER_ENQUEUE_MS in props
    assert int(props[mp.TIMER_DEQUEUE_MS]) >= due - 1000
    assert props[mp.UNIQ_KEY] == result.msg_id
    assert now_ms() >= due
