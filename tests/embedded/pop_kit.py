"""Raw POP requests for the embedded broker's POP tests (docs/protocol.md §12.3), over the
:class:`RawClient` of ``test_broker_kit``: every header field in the test's hands. Answers
are read with the client's own readers (``popped_records``, ``batch_acks``), which
tests/protocol/test_pop.py checks against Java's formats."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aiorocket._client.pop import batch_acks, popped_records
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.pop import (
    AckMessageRequestHeader,
    BatchAckMessageRequestBody,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    NotificationRequestHeader,
    PopMessageResponseHeader,
    ReceiptHandle,
)
from tests._harness.protocol import pop_header
from tests.embedded.test_broker_kit import RawClient

__all__ = ["Popped", "ack", "batch_ack", "change_invisible", "notification", "pop", "popped"]

BROKER = "broker-a"


@dataclass
class Popped:
    """One popped message: the record, its handle, and the topic to ack it on."""

    record: MessageRecord
    handle: ReceiptHandle
    #: the topic the message was popped from (its POP retry topic for a retried one)
    ack_topic: str


def popped(resp: RemotingCommand, topic: str, group: str) -> list[Popped]:
    """The messages of a SUCCESS answer to a POP of ``topic`` by ``group`` (read by the
    client's ``popped_records``, which tests/protocol/test_pop.py checks against Java's
    formats)."""
    header = PopMessageResponseHeader.from_ext(resp.ext_fields)
    return [
        Popped(rec, handle, handle.popped_topic(topic, group))
        for rec, handle in popped_records(header, resp.body, BROKER)
    ]


async def pop(
    c: RawClient,
    group: str,
    topic: str,
    *,
    queue_id: int = -1,
    max_msgs: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
    init_mode: int = 0,
    exp_type: str | None = None,
    exp: str | None = None,
    order: bool = False,
    attempt_id: str | None = None,
    born_time: int | None = None,
    timeout: float = 5.0,
) -> tuple[RemotingCommand, list[Popped]]:
    """POP_MESSAGE; the answer and, on SUCCESS, its messages."""
    header = pop_header(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        max_msg_nums=max_msgs,
        invisible_time=invisible_ms,
        poll_time=poll_ms,
        born_time=int(time.time() * 1000) if born_time is None else born_time,
        init_mode=init_mode,
        exp_type=exp_type,
        exp=exp,
        order=order,
        attempt_id=attempt_id,
    )
    resp = await c.request(RequestCode.POP_MESSAGE, header.to_ext(), timeout=timeout)
    return resp, popped(resp, topic, group) if resp.code == 0 else []


async def ack(c: RawClient, group: str, p: Popped, **override: Any) -> RemotingCommand:
    """ACK_MESSAGE of one popped message (fields of the header overridable)."""
    fields: dict[str, Any] = {
        "consumer_group": group,
        "topic": p.ack_topic,
        "queue_id": p.handle.queue_id,
        "extra_info": p.handle.text,
        "offset": p.handle.offset,
    }
    fields.update(override)
    header = AckMessageRequestHeader(**fields)
    return await c.request(RequestCode.ACK_MESSAGE, header.to_ext())


async def batch_ack(c: RawClient, group: str, topic: str, items: list[Popped]) -> RemotingCommand:
    """BATCH_ACK_MESSAGE of ``items`` of a POP of ``topic``, one ``BatchAck`` per checkpoint."""
    acks = tuple(batch_acks(group, [(topic, p.handle) for p in items]))
    body = BatchAckMessageRequestBody(broker_name=BROKER, acks=acks)
    return await c.request(RequestCode.BATCH_ACK_MESSAGE, body=body.to_json())


async def change_invisible(
    c: RawClient, group: str, p: Popped, invisible_ms: int
) -> tuple[RemotingCommand, ReceiptHandle | None]:
    """CHANGE_MESSAGE_INVISIBLETIME; the answer and the renewed handle (SUCCESS)."""
    header = ChangeInvisibleTimeRequestHeader(
        consumer_group=group,
        topic=p.ack_topic,
        queue_id=p.handle.queue_id,
        extra_info=p.handle.text,
        offset=p.handle.offset,
        invisible_time=invisible_ms,
    )
    resp = await c.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.to_ext())
    if resp.code != 0:
        return resp, None
    r = ChangeInvisibleTimeResponseHeader.from_ext(resp.ext_fields)
    return resp, p.handle.renewed(r.pop_time, r.invisible_time, r.revive_qid)


async def notification(
    c: RawClient,
    group: str,
    topic: str,
    *,
    queue_id: int = -1,
    poll_ms: int = 0,
    order: bool = False,
    timeout: float = 5.0,
) -> RemotingCommand:
    """NOTIFICATION."""
    header = NotificationRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        poll_time=poll_ms,
        born_time=int(time.time() * 1000),
        order=order,
    )
    return await c.request(RequestCode.NOTIFICATION, header.to_ext(), timeout=timeout)
