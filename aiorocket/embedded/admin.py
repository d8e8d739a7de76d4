"""The admin requests of ``mqadmin`` and the dashboard (``AdminBrokerProcessor``,
``QueryMessageProcessor``), answered with the bodies the 4.9.8 Java tools decode:

* progress and lag: GET_CONSUME_STATS (208), GET_TOPIC_STATS_INFO (202), QUERY_CONSUME_QUEUE
  (321), QUERY_TOPIC_CONSUME_BY_WHO (300);
* clients: GET_CONSUMER_CONNECTION_LIST (203), GET_PRODUCER_CONNECTION_LIST (204),
  GET_CONSUMER_RUNNING_INFO (307, forwarded to the client, whose answer is relayed),
  INVOKE_BROKER_TO_RESET_OFFSET (222, which sends RESET_CONSUMER_CLIENT_OFFSET to every live
  member of the group);
* the broker: GET_BROKER_RUNTIME_INFO (28), GET_BROKER_CONFIG (26);
* messages: QUERY_MESSAGE (12) by key or UNIQ_KEY.

Topic and subscription-group configuration is ``config_admin.py``; the name server's admin
requests (KV config, DELETE_TOPIC_IN_NAMESRV) are ``namesrv.py``.

What differs from Java, and why:

* QUERY_MESSAGE has no key index behind it (the store keeps nothing per message in memory,
  ``store.py``): it scans the topic's index backwards from the newest entry, within the
  requested time range, reading each candidate's properties, and stops after ``maxNum`` hits
  or `QUERY_SCAN_LIMIT` entries. Fine for a development broker; slow on huge topics.
* QUERY_CONSUME_QUEUE answers the entries asked for (4.9.8 encodes its body before filling
  it, so a Java broker always answers an empty dump).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time

from aiorocket._names import now_ms
from aiorocket._protocol import properties as mp
from aiorocket._protocol.admin_bodies import Connection as ConnectionBody
from aiorocket._protocol.admin_bodies import (
    ConsumeQueueEntry,
    ConsumerConnection,
    ConsumeStats,
    DataVersion,
    GroupList,
    KVTable,
    OffsetWrapper,
    ProducerConnection,
    QueryConsumeQueueResponseBody,
    TopicOffset,
    TopicStatsTable,
)
from aiorocket._protocol.bodies import ResetOffsetBody
from aiorocket._protocol.codes import (
    VERSION_V4_9_8,
    VERSION_V5_0_0_SNAPSHOT,
    VERSION_V5_5_0,
    RequestCode,
    ResponseCode,
)
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    UNIQUE_KEY_QUERY,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
)
from aiorocket._protocol.message import decode_message
from aiorocket._remoting import Connection
from aiorocket.embedded.context import BrokerContext, Processor, handles, peer_address
from aiorocket.embedded.groups import ClientChannel
from aiorocket.errors import (
    ConnectionClosedError,
    RemoteProtocolError,
    RequestTimeoutError,
    TransportError,
)
from aiorocket.models import MessageQueue

__all__ = ["QUERY_SCAN_LIMIT", "AdminProcessors"]

log = logging.getLogger("aiorocket.embedded")

#: most index entries one QUERY_MESSAGE examines (across the topic's queues)
QUERY_SCAN_LIMIT = 1_000_000
#: ``MessageStoreConfig.defaultQueryMaxNum``: hits of a query by UNIQ_KEY
_DEFAULT_QUERY_MAX_NUM = 32
#: entries read per index read while scanning
_SCAN_CHUNK = 1024
#: ``MQVersion.Version.V3_0_7_SNAPSHOT`` / ``V3_1_8_SNAPSHOT`` ordinals: the oldest clients
#: that take a reset-offset request / a running-info request (Broker2Client, callConsumer)
_V3_0_7 = 28
_V3_1_8 = 62
_VERSION_DESC = "V4_9_8"
#: what a 5.x broker's runtime info adds to 4.9.8's (its thread pools for acks and lite pulls,
#: timer progress, whether it is active), each at its value on an idle broker; the timer keys
#: are then replaced by the timer service's figures
_V5_RUNTIME_EXTRA = {
    "ackThreadPoolQueueCapacity": "100000",
    "ackThreadPoolQueueHeadWaitTimeMills": "0",
    "ackThreadPoolQueueSize": "0",
    "brokerActive": "true",
    "litePullThreadPoolQueueCapacity": "100000",
    "litePullThreadPoolQueueHeadWaitTimeMills": "0",
    "litePullThreadPoolQueueSize": "0",
    "timerCongestNum": "0",
    "timerDequeueTps": "0.0",
    "timerEnqueueTps": "0.0",
    "timerOffsetBehind": "0",
    "timerReadBehind": "0",
}


def _human_bytes(n: float) -> str:
    # MixAll.humanReadableByteCount(bytes, si=false): "512 B", "1.5 KiB", "252.0 GiB".
    if n < 1024:
        return f"{int(n)} B"
    units = "KMGTPE"
    exp = 0
    while n >= 1024 ** (exp + 1) and exp < len(units):
        exp += 1
    return f"{n / 1024**exp:.1f} {units[exp - 1]}iB"


def _runtime(seconds: float) -> str:
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {s} seconds ]"


def _connection(info: ClientChannel) -> ConnectionBody:
    return ConnectionBody(info.client_id, peer_address(info.channel), info.language, info.version)


def _keys_of(props: dict[str, str]) -> set[str]:
    # IndexService.buildIndex indexes every space-separated KEYS entry and the UNIQ_KEY.
    keys = set((props.get(mp.KEYS) or "").split(" "))
    uniq = props.get(mp.UNIQ_KEY)
    if uniq:
        keys.add(uniq)
    keys.discard("")
    return keys


class AdminProcessors(Processor):
    """The broker half of the admin requests (the configuration ones are ``ConfigAdmin``'s).

    Args:
        ctx: the broker's store, tables, client registrations, statistics, settings,
            advertised address and data directory (disk figures of the runtime info).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        super().__init__(ctx)
        self._started = time.monotonic()

    # -- the broker ---------------------------------------------------------------------------

    def runtime_table(self) -> dict[str, str]:
        """The GET_BROKER_RUNTIME_INFO table: the keys ``mqadmin brokerStatus`` shows for a
        4.9.8 broker, with this broker's figures (thread-pool queues are always empty here).
        """
        now = time.monotonic()
        st = self._store.statistics()
        stats = self._ctx.stats
        put_tps = stats.put_tps()
        get_tps = stats.get_tps()
        try:
            disk = shutil.disk_usage(self._ctx.data_dir)
            # df's Use%: used over what non-root users could have (what 4.9.8 reports)
            room = disk.used + disk.free
            ratio = f"{disk.used / room:.2f}" if room else "0.00"
            capacity = f"Total : {_human_bytes(disk.total)}, Free : {_human_bytes(disk.free)}."
        except OSError:
            ratio, capacity = "0.00", "Total : 0 B, Free : 0 B."
        earliest = -1
        if st.commit_log_segments:
            with contextlib.suppress(OSError, RemoteProtocolError):
                raw = self._store.read_at(st.commit_log_min_offset)
                if raw is not None:
                    earliest = decode_message(raw, decompress=False)[0].store_timestamp
        tps = " ".join("" if x is None else str(x) for x in put_tps)
        gtps = " ".join("" if x is None else str(x) for x in get_tps)
        commit_log_dir = str(self._ctx.data_dir / "commitlog")
        return {
            "EndTransactionQueueSize": "0",
            "EndTransactionThreadPoolQueueCapacity": "100000",
            "bootTimestamp": str(stats.boot_ms),
            "brokerVersion": str(VERSION_V4_9_8),
            "brokerVersionDesc": _VERSION_DESC,
            "commitLogDirCapacity": capacity,
            "commitLogDiskRatio": ratio,
            f"commitLogDiskRatio_{commit_log_dir}": ratio,
            "commitLogMaxOffset": str(st.commit_log_max_offset),
            "commitLogMinOffset": str(st.commit_log_min_offset if st.commit_log_segments else -1),
            "consumeQueueDiskRatio": ratio,
            "dispatchBehindBytes": "0",
            "dispatchMaxBuffer": "0",
            "earliestMessageTimeStamp": str(earliest),
            "getFoundTps": gtps,
            "getMessageEntireTimeMax": "0",
            "getMissTps": " ".join("" if x is None else "0.0" for x in get_tps),
            "getTotalTps": gtps,
            "getTransferedTps": gtps,
            "msgGetTotalTodayMorning": str(stats.gets_today_morning),
            "msgGetTotalTodayNow": str(stats.gets),
            "msgGetTotalYesterdayMorning": str(stats.gets_yesterday_morning),
            "msgPutTotalTodayMorning": str(stats.puts_today_morning),
            "msgPutTotalTodayNow": str(st.messages_put),
            "msgPutTotalYesterdayMorning": str(stats.puts_yesterday_morning),
            "pageCacheLockTimeMills": "0",
            "pullThreadPoolQueueCapacity": "100000",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueSize": "0",
            "putLatency99": "0.00",
            "putLatency999": "0.00",
            "putMessageAverageSize": (
                f"{st.bytes_put / st.messages_put:.1f}" if st.messages_put else "0.0"
            ),
            "putMessageEntireTimeMax": "0",
            "putMessageFailedTimes": "0",
            "putMessageSizeTotal": str(st.bytes_put),
            "putMessageTimesTotal": str(st.messages_put),
            "putTps": tps,
            "queryThreadPoolQueueCapacity": "20000",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueSize": "0",
            "remainHowManyDataToFlush": _human_bytes(
                max(st.commit_log_max_offset - st.durable_offset, 0)
            ),
            "remainTransientStoreBufferNumbs": str(2**31 - 1),
            "runtime": _runtime(now - self._started),
            "sendThreadPoolQueueCapacity": "10000",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "sendThreadPoolQueueSize": "0",
            "startAcceptSendRequestTimeStamp": "0",
        }

    @handles(RequestCode.GET_BROKER_RUNTIME_INFO)
    async def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO: a `KVTable` (``mqadmin brokerStatus``,
        ``clusterList``); to a 5.x client, with the keys a 5.x broker reports (its
        ``clusterList`` reads ``brokerActive`` and the timer keys, and the transfer rate under
        its corrected name ``getTransferredTps``; a 5.5 one sees no ``brokerVersion``); the
        timer keys are live (docs/protocol.md §12.4)."""
        table = self.runtime_table()
        if cmd.version >= VERSION_V5_0_0_SNAPSHOT:
            table.update(_V5_RUNTIME_EXTRA)
            table.update(self._ctx.timers.runtime_info())
            table["getTransferredTps"] = table.pop("getTransferedTps")
        if cmd.version >= VERSION_V5_5_0:
            # 5.5's AdminBrokerProcessor.prepareRuntimeInfo reports brokerVersionDesc only
            del table["brokerVersion"]
        return cmd.make_response(ResponseCode.SUCCESS, body=KVTable(table).to_json())

    def config_table(self) -> dict[str, str]:
        """This broker's settings under the Java ``BrokerConfig`` / ``MessageStoreConfig``
        names they stand for."""
        c = self._config
        host, _, port = self._ctx.address().rpartition(":")
        return {
            "brokerClusterName": c.cluster_name,
            "brokerName": c.broker_name,
            "brokerId": "0",
            "brokerIP1": host,
            "listenPort": port,
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH" if c.flush == "sync" else "ASYNC_FLUSH",
            "flushIntervalCommitLog": str(int(c.flush_interval * 1000)),
            "syncFlushTimeout": str(int(c.sync_flush_timeout * 1000)),
            "fileReservedTime": f"{c.retention_hours:g}",
            "mappedFileSizeCommitLog": str(c.segment_size),
            "storePathRootDir": str(self._ctx.data_dir),
            "storePathCommitLog": str(self._ctx.data_dir / "commitlog"),
            "autoCreateTopicEnable": str(c.auto_create_topics).lower(),
            "autoCreateSubscriptionGroup": "true",
            "defaultTopicQueueNums": str(c.default_queues),
            "maxMessageSize": str(c.max_message_size),
            "maxTransferCountOnMessageInMemory": str(c.max_pull_messages),
            "maxTransferBytesOnMessageInMemory": str(c.max_pull_bytes),
            "longPollingEnable": "true",
            "messageDelayLevel": " ".join(f"{d:g}s" for d in c.delay_levels),
            "notifyConsumerIdsChangedEnable": str(c.notify_consumer_ids_changed).lower(),
            "aclEnable": str(c.acl_enabled).lower(),
            "channelExpiredTimeout": str(int(c.channel_expiry * 1000)),
            "flushConsumerOffsetInterval": str(int(c.offsets_flush_interval * 1000)),
        }

    @handles(RequestCode.GET_BROKER_CONFIG)
    async def broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG: ``key=value`` lines (``getAllConfigsFormatString``) and the data
        version in the ``version`` ext field (``mqadmin getBrokerConfig``)."""
        table = self.config_table()
        text = "".join(f"{k}={table[k]}\n" for k in sorted(table))
        version = json.dumps(
            DataVersion(self._ctx.stats.boot_ms, 0).to_dict(), separators=(",", ":")
        )
        return cmd.make_response(
            ResponseCode.SUCCESS, ext_fields={"version": version}, body=text.encode()
        )

    # -- progress -----------------------------------------------------------------------------

    def topic_offsets(self, topic: str) -> dict[int, TopicOffset] | None:
        """Min, max and newest store time of each write queue of ``topic``; ``None`` for an
        unknown topic."""
        cfg = self._topics.get(topic)
        if cfg is None:
            return None
        out: dict[int, TopicOffset] = {}
        store = self._store
        for qid in range(cfg.write_queue_nums):
            lo = max(store.min_offset(topic, qid), 0)
            hi = max(store.max_offset(topic, qid), 0)
            last = store.store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
            out[qid] = TopicOffset(lo, hi, max(last, 0))
        return out

    @handles(RequestCode.GET_TOPIC_STATS_INFO)
    async def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO: a `TopicStatsTable` over the write queues, or code 17
        (``mqadmin topicStatus``).

        Raises:
            MissingHeaderFieldError: no ``topic``.
        """
        h = GetTopicStatsInfoRequestHeader.from_ext(cmd.ext_fields)
        offsets = self.topic_offsets(h.topic)
        if offsets is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{h.topic}] not exist"
            )
        name = self._config.broker_name
        body = TopicStatsTable({_mq(h.topic, name, q): o for q, o in offsets.items()})
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    def consume_stats_of(self, group: str, topic: str | None = None) -> ConsumeStats:
        """``getConsumeStats``: per read queue of each topic ``group`` has offsets for (or of
        ``topic``), the broker's max offset, the committed offset (0 if none) and the store
        time of the last consumed message. A topic the group's online members do not
        subscribe to is left out, as Java leaves it out."""
        topics = self._offsets.topics_of(group) if not topic else [topic]
        info = self._groups.consumer_group(group)
        subscribed = set(info.subscriptions) if info is not None else set()
        name = self._config.broker_name
        store = self._store
        table: dict[MessageQueue, OffsetWrapper] = {}
        tps = 0.0
        for t in topics:
            cfg = self._topics.get(t)
            if cfg is None:
                continue
            if subscribed and t not in subscribed:
                continue
            for qid in range(cfg.read_queue_nums):
                broker_offset = max(store.max_offset(t, qid), 0)
                committed = self._offsets.query(group, t, qid)
                consumer_offset = max(committed if committed is not None else 0, 0)
                last = 0
                if consumer_offset > 0:
                    ts = store.store_timestamp(t, qid, consumer_offset - 1)
                    last = ts if ts > 0 else 0
                table[_mq(t, name, qid)] = OffsetWrapper(broker_offset, consumer_offset, last)
            tps += self._ctx.stats.group_get_tps(group, t)
        return ConsumeStats(table, tps)

    @handles(RequestCode.GET_CONSUME_STATS)
    async def consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUME_STATS: a `ConsumeStats` (``mqadmin consumerProgress``).

        Raises:
            MissingHeaderFieldError: no ``consumerGroup``.
        """
        h = GetConsumeStatsRequestHeader.from_ext(cmd.ext_fields)
        body = self.consume_stats_of(h.consumer_group, h.topic)
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    @handles(RequestCode.QUERY_CONSUME_QUEUE)
    async def query_consume_queue(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_CONSUME_QUEUE: ``count`` index entries from ``index`` (``mqadmin queryCq``).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = QueryConsumeQueueRequestHeader.from_ext(cmd.ext_fields)
        store = self._store
        if h.queue_id not in store.queues().get(h.topic, []):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"{h.queue_id}@{h.topic} is not exist!"
            )
        sub_data = None
        filter_data = None
        if h.consumer_group is not None:
            sub = self._groups.subscription(h.consumer_group, h.topic)
            if sub is None:
                filter_data = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                sub_data = sub.data
        entries = store.index_entries(h.topic, h.queue_id, h.index, min(max(h.count, 0), 10_000))
        body = QueryConsumeQueueResponseBody(
            max_queue_index=store.max_offset(h.topic, h.queue_id),
            min_queue_index=store.min_offset(h.topic, h.queue_id),
            queue_data=tuple(
                ConsumeQueueEntry(e.commit_log_offset, e.size, e.tags_code) for _, e in entries
            ),
            subscription_data=sub_data,
            filter_data=filter_data,
        )
        remark = None
        if not entries:
            remark = f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!"
        return cmd.make_response(ResponseCode.SUCCESS, remark=remark, body=body.to_json())

    @handles(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO)
    async def topic_consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO: the groups online for the topic plus those with offsets.

        Raises:
            MissingHeaderFieldError: no ``topic``.
        """
        h = QueryTopicConsumeByWhoRequestHeader.from_ext(cmd.ext_fields)
        groups = set(self._offsets.groups_of(h.topic))
        for g in self._groups.consumer_groups():
            if self._groups.subscription(g, h.topic) is not None:
                groups.add(g)
        return cmd.make_response(ResponseCode.SUCCESS, body=GroupList(tuple(groups)).to_json())

    # -- clients ------------------------------------------------------------------------------

    @handles(RequestCode.GET_CONSUMER_CONNECTION_LIST)
    async def consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_CONNECTION_LIST: a `ConsumerConnection`, or CONSUMER_NOT_ONLINE
        (206) (``mqadmin consumerConnection``).

        Raises:
            MissingHeaderFieldError: no ``consumerGroup``.
        """
        h = GetConsumerConnectionListRequestHeader.from_ext(cmd.ext_fields)
        info = self._groups.consumer_group(h.consumer_group)
        if info is None or not info.channels:
            return cmd.make_response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                remark=f"the consumer group[{h.consumer_group}] not online",
            )
        body = ConsumerConnection(
            connection_set=tuple(_connection(c) for c in info.channels.values()),
            subscription_table={t: s.data for t, s in info.subscriptions.items()},
            consume_type=info.consume_type,
            message_model=info.message_model,
            consume_from_where=info.consume_from_where,
        )
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    @handles(RequestCode.GET_PRODUCER_CONNECTION_LIST)
    async def producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: a `ProducerConnection`, or code 1
        (``mqadmin producerConnection``).

        Raises:
            MissingHeaderFieldError: no ``producerGroup``.
        """
        h = GetProducerConnectionListRequestHeader.from_ext(cmd.ext_fields)
        channels = self._groups.producer_channels(h.producer_group)
        if not channels:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the producer group[{h.producer_group}] not exist",
            )
        body = ProducerConnection(tuple(_connection(c) for c in channels))
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    def _find_channel(self, group: str, client_id: str) -> ClientChannel | None:
        info = self._groups.consumer_group(group)
        if info is None:
            return None
        return next((c for c in info.channels.values() if c.client_id == client_id), None)

    @handles(RequestCode.GET_CONSUMER_RUNNING_INFO)
    async def consumer_running_info(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO: forward to the client and relay its answer
        (``callConsumer``; ``mqadmin consumerStatus``, ``consumerProgress``).

        Raises:
            MissingHeaderFieldError: no ``consumerGroup`` or ``clientId``.
        """
        h = GetConsumerRunningInfoRequestHeader.from_ext(cmd.ext_fields)
        info = self._find_channel(h.consumer_group, h.client_id)
        if info is None or not isinstance(info.channel, Connection):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer <{h.consumer_group}> <{h.client_id}> not online",
            )
        if info.version < _V3_1_8:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer <{h.client_id}> Version <{info.version}> too low to "
                "finish, please upgrade it to V3_1_8_SNAPSHOT",
            )
        forward = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO, dict(cmd.ext_fields), cmd.body
        )
        try:
            answer = await info.channel.request(forward, timeout=self._config.call_client_timeout)
        except RequestTimeoutError as exc:
            return cmd.make_response(
                ResponseCode.CONSUME_MSG_TIMEOUT,
                remark=f"consumer <{h.consumer_group}> <{h.client_id}> Timeout: {exc}",
            )
        except TransportError as exc:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"invoke consumer <{h.consumer_group}> <{h.client_id}> Exception: {exc}",
            )
        return cmd.make_response(
            answer.code, remark=answer.remark, ext_fields=answer.ext_fields, body=answer.body
        )

    def reset_offsets(
        self, group: str, topic: str, timestamp: int, force: bool
    ) -> dict[MessageQueue, int] | str:
        """The new offset of each write queue of ``topic`` (``Broker2Client.resetOffset``):
        the offset stored closest to ``timestamp`` (-1: the max offset), or the committed
        offset if that is smaller and ``force`` is off. A string says why it cannot be done.
        """
        cfg = self._topics.get(topic)
        if cfg is None:
            return f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
        store = self._store
        name = self._config.broker_name
        table: dict[MessageQueue, int] = {}
        for qid in range(cfg.write_queue_nums):
            committed = self._offsets.query(group, topic, qid)
            if committed is None:
                return f"THe consumer group <{group}> not exist"
            if timestamp == -1:
                target = store.max_offset(topic, qid)
            else:
                target = store.search_offset_by_timestamp(topic, qid, timestamp)
            target = max(target, 0)
            table[_mq(topic, name, qid)] = target if force or target < committed else committed
        return table

    @handles(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET)
    async def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: compute each queue's new offset and send it to every
        live member of the group in RESET_CONSUMER_CLIENT_OFFSET (oneway); answer the offsets
        (``mqadmin resetOffsetByTime``). A C++ caller gets the C++ list form sent to clients,
        as 4.9.8 decides by the requester's language.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = ResetOffsetRequestHeader.from_ext(cmd.ext_fields)
        log.info(
            "reset offset of %s for %s to %d (force %s) asked by %s",
            h.topic,
            h.group,
            h.timestamp,
            h.is_force,
            peer_address(conn),
        )
        table = self.reset_offsets(h.group, h.topic, h.timestamp, h.is_force)
        if isinstance(table, str):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=table)
        info = self._groups.consumer_group(h.group)
        if info is None or not info.channels:
            return cmd.make_response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                remark=f"Consumer not online, so can not reset offset, Group: {h.group} "
                f"Topic: {h.topic} Timestamp: {h.timestamp}",
            )
        body = ResetOffsetBody(table)
        payload = body.to_json_for_cpp() if cmd.language == "CPP" else body.to_json()
        header = ResetOffsetRequestHeader(
            topic=h.topic, group=h.group, timestamp=h.timestamp, is_force=h.is_force
        )
        for channel_info in list(info.channels.values()):
            if channel_info.version < _V3_0_7:
                return cmd.make_response(
                    ResponseCode.SYSTEM_ERROR,
                    remark=f"the client does not support this feature. version="
                    f"{channel_info.version}",
                )
            channel = channel_info.channel
            if not isinstance(channel, Connection) or channel.is_closed:
                continue
            request = RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, header.to_ext(), payload, oneway=True
            )
            try:
                await channel.send_oneway(request)
            except (ConnectionClosedError, TransportError) as exc:
                log.warning("reset offset: %s unreachable: %s", channel_info.client_id, exc)
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    # -- messages -----------------------------------------------------------------------------

    async def find_by_key(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[tuple[int, bytes]]:
        """Up to ``max_num`` stored records of ``topic`` whose KEYS or UNIQ_KEY is ``key``,
        stored within ``[begin_ms, end_ms]``, newest first, as ``(store time, record)``."""
        store = self._store
        hits: list[tuple[int, bytes]] = []
        budget = QUERY_SCAN_LIMIT
        for qid in store.queues().get(topic, []):
            per_queue: list[tuple[int, bytes]] = []
            lo, hi = store.min_offset(topic, qid), store.max_offset(topic, qid)
            pos = hi
            while pos > lo and budget > 0 and len(per_queue) < max_num:
                start = max(lo, pos - _SCAN_CHUNK)
                # a chunk never crosses an index file: read it piece by piece
                entries = []
                at = start
                while at < pos:
                    got = store.index_entries(topic, qid, at, pos - at)
                    if not got:
                        break
                    entries.extend(got)
                    at = got[-1][0] + 1
                budget -= len(entries)
                stop = False
                for _qo, e in reversed(entries):
                    if e.store_timestamp < begin_ms:
                        stop = True
                        break
                    if e.store_timestamp > end_ms or e.size <= 0:
                        continue
                    raw = store.read_at(e.commit_log_offset)
                    if raw is None:
                        continue
                    try:
                        rec, _ = decode_message(raw, decompress=False)
                    except RemoteProtocolError:
                        continue
                    if rec.topic == topic and key in _keys_of(rec.properties):
                        per_queue.append((e.store_timestamp, raw))
                        if len(per_queue) >= max_num:
                            break
                pos = start
                await asyncio.sleep(0)  # a long scan must not stall the broker
                if stop:
                    break
            hits.extend(per_queue)
        hits.sort(key=lambda h: h[0], reverse=True)
        return hits[:max_num]

    @handles(RequestCode.QUERY_MESSAGE)
    async def query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_MESSAGE: the records of a topic with a key (``mqadmin queryMsgByKey``,
        ``queryMsgById`` for client ids), or QUERY_NOT_FOUND (22).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = QueryMessageRequestHeader.from_ext(cmd.ext_fields)
        max_num = h.max_num
        if cmd.ext_fields.get(UNIQUE_KEY_QUERY) == "true":
            max_num = _DEFAULT_QUERY_MAX_NUM
        hits = await self.find_by_key(
            h.topic, h.key, max(max_num, 1), h.begin_timestamp, h.end_timestamp
        )
        st = self._store.statistics()
        ext = {
            "indexLastUpdateTimestamp": str(now_ms()),
            "indexLastUpdatePhyoffset": str(st.commit_log_max_offset),
        }
        if not hits:
            return cmd.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                remark="can not find message, maybe time range not correct",
                ext_fields=ext,
            )
        return cmd.make_response(
            ResponseCode.SUCCESS, ext_fields=ext, body=b"".join(raw for _, raw in hits)
        )


def _mq(topic: str, broker_name: str, queue_id: int) -> MessageQueue:
    return MessageQueue(topic, broker_name, queue_id)
