"""Request/reply on the requester's and the responder's side (docs/protocol.md §13).

Java's ``DefaultMQProducerImpl.request``, ``RequestFutureHolder`` and ``MessageUtil``:

* a request is an ordinary message carrying ``CORRELATION_ID`` (a fresh UUID),
  ``REPLY_TO_CLIENT`` (the requester's client id) and ``TTL`` (its timeout in ms);
* the responder answers with `create_reply_message`: a message to
  ``<cluster>_REPLY_TOPIC`` (the cluster from the request's ``CLUSTER``, which the broker
  adds to every stored message) with ``MSG_TYPE=reply`` and the request's three properties,
  sent with SEND_REPLY_MESSAGE_V2 (325);
* the broker pushes the reply to the requester (PUSH_REPLY_MESSAGE_TO_CLIENT, 326), which
  `PendingRequests` matches to the waiting request by its ``CORRELATION_ID``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiorocket._names import now_ms, reply_topic, validate_user_property
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import MessageSysFlag, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import ReplyMessageRequestHeader
from aiorocket._protocol.message import MessageRecord, inflate_body
from aiorocket._remoting import Connection
from aiorocket.errors import NotARequestError, RemoteProtocolError, ReplyTimeoutError
from aiorocket.models import Message, ReceivedMessage

__all__ = [
    "PendingRequests",
    "create_reply_message",
    "is_request",
    "new_correlation_id",
    "reply_record",
    "request_reply",
]

log = logging.getLogger("aiorocket.producer")


def new_correlation_id() -> str:
    """A fresh ``CORRELATION_ID`` (Java's ``CorrelationIdUtil``: a random UUID)."""
    return str(uuid.uuid4())


def is_request(msg: ReceivedMessage) -> bool:
    """Whether ``msg`` asks for a reply: it carries ``CORRELATION_ID`` and ``REPLY_TO_CLIENT``
    (and the broker's ``CLUSTER``), and is no reply itself."""
    props = msg.properties
    return (
        mp.CORRELATION_ID in props
        and mp.REPLY_TO_CLIENT in props
        and mp.CLUSTER in props
        and props.get(mp.MSG_TYPE) != mp.REPLY_MESSAGE_FLAG
    )


def create_reply_message(
    request: ReceivedMessage,
    body: bytes,
    *,
    tags: str | None = None,
    keys: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
) -> Message:
    """The reply to ``request`` carrying ``body`` (Java's ``MessageUtil.createReplyMessage``);
    send it with [Producer.send][aiorocket.Producer.send] (or use
    [Producer.reply][aiorocket.Producer.reply]).

    Raises:
        NotARequestError: ``request`` has no ``CLUSTER``, ``REPLY_TO_CLIENT`` or
            ``CORRELATION_ID`` property: nobody waits for a reply to it.
    """
    props = request.properties
    cluster = props.get(mp.CLUSTER)
    missing = [k for k in (mp.CLUSTER, mp.REPLY_TO_CLIENT, mp.CORRELATION_ID) if k not in props]
    if cluster is None or missing:
        raise NotARequestError(
            f"message {request.msg_id} of {request.topic} is no request: it has no "
            f"{', '.join(missing)} property"
        )
    fields = {validate_user_property(k): v for k, v in (properties or {}).items()}
    fields[mp.MSG_TYPE] = mp.REPLY_MESSAGE_FLAG
    fields[mp.CORRELATION_ID] = props[mp.CORRELATION_ID]
    fields[mp.REPLY_TO_CLIENT] = props[mp.REPLY_TO_CLIENT]
    if mp.TTL in props:
        fields[mp.TTL] = props[mp.TTL]
    # the reply properties are system ones (MessageUtil.createReplyMessage sets them directly)
    return Message.with_properties(reply_topic(cluster), body, fields, tags=tags, keys=list(keys))


def _host(text: str) -> tuple[str, int]:
    # Java's SocketAddress.toString(): "hostname/ip:port" or "/ip:port".
    host, _, port = text.rpartition(":")
    host = host.rpartition("/")[2] or "127.0.0.1"
    try:
        return host, int(port)
    except ValueError:
        return host, 0


def reply_record(cmd: RemotingCommand) -> MessageRecord:
    """The reply a PUSH_REPLY_MESSAGE_TO_CLIENT carries, as a record (Java's
    ``ClientRemotingProcessor.receiveReplyMessage``): the body inflated, ``ARRIVE_TIME`` set.

    Raises:
        RemoteProtocolError: a malformed header or a body that does not inflate.
    """
    h = ReplyMessageRequestHeader.from_ext(cmd.ext_fields)
    body = cmd.body
    if h.sys_flag & MessageSysFlag.COMPRESSED:
        body = inflate_body(body, h.sys_flag)
    props = mp.decode_properties(h.properties or "")
    props[mp.REPLY_ARRIVE_TIME] = str(now_ms())
    born_host, born_port = _host(h.born_host)
    store_host, store_port = _host(h.store_host)
    return MessageRecord(
        topic=h.topic,
        body=body,
        queue_id=h.queue_id,
        flag=h.flag,
        queue_offset=0,
        commit_log_offset=0,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        born_host=born_host,
        born_port=born_port,
        store_timestamp=h.store_timestamp,
        store_host=store_host,
        store_port=store_port,
        reconsume_times=h.reconsume_times or 0,
        prepared_transaction_offset=0,
        properties=props,
    )


class PendingRequests:
    """The requests of one producer waiting for their replies, by ``CORRELATION_ID`` (Java's
    ``RequestFutureHolder``), and the count of replies that matched none."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[ReceivedMessage]] = {}
        #: replies that matched no waiting request (it timed out, or was never ours)
        self.unmatched = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def expect(self, correlation_id: str) -> asyncio.Future[ReceivedMessage]:
        """A future the reply to ``correlation_id`` completes."""
        fut: asyncio.Future[ReceivedMessage] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = fut
        return fut

    def forget(self, correlation_id: str) -> None:
        """Stop waiting for ``correlation_id`` (done, failed or timed out)."""
        self._waiting.pop(correlation_id, None)

    def deliver(self, msg: ReceivedMessage) -> bool:
        """Complete the request ``msg`` replies to; False (counted) when none waits for it."""
        cid = msg.properties.get(mp.CORRELATION_ID, "")
        fut = self._waiting.pop(cid, None)
        if fut is None or fut.done():
            self.unmatched += 1
            log.warning(
                "reply %s from %s matches no waiting request (timed out?)", cid, msg.born_host
            )
            return False
        fut.set_result(msg)
        return True

    async def on_push(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Serve PUSH_REPLY_MESSAGE_TO_CLIENT: answer SUCCESS once the reply is taken (matched
        or not), SYSTEM_ERROR when it cannot be read."""
        try:
            rec = reply_record(cmd)
        except RemoteProtocolError as exc:
            log.warning("malformed reply from %s: %s", conn.peer, exc)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark="process reply message fail")
        self.deliver(ReceivedMessage(rec, topic=rec.topic, broker_name=""))
        return cmd.make_response(ResponseCode.SUCCESS)


#: ``send(properties, timeout)``: send the request with these extra properties, within
#: ``timeout`` seconds; returns once the broker stored it.
SendRequest = Callable[[dict[str, str], float], Awaitable[object]]


async def request_reply(
    pending: PendingRequests,
    send: SendRequest,
    *,
    client_id: str,
    topic: str,
    timeout: float,
    prepare: Callable[[], Awaitable[None]] | None = None,
) -> ReceivedMessage:
    """Run ``prepare``, send a request through ``send`` and wait for its reply, all within
    ``timeout`` (``DefaultMQProducerImpl.request``: the preparation's and the send's time
    count against the wait).

    Raises:
        ReplyTimeoutError: the request was stored but no reply came in time.
        RocketError: the request could not be sent (as ``send`` or ``prepare`` raise).
    """
    cid = new_correlation_id()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    if prepare is not None:
        await prepare()
    reply = pending.expect(cid)
    fields = {
        mp.CORRELATION_ID: cid,
        mp.REPLY_TO_CLIENT: client_id,
        mp.TTL: str(int(timeout * 1000)),
    }
    try:
        await send(fields, max(deadline - loop.time(), 0.001))
        try:
            return await asyncio.wait_for(reply, max(deadline - loop.time(), 0.0))
        except TimeoutError:
            raise ReplyTimeoutError(
                f"the request to {topic} was stored, but no reply came within {timeout:g} s: "
                "no responder answered it in time (is a consumer of the topic replying?)",
                topic=topic,
                correlation_id=cid,
            ) from None
    finally:
        pending.forget(cid)
        if not reply.done():
            reply.cancel()
