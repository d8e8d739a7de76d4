"""The smaller broker request handlers, grouped as Java groups them:

* client management (``ClientManageProcessor``): HEART_BEAT (34), UNREGISTER_CLIENT (35),
  CHECK_CLIENT_CONFIG (46);
* consumer management (``ConsumerManageProcessor``): GET_CONSUMER_LIST_BY_GROUP (38),
  QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15);
* queries and locks (``AdminBrokerProcessor``): SEARCH_OFFSET_BY_TIMESTAMP (29),
  GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32),
  VIEW_MESSAGE_BY_ID (33), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42).

UPDATE_AND_CREATE_TOPIC (17) is with the other configuration requests (``config_admin.py``).

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
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from aiorocket._protocol.sql92 import EXPRESSION_TYPE_SQL92, compile_sql92
from aiorocket._remoting import Connection
from aiorocket.embedded.context import Processor, handles, illegal_name
from aiorocket.embedded.topics import RETRY_PREFIX, is_valid_name, retry_topic
from aiorocket.errors import InvalidSelectorError

__all__ = ["BrokerProcessors"]

_NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


def _offset(cmd: RemotingCommand, value: int) -> RemotingCommand:
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(value)})


class BrokerProcessors(Processor):
    """Handlers of the client-management, consumer-management, query and lock codes.

    Args:
        ctx: the broker's store, tables (retry topics are created on heartbeat), client
            registrations, offsets, locks and settings.
    """

    # -- client management -------------------------------------------------------------------

    @handles(RequestCode.HEART_BEAT)
    async def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """HEART_BEAT: register the channel in every group of the body (docs/protocol.md §6.7)
        and create each consumer group's retry topic (§6.1).

        Raises:
            RemoteProtocolError: the body is not a heartbeat.
            OSError: the topic table cannot be written.
        """
        data = HeartbeatData.from_json(cmd.body)
        for consumer in data.consumers:
            group = consumer.group_name
            if not is_valid_name(group) or len(RETRY_PREFIX) + len(group) > 127:
                return illegal_name(cmd, "consumer group", group)
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

    @handles(RequestCode.UNREGISTER_CLIENT)
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

    @handles(RequestCode.CHECK_CLIENT_CONFIG)
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

    @handles(RequestCode.GET_CONSUMER_LIST_BY_GROUP)
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

    @handles(RequestCode.QUERY_CONSUMER_OFFSET)
    async def query_consumer_offset(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET (docs/protocol.md §6.5).

        The stored offset if there is one. Without one, and with ``new_group_offset_zero``
        (the default), offset 0 while the queue still starts at offset 0 — what a young
        4.9.8 broker answers, so a new group reads the queue from its start — otherwise
        QUERY_NOT_FOUND (22) and the client applies its ``ConsumeFromWhere``.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        if not is_valid_name(h.consumer_group):
            return illegal_name(cmd, "consumer group", h.consumer_group)
        if not is_valid_name(h.topic):
            return illegal_name(cmd, "topic", h.topic)
        stored = self._offsets.query(h.consumer_group, h.topic, h.queue_id)
        if stored is not None:
            return _offset(cmd, stored)
        if self._config.new_group_offset_zero and self._store.min_offset(h.topic, h.queue_id) <= 0:
            return _offset(cmd, 0)
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, remark=_NOT_FOUND_REMARK)

    @handles(RequestCode.UPDATE_CONSUMER_OFFSET)
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
            return illegal_name(cmd, "consumer group", h.consumer_group)
        if not is_valid_name(h.topic):
            return illegal_name(cmd, "topic", h.topic)
        self._offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        if self._config.flush == "sync":
            await self._offsets.flush()
        return cmd.make_response(ResponseCode.SUCCESS)

    # -- queries -----------------------------------------------------------------------------

    @handles(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
    async def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """SEARCH_OFFSET_BY_TIMESTAMP: the offset stored closest to the time (0 if none).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        return _offset(
            cmd, self._store.search_offset_by_timestamp(h.topic, h.queue_id, h.timestamp)
        )

    @handles(RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET)
    async def queue_bound(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_MAX_OFFSET: the next offset to be written; GET_MIN_OFFSET: the smallest offset
        still stored; 0 for an unknown queue, both.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        # Both headers carry the same topic and queueId (GET_MAX_OFFSET adds an unused bname).
        h = GetMinOffsetRequestHeader.from_ext(cmd.ext_fields)
        if cmd.code == RequestCode.GET_MAX_OFFSET:
            return _offset(cmd, self._store.max_offset(h.topic, h.queue_id))
        return _offset(cmd, self._store.min_offset(h.topic, h.queue_id))

    @handles(RequestCode.GET_EARLIEST_MSG_STORETIME)
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

    @handles(RequestCode.VIEW_MESSAGE_BY_ID)
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

    @handles(RequestCode.LOCK_BATCH_MQ)
    async def lock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """LOCK_BATCH_MQ: lock what is free, ours or expired; answer the locked subset.

        Raises:
            RemoteProtocolError: the body is malformed.
        """
        body = LockBatchRequestBody.from_json(cmd.body)
        granted = self._ctx.locks.try_lock(
            body.consumer_group, body.mq_set, body.client_id, now=time.monotonic()
        )
        return cmd.make_response(
            ResponseCode.SUCCESS, body=LockBatchResponseBody(tuple(granted)).to_json()
        )

    @handles(RequestCode.UNLOCK_BATCH_MQ)
    async def unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UNLOCK_BATCH_MQ: release the listed queues the client holds.

        Raises:
            RemoteProtocolError: the body is malformed.
        """
        body = UnlockBatchRequestBody.from_json(cmd.body)
        self._ctx.locks.unlock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.make_response(ResponseCode.SUCCESS)
