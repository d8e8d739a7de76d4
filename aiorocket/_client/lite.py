"""The client's lite-topic requests (RocketMQ 5.5, docs/protocol.md §12.8): LITE_SUBSCRIPTION_CTL
and POP_LITE_MESSAGE, and the reader of a POP_LITE_MESSAGE answer (Java
``MQClientAPIExt.syncLiteSubscriptionAsync`` / ``popLiteMessageAsync`` and
``MQClientAPIImpl.processPopLiteResponse``). Acks and changes of invisible time are the POP ones
(``aiorocket/_client/pop.py``) with the header's ``liteTopic`` set.
"""

from __future__ import annotations

import logging

from aiorocket._client.instance import ClientInstance
from aiorocket._client.pop import PopResult, PopStatus
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.lite import (
    LiteSubscriptionCtlRequestBody,
    PopLiteMessageRequestHeader,
    PopLiteMessageResponseHeader,
    parse_lite_order_counts,
)
from aiorocket._protocol.message import MessageRecord, decode_messages
from aiorocket._protocol.pop import ReceiptHandle
from aiorocket.errors import broker_error

__all__ = ["lite_subscription_ctl", "pop_lite_message", "popped_lite_records"]

log = logging.getLogger("aiorocket.consumer")

# The codes a POP_LITE_MESSAGE answers with as a result (processPopLiteResponse).
_STATUS = {
    int(ResponseCode.SUCCESS): PopStatus.FOUND,
    int(ResponseCode.POLLING_FULL): PopStatus.POLLING_FULL,
    int(ResponseCode.POLLING_TIMEOUT): PopStatus.POLLING_NOT_FOUND,
    int(ResponseCode.PULL_NOT_FOUND): PopStatus.POLLING_NOT_FOUND,
}


async def lite_subscription_ctl(
    client: ClientInstance, addr: str, body: LiteSubscriptionCtlRequestBody
) -> None:
    """LITE_SUBSCRIPTION_CTL (200071): change this client's lite subscriptions at one broker.

    Raises:
        RequestCodeNotSupportedError: the server does not serve lite topics (code 3: a broker
            before 5.5, or a proxy's remoting port).
        BrokerError: the broker refused (quota 2018, a group that may not consume, 604).
        TransportError: the connection failed or timed out.
    """
    cmd = RemotingCommand.request(RequestCode.LITE_SUBSCRIPTION_CTL, body=body.to_json())
    resp = await client.invoke(addr, cmd)
    if resp.code != ResponseCode.SUCCESS:
        raise broker_error(resp.code, resp.remark)


async def pop_lite_message(
    client: ClientInstance,
    addr: str,
    broker_name: str,
    header: PopLiteMessageRequestHeader,
    *,
    timeout: float,
) -> PopResult:
    """POP_LITE_MESSAGE (200070); ``timeout`` covers the broker's hold (``pollTime``) too.

    Raises:
        RequestCodeNotSupportedError: the server does not serve lite topics (code 3).
        BrokerError: another refusal (the topic is not LITE, the group is not bound to it).
        RemoteProtocolError: malformed records.
        TransportError: the connection failed or timed out.
    """
    cmd = RemotingCommand.request(RequestCode.POP_LITE_MESSAGE, header.to_ext())
    resp = await client.invoke(addr, cmd, timeout=timeout)
    status = _STATUS.get(resp.code)
    if status is None:
        raise broker_error(resp.code, resp.remark)
    if status is not PopStatus.FOUND:
        return PopResult(status, [], 0)
    answer = PopLiteMessageResponseHeader.from_ext(resp.ext_fields)
    return PopResult(status, popped_lite_records(answer, resp.body, broker_name), 0)


def popped_lite_records(
    header: PopLiteMessageResponseHeader, body: bytes, broker_name: str
) -> list[tuple[MessageRecord, ReceiptHandle]]:
    """The records of a POP_LITE_MESSAGE answer with their handles, as
    ``processPopLiteResponse`` builds ``POP_CK``: ``0 <popTime> <invisibleTime> <reviveQid> 0
    <broker> 0 <offset>``, the offset being the record's ``INNER_MULTI_QUEUE_OFFSET`` (its
    offset in the lite topic), and ``orderCountInfo`` the records' reconsume times. A record
    that does not name exactly one lite topic's queue cannot be acked and is left out (logged).

    Raises:
        RemoteProtocolError: malformed records.
    """
    records = decode_messages(body)
    counts = parse_lite_order_counts(header.order_count_info, len(records))
    out: list[tuple[MessageRecord, ReceiptHandle]] = []
    for i, rec in enumerate(records):
        queues = rec.properties.get(mp.INNER_MULTI_DISPATCH, "").split(mp.LMQ_SEPARATOR)
        offsets = rec.properties.get(mp.INNER_MULTI_QUEUE_OFFSET, "").split(mp.LMQ_SEPARATOR)
        if len(queues) != 1 or len(offsets) != 1 or not offsets[0].isdigit():
            log.warning(
                "a popped lite message (%s, queue offset %d) names no single lite queue; skipped",
                rec.topic,
                rec.queue_offset,
            )
            continue
        offset = int(offsets[0])
        rec.reconsume_times = counts[i] if counts is not None else 0
        handle = ReceiptHandle(
            0,
            header.pop_time,
            header.invisible_time,
            header.revive_qid,
            "0",
            broker_name,
            0,
            offset,
        )
        out.append((rec, handle))
    return out
