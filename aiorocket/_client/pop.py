"""The client's POP requests (RocketMQ 5.x, docs/protocol.md §12.3): pop, ack, batch ack,
change of invisible time, notification, and server-side assignment (Java
``MQClientAPIImpl.popMessageAsync`` / ``ackMessageAsync`` / ``changeInvisibleTimeAsync`` /
``notification`` / ``queryAssignment`` / ``setMessageRequestMode``).

`pop_response` is the one place a POP_MESSAGE response code is decoded into a
`PopStatus`; `popped_records` gives each popped record its receipt handle as
``processPopResponse`` does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import MessageRecord, decode_messages
from aiorocket._protocol.pop import (
    AckMessageRequestHeader,
    BatchAck,
    BatchAckMessageRequestBody,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    MessageQueueAssignment,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    QueryAssignmentRequestBody,
    QueryAssignmentResponseBody,
    ReceiptHandle,
    SetMessageRequestModeRequestBody,
    parse_offset_info,
    retry_mark,
)
from aiorocket._protocol.properties import POP_CK
from aiorocket.errors import BrokerError, RemoteProtocolError, broker_error

__all__ = [
    "PopResult",
    "PopStatus",
    "ack_message",
    "batch_ack",
    "change_invisible_time",
    "notification",
    "pop_message",
    "pop_response",
    "popped_records",
    "query_assignment",
    "set_message_request_mode",
]


class PopStatus(enum.IntEnum):
    """The response codes a pop answers with as a result rather than an error (Java
    ``PopStatus``)."""

    #: messages were popped
    FOUND = int(ResponseCode.SUCCESS)
    #: nothing to pop (``PULL_NOT_FOUND``)
    NO_NEW_MSG = int(ResponseCode.PULL_NOT_FOUND)
    #: a held pop found nothing in its poll time
    POLLING_NOT_FOUND = int(ResponseCode.POLLING_TIMEOUT)
    #: the broker holds too many pops already
    POLLING_FULL = int(ResponseCode.POLLING_FULL)


_STATUS_BY_CODE: Final = {int(s): s for s in PopStatus}


@dataclass(frozen=True, slots=True)
class PopResult:
    """A pop's status and what it popped: the records, each with its receipt handle."""

    status: PopStatus
    records: list[tuple[MessageRecord, ReceiptHandle]]
    #: messages left in the queues popped from (``restNum``)
    rest: int


def _unsupported(resp: RemotingCommand, what: str) -> BrokerError:
    # A 4.x broker answers code 3 to every 5.x request: say which feature is missing.
    return broker_error(
        resp.code, f"the broker does not serve {what} (RocketMQ 5.x POP): {resp.remark}"
    )


def _check(resp: RemotingCommand, what: str) -> RemotingCommand:
    if resp.code == ResponseCode.SUCCESS:
        return resp
    if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        raise _unsupported(resp, what)
    raise broker_error(resp.code, resp.remark)


def pop_response(resp: RemotingCommand, broker_name: str) -> PopResult:
    """Decode a POP_MESSAGE response (``MQClientAPIImpl.processPopResponse``).

    Raises:
        RequestCodeNotSupportedError: the broker does not know POP (a 4.x broker: code 3).
        BrokerError: a code that is not a `PopStatus`.
        RemoteProtocolError: malformed records or offset infos.
    """
    status = _STATUS_BY_CODE.get(resp.code)
    if status is None:
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise _unsupported(resp, "POP_MESSAGE")
        raise broker_error(resp.code, resp.remark)
    if status is not PopStatus.FOUND:
        rest = resp.ext_fields.get("restNum", "0")
        return PopResult(status, [], int(rest) if rest.isdigit() else 0)
    header = PopMessageResponseHeader.from_ext(resp.ext_fields)
    return PopResult(status, popped_records(header, resp.body, broker_name), header.rest_num)


def popped_records(
    header: PopMessageResponseHeader, body: bytes, broker_name: str
) -> list[tuple[MessageRecord, ReceiptHandle]]:
    """The records of a POP answer with their handles: each handle's checkpoint offset is its
    queue's ``startOffsetInfo`` entry and its offset the matching ``msgOffsetInfo`` one (the
    order of the queue's records), as ``processPopResponse`` builds ``POP_CK``; an ordered
    POP's ``orderCountInfo`` becomes the records' reconsume times.

    Raises:
        RemoteProtocolError: malformed records, or offset infos that do not cover them.
    """
    records = decode_messages(body)
    starts = parse_offset_info(header.start_offset_info)
    offsets = parse_offset_info(header.msg_offset_info)
    # Ordered POP: how often each message (or queue) was delivered; processPopResponse makes
    # it the message's reconsume times.
    counts = parse_offset_info(header.order_count_info)
    # A record's offset entry is the one at its rank among its queue's popped offsets.
    ranks: dict[str, list[int]] = {}
    for rec in records:
        ranks.setdefault(f"{retry_mark(rec.topic)}@{rec.queue_id}", []).append(rec.queue_offset)
    for ranked in ranks.values():
        ranked.sort()
    seen: dict[str, int] = {}
    out: list[tuple[MessageRecord, ReceiptHandle]] = []
    for rec in records:
        given = rec.properties.get(POP_CK)
        if given is not None:
            # A retried message: the broker re-encoded it under the original topic and wrote
            # its handle itself (popResponseReturnActualRetryTopic off, the 5.x default).
            out.append((rec, ReceiptHandle.parse(given)))
            continue
        mark = retry_mark(rec.topic)
        key = f"{mark}@{rec.queue_id}"
        if starts:
            start = starts.get(key)
            listed = offsets.get(key)
            i = ranks[key].index(rec.queue_offset)
            if start is None or listed is None or i >= len(listed):
                raise RemoteProtocolError(
                    f"POP answer lists no offsets for queue {rec.queue_id} of {rec.topic}"
                )
            ck_offset, offset = start[0], listed[i]
        else:
            # Brokers before 4.9.3 sent no offset infos: one checkpoint per queue at its first
            # record (the branch of processPopResponse without startOffsetInfo).
            ck_offset = seen.setdefault(key, rec.queue_offset)
            offset = rec.queue_offset
        if counts:
            count = counts.get(f"{mark}@qo{rec.queue_id}%{offset}") or counts.get(key)
            if count and count[0] > 0:
                rec.reconsume_times = count[0]
        handle = ReceiptHandle(
            ck_offset,
            header.pop_time,
            header.invisible_time,
            header.revive_qid,
            mark,
            broker_name,
            rec.queue_id,
            offset,
        )
        out.append((rec, handle))
    return out


async def pop_message(
    client: ClientInstance,
    addr: str,
    broker_name: str,
    header: PopMessageRequestHeader,
    *,
    timeout: float,
) -> PopResult:
    """POP_MESSAGE (200050); ``timeout`` covers the broker's hold (``pollTime``) too.

    Raises:
        RequestCodeNotSupportedError, BrokerError, RemoteProtocolError: as `pop_response`.
        TransportError: the connection failed or timed out.
    """
    cmd = RemotingCommand.request(RequestCode.POP_MESSAGE, header.to_ext())
    return pop_response(await client.invoke(addr, cmd, timeout=timeout), broker_name)


async def ack_message(client: ClientInstance, addr: str, header: AckMessageRequestHeader) -> None:
    """ACK_MESSAGE (200051).

    Raises:
        RequestCodeNotSupportedError: the broker does not know POP (a 4.x broker).
        BrokerError: the broker refused (an unknown topic, an offset outside the queue).
        TransportError: the connection failed or timed out.
    """
    cmd = RemotingCommand.request(RequestCode.ACK_MESSAGE, header.to_ext())
    _check(await client.invoke(addr, cmd), "ACK_MESSAGE")


async def batch_ack(client: ClientInstance, addr: str, body: BatchAckMessageRequestBody) -> None:
    """BATCH_ACK_MESSAGE (200151): several checkpoints' acks in one request.

    Raises:
        As `ack_message`.
    """
    cmd = RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, body=body.to_json())
    _check(await client.invoke(addr, cmd), "BATCH_ACK_MESSAGE")


def batch_acks(group: str, handles: list[tuple[str, ReceiptHandle]]) -> list[BatchAck]:
    """Group ``(topic, handle)`` pairs into one `BatchAck` per checkpoint (Java
    ``BatchAck``: the offsets as bits above the checkpoint's start offset)."""
    by_ck: dict[tuple[str, str, int, int, int, int, int], set[int]] = {}
    for topic, h in handles:
        key = (topic, h.retry, h.queue_id, h.ck_offset, h.revive_qid, h.pop_time, h.invisible_time)
        by_ck.setdefault(key, set()).add(h.offset - h.ck_offset)
    return [
        BatchAck(
            consumer_group=group,
            topic=topic,
            retry=retry,
            start_offset=ck,
            queue_id=qid,
            revive_queue_id=rqid,
            pop_time=pop_time,
            invisible_time=invisible,
            bits=frozenset(bits),
        )
        for (topic, retry, qid, ck, rqid, pop_time, invisible), bits in by_ck.items()
    ]


async def change_invisible_time(
    client: ClientInstance, addr: str, header: ChangeInvisibleTimeRequestHeader
) -> ChangeInvisibleTimeResponseHeader:
    """CHANGE_MESSAGE_INVISIBLETIME (200053); the answer names the new handle's pop time.

    Raises:
        As `ack_message`.
    """
    cmd = RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext())
    resp = _check(await client.invoke(addr, cmd), "CHANGE_MESSAGE_INVISIBLETIME")
    return ChangeInvisibleTimeResponseHeader.from_ext(resp.ext_fields)


async def notification(
    client: ClientInstance, addr: str, header: NotificationRequestHeader, *, timeout: float
) -> bool:
    """NOTIFICATION (200054): held up to ``pollTime`` until the queue has a message for the
    group; whether it has. A broker holding too many answers at once with ``False``
    (``pollingFull``).

    Raises:
        As `ack_message`.
    """
    cmd = RemotingCommand.request(RequestCode.NOTIFICATION, header.to_ext())
    resp = await client.invoke(addr, cmd, timeout=timeout)
    if resp.code == ResponseCode.POLLING_TIMEOUT:
        return False
    resp = _check(resp, "NOTIFICATION")
    return NotificationResponseHeader.from_ext(resp.ext_fields).has_msg


async def query_assignment(
    client: ClientInstance, addr: str, body: QueryAssignmentRequestBody
) -> tuple[MessageQueueAssignment, ...] | None:
    """QUERY_ASSIGNMENT (400): the queues the broker assigns this client, with their mode;
    ``None`` when the broker cannot assign (unknown topic or group).

    Raises:
        RequestCodeNotSupportedError: the broker does not assign (a 4.x broker).
        BrokerError, TransportError.
    """
    cmd = RemotingCommand.request(RequestCode.QUERY_ASSIGNMENT, body=body.to_json())
    resp = _check(await client.invoke(addr, cmd), "QUERY_ASSIGNMENT")
    if not resp.body:
        return None
    return QueryAssignmentResponseBody.from_json(resp.body).message_queue_assignments


async def set_message_request_mode(
    client: ClientInstance, addr: str, body: SetMessageRequestModeRequestBody
) -> None:
    """SET_MESSAGE_REQUEST_MODE (401): how a group reads a topic from now on
    (``mqadmin setConsumeMode``).

    Raises:
        As `query_assignment`.
    """
    cmd = RemotingCommand.request(RequestCode.SET_MESSAGE_REQUEST_MODE, body=body.to_json())
    _check(await client.invoke(addr, cmd), "SET_MESSAGE_REQUEST_MODE")
