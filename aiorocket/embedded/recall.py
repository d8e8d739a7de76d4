"""RECALL_MESSAGE (370): cancel a pending timer message (RocketMQ 5.3.2+'s
``RecallMessageProcessor``; docs/protocol.md §12.7).

The handle names the topic, this broker, the due time and the message's ``UNIQ_KEY``. The
broker checks it and parks a cancelling timer message (``TIMER_DEL_UNIQKEY`` =
``<topic>+<UNIQ_KEY>``, due at the same time) in the timer wheel; when the slot comes the timer
service delivers neither (``timers.py``). The answer carries the ``UNIQ_KEY``.
"""

from __future__ import annotations

from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.recall import RecallHandle, RecallMessageRequestHeader
from aiorocket._remoting import Connection
from aiorocket.embedded.context import handles
from aiorocket.embedded.send import SendChecks
from aiorocket.embedded.writer import TimerRefused
from aiorocket.errors import ClientClosedError, LocalProtocolError, RemoteProtocolError

__all__ = ["RecallProcessor"]

#: ``RecallMessageProcessor.RECALL_MESSAGE_TAG``: the tag of a cancelling message
RECALL_TAG = "_RECALL_TAG_"


class RecallProcessor(SendChecks):
    """The RECALL_MESSAGE handler (a send of the broker's own cancelling message)."""

    @handles(RequestCode.RECALL_MESSAGE)
    async def recall(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """RECALL_MESSAGE: check the handle, park the cancelling timer message.

        Raises:
            MissingHeaderFieldError: no ``topic`` or ``recallHandle``.
        """
        config = self._config
        if not config.recall_enabled:
            return cmd.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f" request type {cmd.code} not supported",
            )
        if not config.recall_message_enable:
            return cmd.make_response(
                ResponseCode.NO_PERMISSION, remark="recall failed, operation is forbidden"
            )
        h = RecallMessageRequestHeader.from_ext(cmd.ext_fields)
        if self._topics.get(h.topic) is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"recall failed, the topic[{h.topic}] not exist",
            )
        try:
            handle = RecallHandle.decode(h.recall_handle)
        except RemoteProtocolError as exc:
            return cmd.make_response(ResponseCode.ILLEGAL_OPERATION, remark=str(exc))
        if handle.topic != h.topic:
            return cmd.make_response(
                ResponseCode.ILLEGAL_OPERATION, remark="recall failed, topic not match"
            )
        if handle.broker_name != config.broker_name:
            return cmd.make_response(
                ResponseCode.ILLEGAL_OPERATION,
                remark="recall failed, broker service not available",
            )
        due = int(handle.due_ms) if handle.due_ms.lstrip("-").isdigit() else -1
        left_ms = due - self._clock.now_ms()
        if left_ms <= 0 or left_ms >= config.timer_max_delay * 1000:
            return cmd.make_response(
                ResponseCode.ILLEGAL_OPERATION, remark="recall failed, timestamp invalid"
            )
        try:
            self._writer.store_or_park(self._cancel_record(conn, h, handle))
        except TimerRefused as exc:
            return cmd.make_response(exc.refusal.code, remark=exc.refusal.remark)
        except (OSError, ClientClosedError, LocalProtocolError) as exc:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"recall failed, execute error: {exc}"
            )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"msgId": handle.message_id})

    def _cancel_record(
        self, conn: Connection, h: RecallMessageRequestHeader, handle: RecallHandle
    ) -> MessageRecord:
        # RecallMessageProcessor.buildMessage: body "0", the recall tag, queue 0, due at the
        # handle's time, naming the message to cancel.
        now = self._clock.now_ms()
        props = {
            mp.TAGS: RECALL_TAG,
            mp.TIMER_DEL_UNIQKEY: f"{handle.topic}+{handle.message_id}",
            mp.UNIQ_KEY: handle.message_id,
            mp.TIMER_DELIVER_MS: handle.due_ms,
            "BORN_TIMESTAMP": str(now),
            mp.CLUSTER: self._config.cluster_name,
        }
        if h.producer_group:
            props[mp.PGROUP] = h.producer_group
        return self._record(
            conn,
            topic=handle.topic,
            queue_id=0,
            body=b"0",
            flag=0,
            sys_flag=0,
            born_timestamp=now,
            reconsume_times=0,
            props=props,
        )
