"""Recalling a timer message before it is due: RECALL_MESSAGE (RocketMQ 5.3.2+, Java's
``DefaultMQProducer.recallMessage``; docs/protocol.md §12.7).

The handle comes from the send's answer ([`SendResult.recall_handle`][aiorocket.SendResult]);
it names the broker that parked the message, and the request goes to that broker's master
(through a proxy, by its ``bname``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from aiorocket._client.instance import ClientInstance
from aiorocket._names import now_ms
from aiorocket._protocol.codes import VERSION_V5_3_2, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.recall import (
    RecallHandle,
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
)
from aiorocket.errors import (
    ConfigurationError,
    IllegalOperationError,
    RemoteProtocolError,
    UnsupportedFeatureError,
    broker_error,
)
from aiorocket.models import SendResult

__all__ = ["recall_message"]


async def _require_recall(client: ClientInstance, addr: str) -> None:
    version = client.server_version(addr)
    if version is not None and version < VERSION_V5_3_2:
        raise UnsupportedFeatureError(
            f"broker {addr} answers as MQVersion ordinal {version}, older than 5.3.2 "
            f"({VERSION_V5_3_2}): it cannot recall messages",
            broker=addr,
            version=version,
            needed=VERSION_V5_3_2,
        )


def _already_due(msg_id: str, due_ms: int, remark: str | None = None) -> IllegalOperationError:
    when = datetime.fromtimestamp(due_ms / 1000, UTC).isoformat(timespec="milliseconds")
    text = f"message {msg_id} was due at {when}: it has been delivered and cannot be recalled"
    if remark:
        text += f" (the broker answered: {remark})"
    return IllegalOperationError(text)


async def recall_message(
    client: ClientInstance,
    target: SendResult | str,
    *,
    group: str,
    wire_topic: str | None,
    timeout: float,
) -> str:
    """RECALL_MESSAGE for ``target`` (a send result or its recall handle); the recalled
    message's id. ``wire_topic``, if given, must be the handle's topic.

    Raises:
        ConfigurationError: no handle (not a timer message), a malformed one, another topic.
        UnsupportedFeatureError: the broker is older than 5.3.2.
        IllegalOperationError: the message is already due (delivered).
        BrokerError, TransportError: the broker refused or could not be reached.
    """
    if isinstance(target, SendResult):
        text = target.recall_handle
        if text is None:
            addr = await client.find_broker(
                target.queue.broker_name, wire_topic or target.queue.topic, master=True
            )
            await _require_recall(client, addr)
            raise ConfigurationError(
                f"message {target.msg_id} has no recall handle: only a timer message "
                "(send(..., deliver_at= or deliver_after=)) can be recalled"
            )
    else:
        text = target
    try:
        handle = RecallHandle.decode(text)
    except RemoteProtocolError:
        raise ConfigurationError(f"{text!r} is not a recall handle") from None
    if wire_topic is not None and wire_topic != handle.topic:
        raise ConfigurationError(
            f"the recall handle is for topic {handle.topic!r}, not {wire_topic!r}"
        )
    due = int(handle.due_ms) if handle.due_ms.isdigit() else 0
    if due <= now_ms():
        raise _already_due(handle.message_id, due)
    addr = await client.find_broker(handle.broker_name, handle.topic, master=True)
    await _require_recall(client, addr)
    header = RecallMessageRequestHeader(
        producer_group=group,
        topic=handle.topic,
        recall_handle=text,
        broker_name=handle.broker_name,
    )
    cmd = RemotingCommand.request(RequestCode.RECALL_MESSAGE, header.to_ext())
    resp = await client.invoke(addr, cmd, timeout=timeout)
    if resp.code == ResponseCode.SUCCESS:
        return RecallMessageResponseHeader.from_ext(resp.ext_fields).msg_id
    if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        await _require_recall(client, addr)
    if resp.code == ResponseCode.ILLEGAL_OPERATION and "timestamp invalid" in (resp.remark or ""):
        raise _already_due(handle.message_id, due, resp.remark)
    if resp.code == ResponseCode.NO_PERMISSION and "forbidden" in (resp.remark or ""):
        exc = broker_error(resp.code, resp.remark)
        exc.add_note("the broker does not allow recalls: set recallMessageEnable=true")
        raise exc
    raise broker_error(resp.code, resp.remark)
