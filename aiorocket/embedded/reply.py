"""Replies to requests: SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325), Java's
``ReplyMessageProcessor`` (docs/protocol.md §13).

A responder sends its reply to ``<cluster>_REPLY_TOPIC``; the broker pushes it at once
(PUSH_REPLY_MESSAGE_TO_CLIENT, 326) to the connection of the producer whose client id the
reply's ``REPLY_TO_CLIENT`` names, and with ``store_reply_messages`` (Java's
``storeReplyMessageEnable``, on by default) also stores it in the reply topic. The answer to
the responder says whether the push succeeded; storing does not change that.
"""

from __future__ import annotations

import logging

from aiorocket._names import now_ms
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
)
from aiorocket._protocol.msgid import make_offset_msg_id
from aiorocket._remoting import Connection
from aiorocket.embedded.context import handles
from aiorocket.embedded.send import SendChecks
from aiorocket.errors import (
    ClientClosedError,
    LocalProtocolError,
    MessageTooLargeError,
    RocketError,
)

__all__ = ["ReplyProcessor"]

log = logging.getLogger("aiorocket.embedded")


class ReplyProcessor(SendChecks):
    """Serves SEND_REPLY_MESSAGE and SEND_REPLY_MESSAGE_V2: push the reply to its requester,
    store it too when configured.

    Args:
        ctx: as for `SendChecks`; the client registrations find the requester's channel.
    """

    @handles(RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2)
    async def reply(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Codes 324 and 325: the same checks as a send, then the push, then the store.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the topic table could not be written.
        """
        header = decode_send_header(cmd.code, cmd.ext_fields)
        queue_id = self._admit(cmd, header)
        if isinstance(queue_id, RemotingCommand):
            return queue_id
        props = mp.decode_properties(header.properties or "")
        remark = await self._push(conn, cmd, header, queue_id, props)
        ext = {
            # ReplyMessageProcessor.handlePushReplyResult: "0" keeps the client's decoder happy
            # when nothing is stored.
            "msgId": "0",
            "queueId": str(queue_id),
            "queueOffset": "0",
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        }
        if self._config.store_reply_messages:
            ext.update(self._keep(conn, cmd, header, queue_id, props))
        code = ResponseCode.SUCCESS if remark is None else ResponseCode.SYSTEM_ERROR
        return cmd.make_response(code, remark=remark, ext_fields=ext)

    async def _push(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        header: SendMessageRequestHeader,
        queue_id: int,
        props: dict[str, str],
    ) -> str | None:
        # ReplyMessageProcessor.pushReplyMessage: None when pushed, else why not (the remark).
        client_id = props.get(mp.REPLY_TO_CLIENT)
        if client_id is None:
            log.warning("a reply without %s cannot be pushed", mp.REPLY_TO_CLIENT)
            return f"reply message properties[{mp.REPLY_TO_CLIENT}] is null"
        channel = self._groups.find_producer(client_id)
        if not isinstance(channel, Connection):
            remark = f"push reply message fail, channel of <{client_id}> not found."
            log.warning(remark)
            return remark
        pushed = {**props, mp.REPLY_PUSH_TIME: str(now_ms())}
        host, port = self._store_address()
        push = ReplyMessageRequestHeader(
            producer_group=header.producer_group,
            topic=header.topic,
            default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums,
            queue_id=queue_id,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            flag=header.flag,
            properties=mp.encode_properties(pushed),
            reconsume_times=header.reconsume_times,
            unit_mode=header.unit_mode,
            # Java sends SocketAddress.toString(): "/ip:port"
            born_host=f"/{conn.peer[0]}:{conn.peer[1]}",
            store_host=f"/{host}:{port}",
            store_timestamp=now_ms(),
        )
        request = RemotingCommand.request(
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push.to_ext(), cmd.body
        )
        return await self._call(channel, client_id, request)

    async def _call(
        self, channel: Connection, client_id: str, request: RemotingCommand
    ) -> str | None:
        try:
            answer = await channel.request(request, timeout=self._config.call_client_timeout)
        except RocketError as exc:
            log.warning("push reply message to <%s> failed: %s", client_id, exc)
            return f"push reply message to {client_id}fail."
        if answer.code != ResponseCode.SUCCESS:
            log.warning("push reply message to <%s> answered %s", client_id, answer.remark)
            return f"push reply message to {client_id}fail."
        return None

    def _keep(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        header: SendMessageRequestHeader,
        queue_id: int,
        props: dict[str, str],
    ) -> dict[str, str]:
        # handlePutMessageResult: a stored reply's id and offset replace the placeholders; a
        # failed store is only logged (the push already answered the requester).
        rec = self._record(
            conn,
            topic=header.topic,
            queue_id=queue_id,
            body=cmd.body,
            flag=header.flag,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            reconsume_times=header.reconsume_times or 0,
            props=props,
        )
        try:
            result = self._writer.store_message(rec)
        except (OSError, ClientClosedError, LocalProtocolError, MessageTooLargeError) as exc:
            log.warning("cannot store the reply to %s: %s", props.get(mp.REPLY_TO_CLIENT), exc)
            return {}
        host, port = self._store_address()
        return {
            "msgId": make_offset_msg_id(host, port, result.commit_log_offset),
            "queueOffset": str(result.queue_offset),
        }
