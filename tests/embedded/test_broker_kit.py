"""A raw-protocol client for the embedded broker tests, and the checks of the kit itself.

The tests talk to the broker over real loopback TCP with ``ConnectionPool`` and the codec
only: no producer or consumer code, so the broker is checked as an independent peer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiorocket._protocol import properties as mp
from aiorocket._protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    ProducerData,
    SubscriptionData,
    TopicRouteData,
)
from aiorocket._protocol.codes import PullSysFlag, RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import SendMessageRequestHeader
from aiorocket._protocol.message import BatchItem, MessageRecord, decode_messages, encode_batch_body
from aiorocket._protocol.tags import parse_tag_expression
from aiorocket._remoting import Connection, ConnectionPool
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from tests._harness.protocol import create_topic_fields, pull_header

__all__ = ["RawClient", "fast_config", "running_broker"]

#: A short delay table for tests: level n waits n * 100 ms.
FAST_LEVELS = tuple(round(0.1 * n, 3) for n in range(1, 19))


def fast_config(**overrides: Any) -> BrokerConfig:
    """A config with test-sized timers."""
    options: dict[str, Any] = {"delay_levels": FAST_LEVELS, "offsets_flush_interval": 0.1}
    options.update(overrides)
    return BrokerConfig(**options)


@asynccontextmanager
async def running_broker(
    data_dir: Path | None = None, **overrides: Any
) -> AsyncIterator[EmbeddedBroker]:
    """An :class:`EmbeddedBroker` on an ephemeral port with :func:`fast_config`."""
    async with EmbeddedBroker(data_dir=data_dir, config=fast_config(**overrides)) as broker:
        yield broker


class RawClient:
    """One connection to the broker, speaking raw remoting commands.

    Requests the broker sends to us (NOTIFY_CONSUMER_IDS_CHANGED) land in :attr:`inbound`.
    """

    def __init__(self, address: str) -> None:
        self.address = address
        self.inbound: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self.pool = ConnectionPool(handler=self._on_request, spawn=self._spawn)
        self.conn: Connection | None = None

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> object:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _on_request(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        await self.inbound.put(cmd)
        return None

    async def __aenter__(self) -> RawClient:
        self.conn = await self.pool.get(self.address)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.pool.close()

    async def request(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        timeout: float = 5.0,
        version: int | None = None,
    ) -> RemotingCommand:
        conn = await self.pool.get(self.address)
        cmd = RemotingCommand.request(code, dict(ext or {}), body)
        if version is not None:
            cmd.version = version
        return await conn.request(cmd, timeout=timeout)

    # -- sending --------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | None = None,
        props: dict[str, str] | None = None,
        queue_id: int = 0,
        code: int = RequestCode.SEND_MESSAGE_V2,
        uniq_key: str | None = None,
        reconsume_times: int | None = None,
        max_reconsume_times: int | None = None,
        producer_group: str = "PG",
        sys_flag: int = 0,
        flag: int = 0,
        version: int | None = None,
    ) -> RemotingCommand:
        all_props: dict[str, str] = {}
        if tags is not None:
            all_props[mp.TAGS] = tags
        if keys is not None:
            all_props[mp.KEYS] = keys
        all_props[mp.WAIT] = "true"
        if uniq_key is not None:
            all_props[mp.UNIQ_KEY] = uniq_key
        all_props.update(props or {})
        header = SendMessageRequestHeader(
            producer_group=producer_group,
            topic=topic,
            queue_id=queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=flag,
            properties=mp.encode_properties(all_props),
            reconsume_times=reconsume_times,
            max_reconsume_times=max_reconsume_times,
        )
        ext = header.to_ext(v2=code != RequestCode.SEND_MESSAGE)
        return await self.request(code, ext, body, version=version)

    async def send_batch(
        self,
        topic: str,
        items: Iterable[tuple[bytes, dict[str, str]]],
        *,
        queue_id: int = 0,
        code: int = RequestCode.SEND_BATCH_MESSAGE,
    ) -> RemotingCommand:
        body = encode_batch_body([BatchItem(0, b, mp.encode_properties(p)) for b, p in items])
        header = SendMessageRequestHeader(
            producer_group="PG",
            topic=topic,
            queue_id=queue_id,
            born_timestamp=int(time.time() * 1000),
            properties=mp.encode_properties({mp.WAIT: "true"}),
            batch=True,
        )
        return await self.request(code, header.to_ext(v2=True), body)

    # -- pulling --------------------------------------------------------------------------

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_msgs: int = 32,
        subscription: str | None = "*",
        suspend_ms: int = 0,
        commit_offset: int | None = None,
        timeout: float = 5.0,
    ) -> tuple[RemotingCommand, list[MessageRecord]]:
        flag = 0
        if subscription is not None:
            flag |= PullSysFlag.SUBSCRIPTION
        if suspend_ms:
            flag |= PullSysFlag.SUSPEND
        if commit_offset is not None:
            flag |= PullSysFlag.COMMIT_OFFSET
        header = pull_header(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_msgs,
            sys_flag=int(flag),
            commit_offset=commit_offset or 0,
            suspend_timeout_millis=suspend_ms,
            subscription=subscription,
        )
        resp = await self.request(RequestCode.PULL_MESSAGE, header.to_ext(), timeout=timeout)
        records = decode_messages(resp.body) if resp.code == 0 else []
        return resp, records

    async def pull_all(
        self, group: str, topic: str, queue_id: int, *, start: int = 0
    ) -> list[MessageRecord]:
        """Every message of a queue from ``start`` on (no filter)."""
        out: list[MessageRecord] = []
        offset = start
        while True:
            resp, records = await self.pull(group, topic, queue_id, offset)
            if resp.code != 0:
                return out
            out += records
            offset = int(resp.ext_fields["nextBeginOffset"])

    # -- groups ---------------------------------------------------------------------------

    async def heartbeat(
        self,
        client_id: str,
        *,
        consumer_group: str | None = None,
        topics: dict[str, str] | None = None,
        producer_group: str | None = None,
    ) -> RemotingCommand:
        consumers: tuple[ConsumerData, ...] = ()
        if consumer_group is not None:
            subs = []
            for topic, expr in (topics or {}).items():
                f = parse_tag_expression(expr)
                subs.append(
                    SubscriptionData(
                        topic=topic,
                        sub_string=f.expression,
                        tags_set=tuple(sorted(f.tags)),
                        code_set=tuple(sorted(f.codes)),
                        sub_version=int(time.time() * 1000),
                    )
                )
            consumers = (
                ConsumerData(
                    group_name=consumer_group,
                    consume_type="CONSUME_PASSIVELY",
                    message_model="CLUSTERING",
                    consume_from_where="CONSUME_FROM_LAST_OFFSET",
                    subscriptions=tuple(subs),
                ),
            )
        producers = (ProducerData(producer_group),) if producer_group is not None else ()
        body = HeartbeatData(client_id, producers, consumers).to_json()
        return await self.request(RequestCode.HEART_BEAT, body=body)

    async def route(self, topic: str) -> tuple[RemotingCommand, TopicRouteData | None]:
        resp = await self.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return resp, TopicRouteData.from_json(resp.body) if resp.code == 0 else None

    async def create_topic(self, topic: str, queues: int = 4) -> None:
        """UPDATE_AND_CREATE_TOPIC, as ``mqadmin updateTopic`` does: a route lookup creates
        nothing (docs/protocol.md §7.5)."""
        resp = await self.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            create_topic_fields(topic, queues),
        )
        assert resp.code == 0, resp.remark

    async def query_offset(self, group: str, topic: str, queue_id: int) -> RemotingCommand:
        return await self.request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)},
        )

    async def update_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> RemotingCommand:
        return await self.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": group,
                "topic": topic,
                "queueId": str(queue_id),
                "commitOffset": str(offset),
            },
        )


async def test_kit_round_trip() -> None:
    async with running_broker() as broker, RawClient(broker.address) as client:
        resp = await client.send("KitTopic", b"hello", tags="A")
        assert resp.code == 0, resp.remark
        records = await client.pull_all("G", "KitTopic", 0)
        assert [r.body for r in records] == [b"hello"]
