"""The smaller broker request handlers, grouped as Java groups them:

* client management (``ClientManageProcessor``): HEART_BEAT (34), UNREGISTER_CLIENT (35),
  CHECK_CLIENT_CONFIG (46);
* consumer management (``ConsumerManageProcessor``): GET_CONSUMER_LIST_BY_GROUP (38),
  QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15);
* queries and locks (``AdminBrokerProcessor``): SEARCH_OFFSET_BY_TIMESTAMP (29),
  GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32),
  VIEW_MESSAGE_BY_ID (33), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42),
  UPDATE_AND_CREATE_TOPIC (17).

Numbers in responses are strings only: the C++ client ignores numeric header values.
"""

from __future__ import annotations

import time

from aiorocket._protocol.bodies import (
    CheckClientRequestBody,
    ConsumerListBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from aiorocket._protocol.codes import Perm, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from aiorocket._protocol.sql92 import EXPRESSION_TYPE_SQL92, compile_sql92
from aiorocket._remoting import Connection, Dispatcher
from aiorocket.embedded.config import BrokerConfig
from aiorocket.embedded.groups import ClientGroups
from aiorocket.embedded.locks import QueueLocks
from aiorocket.embedded.offsets import ConsumerOffsets
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_PREFIX,
    TopicConfig,
    TopicTable,
    is_valid_name,
    retry_topic,
)
from aiorocket.errors import InvalidSelectorError

__all__ = ["BrokerProcessors"]

_NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


def _illegal(cmd: RemotingCommand, what: str, name: str) -> RemotingCommand:
    return cmd.make_response(
        ResponseCode.SYSTEM_ERROR,
        remark=f"the {what}[{name}] is illegal, allowing only ^[%|a-zA-Z0-9_-]{{1,127}}$",
    )


def _offset(cmd: RemotingCommand, value: int) -> RemotingCommand:
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(value)})


class BrokerProcessors:
    """Handlers of the client-management, consumer-management, query and lock codes.

    Args:
        store: the message store.
        topics: the topic table (retry topics are created on heartbeat).
        groups: client registrations.
        offsets: committed consumer offsets.
        locks: the orderly-consumption lock table.
        config: flush mode, offset policy, queue counts.
    """

    def __init__(
        self,
        *,
        store: MessageStore,
        topics: TopicTable,
        groups: ClientGroups,
        offsets: ConsumerOffsets,
        locks: QueueLocks,
        config: BrokerConfig,
    ) -> None:
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._locks = locks
        self._config = config

    def register(self, dispatcher: Dispatcher) -> None:
        """Install every handler of this class."""
        rc = RequestCode
        for code, handler in (
            (rc.HEART_BEAT, self.heartbeat),
            (rc.UNREGISTER_CLIENT, self.unregister_client),
            (rc.CHECK_CLIENT_CONFIG, self.check_client_config),
            (rc.GET_CONSUMER_LIST_BY_GROUP, self.get_consumer_list),
            (rc.QUERY_CONSUMER_OFFSET, self.query_consumer_offset),
            (rc.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset),
            (rc.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset),
            (rc.GET_MAX_OFFSET, self.get_max_offset),
            (rc.GET_MIN_OFFSET, self.get_min_offset),
            (rc.GET_EARLIEST_MSG_STORETIME, self.get_earliest_store_time),
            (rc.VIEW_MESSAGE_BY_ID, self.view_message),
            (rc.LOCK_BATCH_MQ, self.lock_batch),
            (rc.UNLOCK_BATCH_MQ, self.unlock_batch),
            (rc.UPDATE_AND_CREATE_TOPIC, self.create_topic),
        ):
            dispatcher.register(code, handler)

    # -- client management -------------------------------------------------------------------

    async def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """HEART_BEAT: register the channel in every group of the body (REMOTING.md §6.7)
        and create each consumer group's retry topic (§6.1).

        Raises:
            RemoteProtocolError: the body is not a heartbeat.
            OSError: the topic table cannot be written.
        """
        data = HeartbeatData.from_json(cmd.body)
        for consumer in data.consumers:
            group = consumer.group_name
            if not is_valid_name(group) or len(RETRY_PREFIX) + len(group) > 127:
                return _illegal(cmd, "consumer group", group)
        now = time.monotonic()
        for consumer in data.consumers:
            self._topics.ensure(retry_topic(consumer.group_name), self._config.retry_queue_nums)
            self._groups.register_consumer(
                conn,
                client_id=data.client_id,
                language=cmd.language,
                version=cmd.version,
                data=consumer,
                now=now,
            )
        for producer in data.producers:
            self._groups.register_producer(
                conn,
                group=producer.group_name,
                client_id=data.client_id,
                language=cmd.language,
                version=cmd.version,
                now=now,
            )
        return cmd.make_response(ResponseCode.SUCCESS)

    async def unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UNREGISTER_CLIENT: the channel leaves the named producer and/or consumer group.

        Raises:
            MissingHeaderFieldError: no ``clientID``.
        """
        h = UnregisterClientRequestHeader.from_ext(cmd.ext_fields)
        if h.producer_group:
            self._groups.unregister_producer(conn, h.producer_group)
        if h.consumer_group:
            self._groups.unregister_consumer(conn, h.consumer_group)
        return cmd.make_response(ResponseCode.SUCCESS)

    async def check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG: can this broker serve the subscription
        (``ClientManageProcessor.checkClientConfig``)? TAG always; SQL92 only with
        ``enable_property_filter`` (else code 1) and when it compiles (else code 23 with the
        parser's message).

        Raises:
            RemoteProtocolError: the body is not a ``CheckClientRequestBody``.
        """
        sub = CheckClientRequestBody.from_json(cmd.body or b"{}").subscription
        if sub is None:
            return cmd.make_response(ResponseCode.SUCCESS)
        expression_type = (sub.expression_type or "TAG").upper()
        if expression_type == "TAG":
            return cmd.make_response(ResponseCode.SUCCESS)
        if expression_type != EXPRESSION_TYPE_SQL92 or not self._config.enable_property_filter:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark="The broker does not support consumer to filter message by "
                + expression_type,
            )
        try:
            compile_sql92(sub.sub_string)
        except InvalidSelectorError as exc:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark=str(exc))
        return cmd.make_response(ResponseCode.SUCCESS)

    # -- consumer management -----------------------------------------------------------------

    async def get_consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_LIST_BY_GROUP: the client ids of the group's channels, or code 1.

        Raises:
            MissingHeaderFieldError: no ``consumerGroup``.
        """
        h = GetConsumerListByGroupRequestHeader.from_ext(cmd.ext_fields)
        ids = self._groups.consumer_ids(h.consumer_group)
        if not ids:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"no consumer for this group, {h.consumer_group}",
            )
        return cmd.make_response(ResponseCode.SUCCESS, body=ConsumerListBody(tuple(ids)).to_json())

    async def query_consumer_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET (REMOTING.md §6.5).

        The stored offset if there is one. Without one, and with ``new_group_offset_zero``
        (the default), offset 0 while the queue still starts at offset 0 — what a young
        4.9.8 broker answers, so a new group reads the queue from its start — otherwise
        QUERY_NOT_FOUND (22) and the client applies its ``ConsumeFromWhere``.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        if not is_valid_name(h.consumer_group):
            return _illegal(cmd, "consumer group", h.consumer_group)
        if not is_valid_name(h.topic):
            return _illegal(cmd, "topic", h.topic)
        stored = self._offsets.query(h.consumer_group, h.topic, h.queue_id)
        if stored is not None:
            return _offset(cmd, stored)
        if self._config.new_group_offset_zero and self._store.min_offset(h.topic, h.queue_id) <= 0:
            return _offset(cmd, 0)
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, remark=_NOT_FOUND_REMARK)

    async def update_consumer_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET: store the offset as given. With sync flush the answer
        waits until the offset table is on disk.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the offset table cannot be written (sync flush).
        """
        h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        if not is_valid_name(h.consumer_group):
            return _illegal(cmd, "consumer group", h.consumer_group)
        if not is_valid_name(h.topic):
            return _illegal(cmd, "topic", h.topic)
        self._offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if self._config.flush == "sync":
            await self._offsets.flush()
        return cmd.make_response(ResponseCode.SUCCESS)

    # -- queries -----------------------------------------------------------------------------

    async def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """SEARCH_OFFSET_BY_TIMESTAMP: the offset stored closest to the time (0 if none).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        return _offset(
            cmd, self._store.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        )

    async def get_max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_MAX_OFFSET: the next offset to be written (0 for an unknown queue).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = GetMaxOffsetRequestHeader.from_ext(cmd.ext_fields)
        return _offset(cmd, self._store.max_offset(h.topic, h.queue_id))

    async def get_min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_MIN_OFFSET: the smallest offset still stored (0 for an unknown queue).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = GetMinOffsetRequestHeader.from_ext(cmd.ext_fields)
        return _offset(cmd, self._store.min_offset(h.topic, h.queue_id))

    async def get_earliest_store_time(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """GET_EARLIEST_MSG_STORETIME: the oldest stored message's store time in ms, -1 for
        an empty queue (Java's ``getEarliestMessageTime``).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = GetEarliestMsgStoretimeRequestHeader.from_ext(cmd.ext_fields)
        ts = self._store.earliest_store_time(h.topic, h.queue_id)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(ts)})

    async def view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the stored record at a commit-log offset, or code 1.

        Raises:
            MissingHeaderFieldError: no ``offset``.
        """
        h = ViewMessageRequestHeader.from_ext(cmd.ext_fields)
        raw = self._store.read_at(h.offset) if h.offset >= 0 else None
        if raw is None:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"can not find message by the offset, {h.offset}",
            )
        return cmd.make_response(ResponseCode.SUCCESS, body=raw)

    # -- locks -------------------------------------------------------------------------------

    async def lock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """LOCK_BATCH_MQ: lock what is free, ours or expired; answer the locked subset.

        Raises:
            RemoteProtocolError: the body is malformed.
        """
        body = LockBatchRequestBody.from_json(cmd.body)
        granted = self._locks.try_lock(
            body.consumer_group, body.mq_set, body.client_id, now=time.monotonic()
        )
        return cmd.make_response(
            ResponseCode.SUCCESS, body=LockBatchResponseBody(tuple(granted)).to_json()
        )

    async def unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UNLOCK_BATCH_MQ: release the listed queues the client holds.

        Raises:
            RemoteProtocolError: the body is malformed.
        """
        body = UnlockBatchRequestBody.from_json(cmd.body)
        self._locks.unlock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.make_response(ResponseCode.SUCCESS)

    # -- admin -------------------------------------------------------------------------------

    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC: create or update a topic with explicit queue counts.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the topic table cannot be written.
        """
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        if not is_valid_name(h.topic):
            return _illegal(cmd, "topic", h.topic)
        if h.topic in NOT_ALLOWED_SEND_TOPICS or self._topics.is_system(h.topic):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the topic[{h.topic}] is conflict with system topic.",
            )
        if not (1 <= h.read_queue_nums <= 1024 and 1 <= h.write_queue_nums <= 1024):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark="queue counts must be 1..1024"
            )
        self._topics.put(
            TopicConfig(
                name=h.topic,
                read_queue_nums=h.read_queue_nums,
                write_queue_nums=h.write_queue_nums,
                perm=h.perm & int(Perm.READ | Perm.WRITE | Perm.INHERIT),
                topic_filter_type=h.topic_filter_type,
                topic_sys_flag=h.topic_sys_flag or 0,
                order=h.order,
            )
        )
        return cmd.make_response(ResponseCode.SUCCESS)
