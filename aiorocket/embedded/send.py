"""The send path: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36) — Java's ``SendMessageProcessor`` (docs/protocol.md §6.2, §4.6, §6.6).

Messages are stored through the broker's `MessageWriter`
(plain, parked when delayed, or as a half message when transactional).

Every check that can refuse a request runs before anything touches the disk: names, system
topics, sizes, queue ids.
"""

from __future__ import annotations

import logging
import random

from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import MessageSysFlag, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
)
from aiorocket._protocol.lite import MAX_LITE_TOPIC_LENGTH, is_valid_lite_topic, lite_queue_name
from aiorocket._protocol.message import MessageRecord, decode_batch_body, decode_message
from aiorocket._protocol.msgid import make_offset_msg_id
from aiorocket._protocol.properties import message_kind
from aiorocket._protocol.recall import RecallHandle
from aiorocket._remoting import Connection
from aiorocket.embedded.context import BrokerContext, Processor, handles
from aiorocket.embedded.store_results import PutResult
from aiorocket.embedded.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_PREFIX,
    dlq_topic,
    is_valid_name,
    retry_topic,
)
from aiorocket.embedded.writer import TimerRefused, copy_record
from aiorocket.errors import (
    ClientClosedError,
    LocalProtocolError,
    MessageTooLargeError,
    RemoteProtocolError,
)

__all__ = ["SendChecks", "SendProcessor", "born_ipv4"]

log = logging.getLogger("aiorocket.embedded")

#: ``MQVersion.Version.V3_4_9``: the first client version whose ``maxReconsumeTimes`` header
#: a broker honours (docs/protocol.md §0.3).
_V3_4_9 = 121
# The host bits never set in stored records: the C++ client and ali-ons read 4-byte IPs only.
_HOST_V6_BITS = int(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
_MAX_PROPERTIES = mp.MAX_PROPERTIES_SIZE


def born_ipv4(peer_host: str) -> str:
    """The IPv4 form of a peer address for the ``bornHost`` field (docs/protocol.md §4.7).

    An IPv4-mapped IPv6 address gives its IPv4 part; any other IPv6 peer (``::1``) is
    recorded as 127.0.0.1, since every client family can read 4-byte hosts. Never raises.
    """
    if ":" not in peer_host:
        return peer_host or "127.0.0.1"
    lowered = peer_host.lower()
    if lowered.startswith("::ffff:") and "." in lowered:
        return lowered[7:]
    return "127.0.0.1"


class SendChecks(Processor):
    """What the send processors share (Java's ``AbstractSendMessageProcessor``): the checks
    that admit a send, the record it becomes, the answers it gets.

    Args:
        ctx: the broker's writer, topic table (lookup and auto-creation), settings (limits
            and names) and advertised address (each record's store host, and the host of
            offset message ids).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        super().__init__(ctx)
        self._writer = ctx.writer
        self._store_address = ctx.store_address

    @staticmethod
    def _response(cmd: RemotingCommand, code: int, remark: str | None = None) -> RemotingCommand:
        # The Java client reads MSG_REGION/TRACE_ON from extFields of every send response and
        # fails on a null map (docs/protocol.md §2.2), so even errors carry them.
        return cmd.make_response(
            code, remark=remark, ext_fields={"MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        )

    def _unavailable(self, cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
        # The store cannot write (disk full, failed fsync, shutting down): SERVICE_NOT_AVAILABLE,
        # which producers retry on another broker (docs/protocol.md §3.1).
        log.error("cannot store a message: %s", exc)
        return self._response(cmd, ResponseCode.SERVICE_NOT_AVAILABLE, f"store error: {exc}")

    def _admit(
        self, cmd: RemotingCommand, header: SendMessageRequestHeader
    ) -> RemotingCommand | int:
        """The refusal of a send (``msgCheck`` and the size checks), or the queue id its
        message goes to (a random writable one for a negative id).

        Raises:
            OSError: the topic table could not be written (an auto-created topic).
        """
        topic = header.topic
        config = self._config
        if not is_valid_name(topic):
            return self._response(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"The specified topic[{topic}] contains illegal characters or is longer than "
                "127, allowing only ^[%|a-zA-Z0-9_-]+$",
            )
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return self._response(
                cmd, ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
            )
        if len(cmd.body) > config.max_message_size:
            return self._response(
                cmd,
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size over max value, MAX: {config.max_message_size}",
            )
        props_text = header.properties or ""
        if len(props_text) > _MAX_PROPERTIES or len(props_text.encode()) > _MAX_PROPERTIES:
            return self._response(
                cmd, ResponseCode.MESSAGE_ILLEGAL, "the message properties are too long"
            )
        if header.batch and topic.startswith(RETRY_PREFIX):
            return self._response(
                cmd, ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group"
            )
        cfg = self._topics.get(topic)
        if cfg is None:
            cfg = self._topics.create_on_send(
                topic, header.default_topic, header.default_topic_queue_nums
            )
            if cfg is None:
                return self._response(
                    cmd,
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please!",
                )
        if not cfg.writable:
            return self._response(
                cmd, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        queue_id = header.queue_id
        if queue_id < 0:
            return random.randrange(cfg.write_queue_nums)
        if queue_id >= cfg.queue_count:
            return self._response(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.writeQueueNums:[{cfg.write_queue_nums}]",
            )
        return queue_id

    @staticmethod
    def _priority_queue(props: dict[str, str], write_queues: int, queue_id: int) -> int:
        # SendMessageProcessor (5.4+): a message whose kind is PRIORITY (no transaction, delay
        # or FIFO property before it) goes to queue min(priority, writeQueueNums - 1), whatever
        # the producer chose; any other keeps its queue and loses the property (§12.6).
        raw = props[mp.PRIORITY]
        priority = int(raw) if raw.isdigit() else -1
        if priority < 0:
            return queue_id
        if message_kind(props) == "PRIORITY":
            return min(priority, write_queues - 1)
        del props[mp.PRIORITY]
        return queue_id

    def _record(
        self,
        conn: Connection,
        *,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        reconsume_times: int,
        props: dict[str, str],
    ) -> MessageRecord:
        store_host, store_port = self._store_address()
        peer_host, peer_port = conn.peer
        return MessageRecord(
            topic=topic,
            body=body,
            queue_id=queue_id,
            flag=flag,
            queue_offset=0,
            commit_log_offset=0,
            sys_flag=sys_flag & ~_HOST_V6_BITS,
            born_timestamp=born_timestamp,
            born_host=born_ipv4(peer_host),
            born_port=peer_port,
            store_timestamp=0,
            store_host=store_host,
            store_port=store_port,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=0,
            properties=props,
        )


class SendProcessor(SendChecks):
    """Serves the send codes and CONSUMER_SEND_MSG_BACK.

    Args:
        ctx: as for `SendChecks`.
    """

    @handles(RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    async def send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Codes 10, 310 and 320: store one message or a batch (the header's ``batch`` flag
        decides, not the code).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the topic table or the sync flush failed (a failed store write is
                answered SERVICE_NOT_AVAILABLE instead).
        """
        header = decode_send_header(cmd.code, cmd.ext_fields)
        queue_id = self._admit(cmd, header)
        if isinstance(queue_id, RemotingCommand):
            return queue_id
        props = mp.decode_properties(header.properties or "")
        # AbstractSendMessageProcessor.buildMsgContext: every sent message (a batch: each
        # member) is stored with the broker's region and trace switch; Java's consume trace
        # hook drops its records without a region.
        props[mp.MSG_REGION] = "DefaultRegion"
        props[mp.TRACE_ON] = "true"
        if header.batch and props.get(mp.TRAN_MSG, "").lower() == "true":
            # The Java client never batches half messages; a batch has no single half to end.
            return self._response(
                cmd, ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be transactional"
            )
        if header.batch:
            return await self._send_batch(conn, cmd, header, queue_id, props)
        if self._config.priorities_enabled and mp.PRIORITY in props:
            cfg = self._topics.get(header.topic)
            if cfg is not None:
                queue_id = self._priority_queue(props, cfg.write_queue_nums, queue_id)
        return await self._send_single(conn, cmd, header, queue_id, props)

    async def _send_single(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        header: SendMessageRequestHeader,
        queue_id: int,
        props: dict[str, str],
    ) -> RemotingCommand:
        topic = header.topic
        reconsume = header.reconsume_times or 0
        if topic.startswith(RETRY_PREFIX):
            # SendMessageProcessor.handleRetryAndDLQ: a client-side retry past the limit goes
            # to the group's DLQ, undelayed.
            group = topic[len(RETRY_PREFIX) :]
            max_times = self._config.max_reconsume_times
            if cmd.version >= _V3_4_9 and header.max_reconsume_times is not None:
                max_times = header.max_reconsume_times
            if reconsume >= max_times:
                topic = dlq_topic(group)
                self._topics.ensure(topic, 1)
                queue_id = 0
                props.pop(mp.DELAY, None)
        props[mp.CLUSTER] = self._config.cluster_name
        lite = props.get(mp.LITE_TOPIC)
        if lite and self._config.timers_enabled:
            # SendMessageProcessor (5.5): a lite topic's message is also indexed in its light
            # message queue (docs/protocol.md §12.8); its name becomes a directory here.
            if not is_valid_lite_topic(lite):
                return self._response(
                    cmd,
                    ResponseCode.MESSAGE_ILLEGAL,
                    "lite topic can only contain alphanumeric characters, hyphens(-), and "
                    f"underscores(_), at most {MAX_LITE_TOPIC_LENGTH}: {lite!r}",
                )
            props[mp.INNER_MULTI_DISPATCH] = lite_queue_name(header.topic, lite)
        # 4.9.8 drops WAIT from the stored copy of single messages (docs/protocol.md §6.2 step 6).
        wait = props.pop(mp.WAIT, None)
        rec = self._record(
            conn,
            topic=topic,
            queue_id=queue_id,
            body=cmd.body,
            flag=header.flag,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            reconsume_times=reconsume,
            props=props,
        )
        # SendMessageProcessor: TRAN_MSG=true (and not a delayed retry) makes a half message,
        # stored as is (TransactionalMessageBridge.putHalfMessage), never parked.
        half = props.get(mp.TRAN_MSG, "").lower() == "true" and not (
            reconsume > 0 and self._writer.delay_level(props) > 0
        )
        try:
            if half:
                result = self._writer.store_half(rec)
            else:
                result = self._writer.store_or_park(rec, wait=wait)
        except TimerRefused as exc:
            # SendMessageProcessor.handlePutMessageResult: WHEEL_TIMER_* (docs/protocol.md §12.4)
            return self._response(cmd, exc.refusal.code, exc.refusal.remark)
        except (LocalProtocolError, MessageTooLargeError) as exc:
            return self._response(cmd, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        except (OSError, ClientClosedError) as exc:
            return self._unavailable(cmd, exc)
        host, port = self._store_address()
        ext = {
            "msgId": make_offset_msg_id(host, port, result.commit_log_offset),
            # A parked (delayed or timer) message is answered with its real queue and its offset
            # in SCHEDULE_TOPIC_XXXX or rmq_sys_wheel_timer, as SendMessageProcessor does; a
            # half message likewise with its offset in the half queue (the producer's
            # tranStateTableOffset).
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        }
        handle = self._recall_handle(props)
        if handle is not None:
            ext["recallHandle"] = handle
        code = ResponseCode.SUCCESS
        if not await self._writer.wait_durable(result):
            code = ResponseCode.FLUSH_DISK_TIMEOUT
        return cmd.make_response(code, ext_fields=ext)

    def _recall_handle(self, props: dict[str, str]) -> str | None:
        # SendMessageProcessor.attachRecallHandle (5.3.2+): a parked timer message (not a
        # retry) is answered with the handle that recalls it (docs/protocol.md §12.7).
        slot, real_topic = props.get(mp.TIMER_OUT_MS), props.get(mp.REAL_TOPIC)
        if not self._config.recall_enabled or slot is None or real_topic is None:
            return None
        uniq = props.get(mp.UNIQ_KEY)
        if real_topic.startswith(RETRY_PREFIX) or not slot.isdigit() or uniq is None:
            return None
        due = str(int(slot) + 1)
        return RecallHandle(real_topic, self._config.broker_name, due, uniq).encode()

    async def _send_batch(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        header: SendMessageRequestHeader,
        queue_id: int,
        batch_props: dict[str, str],
    ) -> RemotingCommand:
        try:
            items = decode_batch_body(cmd.body)
        except RemoteProtocolError as exc:
            return self._response(cmd, ResponseCode.MESSAGE_ILLEGAL, str(exc))
        if not items:
            return self._response(cmd, ResponseCode.MESSAGE_ILLEGAL, "the batch is empty")
        if self._writer.delay_level(batch_props):
            # CommitLog.putMessages refuses delayed batches.
            return self._response(
                cmd, ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be delayed"
            )
        batch_props[mp.CLUSTER] = self._config.cluster_name
        extra = len(mp.encode_properties(batch_props).encode()) + 1
        records = []
        for item in items:
            props = mp.decode_properties(item.properties)
            # 4.9.8 appends the batch-level properties (WAIT, CLUSTER) to each record's own;
            # on a repeated key the appended value is the one readers keep.
            props.update(batch_props)
            # Refuse an oversized record before storing any of the batch. A character takes
            # at most 4 UTF-8 bytes, so the exact size is computed only when it could matter.
            if len(item.properties) * 4 + extra > _MAX_PROPERTIES and (
                len(mp.encode_properties(props).encode()) > _MAX_PROPERTIES
            ):
                return self._response(
                    cmd, ResponseCode.MESSAGE_ILLEGAL, "the message properties are too long"
                )
            records.append(
                self._record(
                    conn,
                    topic=header.topic,
                    queue_id=queue_id,
                    body=item.body,
                    flag=item.flag,
                    sys_flag=header.sys_flag & ~int(MessageSysFlag.COMPRESSED),
                    born_timestamp=header.born_timestamp,
                    reconsume_times=header.reconsume_times or 0,
                    props=props,
                )
            )
        host, port = self._store_address()
        prefix = make_offset_msg_id(host, port, 0)[:-16]  # IP + port; the offset follows
        ids: list[str] = []
        first: PutResult | None = None
        last: PutResult | None = None
        # No await in this loop: the batch occupies consecutive offsets of its queue. A
        # failure part-way is answered as a failure (the client may resend the batch; the part
        # already stored then appears twice, never lost).
        for rec in records:
            try:
                last = self._writer.store_message(rec)
            except (OSError, ClientClosedError, LocalProtocolError, MessageTooLargeError) as exc:
                if ids:
                    log.warning(
                        "batch to %s failed after %d messages: %s", header.topic, len(ids), exc
                    )
                if isinstance(exc, OSError | ClientClosedError):
                    return self._unavailable(cmd, exc)
                return self._response(cmd, ResponseCode.MESSAGE_ILLEGAL, str(exc))
            if first is None:
                first = last
            ids.append(f"{prefix}{last.commit_log_offset:016X}")
        assert first is not None
        assert last is not None
        code = ResponseCode.SUCCESS
        if not await self._writer.wait_durable(last):
            code = ResponseCode.FLUSH_DISK_TIMEOUT
        return cmd.make_response(
            code,
            ext_fields={
                "msgId": ",".join(ids),
                "queueId": str(queue_id),
                "queueOffset": str(first.queue_offset),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )

    @handles(RequestCode.CONSUMER_SEND_MSG_BACK)
    async def send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: re-store a failed message in ``%RETRY%group`` through the
        delay levels, or in ``%DLQ%group`` past the limit (docs/protocol.md §6.6).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the store failed.
        """
        header = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext_fields)
        group = header.group
        if not is_valid_name(group) or len(group) + len(RETRY_PREFIX) > 127:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"the consumer group[{group}] is illegal"
            )
        config = self._config
        new_topic = retry_topic(group)
        cfg = self._topics.ensure(new_topic, config.retry_queue_nums)
        if not cfg.writable:
            return cmd.make_response(
                ResponseCode.NO_PERMISSION,
                remark=f"the topic[{new_topic}] sending message is forbidden",
            )
        raw = self._writer.store.read_at(header.offset)
        if raw is None:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"look message by offset failed, {header.offset}",
            )
        try:
            orig, _ = decode_message(raw, decompress=False)
        except RemoteProtocolError:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"look message by offset failed, {header.offset}",
            )
        props = dict(orig.properties)
        props.setdefault(mp.RETRY_TOPIC, orig.topic)
        max_times = config.max_reconsume_times
        if cmd.version >= _V3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        delay_level = header.delay_level
        if orig.reconsume_times >= max_times or delay_level < 0:
            new_topic = dlq_topic(group)
            dlq = self._topics.ensure(new_topic, 1)
            if not dlq.writable:
                return cmd.make_response(
                    ResponseCode.NO_PERMISSION,
                    remark=f"the topic[{new_topic}] sending message is forbidden",
                )
            queue_id = 0
            props.pop(mp.DELAY, None)
        else:
            if delay_level == 0:
                delay_level = 3 + orig.reconsume_times
            props[mp.DELAY] = str(delay_level)
            queue_id = random.randrange(cfg.write_queue_nums)
        if mp.ORIGIN_MESSAGE_ID not in props:
            props[mp.ORIGIN_MESSAGE_ID] = make_offset_msg_id(
                orig.store_host, orig.store_port, orig.commit_log_offset
            )
        rec = copy_record(
            orig,
            new_topic,
            queue_id,
            self._store_address(),
            properties=props,
            reconsume_times=orig.reconsume_times + 1,
        )
        # consumerSendMsgBack sets waitStoreMsgOK false on the copy: a parked retry says so.
        try:
            result = self._writer.store_or_park(rec, wait="false")
        except TimerRefused as exc:
            return cmd.make_response(exc.refusal.code, remark=exc.refusal.remark)
        if not await self._writer.wait_durable(result):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark="FLUSH_DISK_TIMEOUT")
        return cmd.make_response(ResponseCode.SUCCESS)
