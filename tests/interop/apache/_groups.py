"""Helpers of the tests against Java brokers: topics, routes, readable offsets, member
processes of consumer groups.

Topics are created with UPDATE_AND_CREATE_TOPIC (17) sent straight to each broker, as
``mqadmin updateTopic`` does, without the 5-10 s a JVM of ``mqadmin`` needs to start; the Java
broker registers the new topic with the name server at once
(``AdminBrokerProcessor.updateAndCreateTopic`` -> ``registerIncrementBrokerData``).

Group members run ``tests/consumer/consumer_proc.py`` (concurrent) or ``orderly_proc.py``
(orderly) in their own processes; each writes its deliveries and held queues as JSON lines,
which :class:`tests._harness.orderly.Records` reads incrementally.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from aiorocket import MessageQueue, QueueReader
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting.pool import ConnectionPool
from aiorocket.errors import ServiceNotAvailableError, TopicNotExistError
from tests._harness.child import Child, member_options, start_script, stop_member, stop_members
from tests._harness.protocol import create_topic_fields
from tests._harness.wait import wait_for

ROOT = Path(__file__).resolve().parents[3]
CONSUMER_PROC = ROOT / "tests" / "consumer" / "consumer_proc.py"
ORDERLY_PROC = ROOT / "tests" / "consumer" / "orderly_proc.py"

#: seconds a member process may take to print READY (importing aiorocket and joining the
#: group; much more than the ~1 s it takes when both cores are busy with Java brokers)
SPAWN_TIMEOUT = 60.0


async def create_topic(brokers: Iterable[str], topic: str, queues: int) -> None:
    """Create ``topic`` with ``queues`` read and write queues on every broker address.

    Raises:
        AssertionError: a broker refused.
    """
    pool = ConnectionPool()
    try:
        for addr in brokers:
            conn = await pool.get(addr)
            resp = await conn.request(
                RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    create_topic_fields(topic, queues),
                ),
                timeout=30.0,
            )
            assert resp.code == 0, (addr, resp.code, resp.remark)
    finally:
        await pool.close()


async def wait_route(
    namesrv: str, topic: str, queues: int, timeout: float = 30.0
) -> list[MessageQueue]:
    """Wait until the name server's route of ``topic`` lists ``queues`` readable queues."""
    async with QueueReader(namesrv=namesrv) as reader:
        found: list[MessageQueue] = []

        async def complete() -> bool:
            nonlocal found
            try:
                found = await reader.queues(topic)
            except Exception:  # not registered yet: ask again
                return False
            return len(found) == queues

        await wait_for(
            complete, timeout=timeout, what=f"a route of {topic} with {queues} queues", interval=0.1
        )
        return found


async def visible(reader: QueueReader, mq: MessageQueue, end: int, timeout: float) -> None:
    """Wait until ``mq`` holds offsets below ``end``.

    The Java broker answers a send once the commit log has the message; its consume queue
    (what offsets and pulls see) is built from the commit log by a separate thread
    (``ReputMessageService``, every millisecond), so an offset may be readable a moment later;
    and the route of a topic the send auto-created may not be on the name server yet.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            top = await reader.max_offset(mq)
        except (TopicNotExistError, ServiceNotAvailableError) as exc:
            # a topic the send auto-created reaches the name server with the broker's next
            # registration (registerBrokerAll runs asynchronously after createTopicInSend...)
            top, why = -1, f"not routed yet ({exc})"
        else:
            why = f"still ends at {top}, not {end}"
        if top >= end:
            return
        assert time.monotonic() < deadline, f"{mq} {why}"
        await asyncio.sleep(0.01)


async def spawn(
    script: Path, name: str, namesrv: str, group: str, topic: str, out_dir: Path, *extra: str
) -> Child:
    """Start a member process and wait for its READY line."""
    out = out_dir / f"{name}.jsonl"
    options = member_options(namesrv, group, topic, out, name)
    return Child(
        name, await start_script(script, *options, *extra, ready_timeout=SPAWN_TIMEOUT), out
    )


async def stop(member: Child, sig: int) -> None:
    """SIGTERM (a clean leave: drain, commit, unlock, unregister) or SIGKILL, by PID."""
    await stop_member(member, sig, timeout=60)


async def stop_all(members: Sequence[Child]) -> None:
    """SIGTERM every member still running (the tests' ``finally``); SIGKILL if it hangs."""
    await stop_members(members, timeout=60)
