"""Send statuses: the response codes of a stored message and their `SendStatus`
(``MQClientAPIImpl.processSendResponse``); any other code is the broker's refusal."""

from __future__ import annotations

import pytest

from aiorocket import Message, Producer, SendStatus
from aiorocket._client.send import SEND_STATUS_BY_CODE, send_response
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import BrokerError, SystemBusyError, TopicNotExistError

# a sync flush that cannot finish in time: the broker stores, then answers code 10
pytestmark = pytest.mark.broker(flush="sync", sync_flush_timeout=1e-6)

_HEADER = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "3", "queueOffset": "41"}


def _response(code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2)
    return request.make_response(code, ext_fields=ext, remark="refused")


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ResponseCode.SUCCESS, SendStatus.SEND_OK),
        (ResponseCode.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_DISK_TIMEOUT),
        (ResponseCode.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE),
        (ResponseCode.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
    ],
)
def test_a_stored_message_s_code_is_its_status(code: ResponseCode, status: SendStatus) -> None:
    resp = send_response(_response(code, _HEADER))
    assert resp.status is status
    assert (resp.header.msg_id, resp.header.queue_id, resp.header.queue_offset) == (
        _HEADER["msgId"],
        3,
        41,
    )


def test_every_status_has_one_code() -> None:
    assert sorted(s.name for s in SEND_STATUS_BY_CODE.values()) == sorted(
        s.name for s in SendStatus
    )
    assert SendStatus.SEND_OK.value == "SEND_OK"  # the Java name, as before


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (ResponseCode.SYSTEM_BUSY, SystemBusyError),
        (ResponseCode.TOPIC_NOT_EXIST, TopicNotExistError),
        (ResponseCode.MESSAGE_ILLEGAL, BrokerError),
    ],
)
def test_any_other_code_is_a_refusal(code: ResponseCode, error: type[BrokerError]) -> None:
    with pytest.raises(error) as caught:
        send_response(_response(code))
    assert caught.value.code == code


async def test_a_flush_timeout_is_a_stored_message_with_its_status(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg", retries=0) as producer:
        slow = await producer.send(Message("Flush", b"x"))
        again = await producer.send(Message("Flush", b"y"), queue=slow.queue)
    assert slow.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert again.status is SendStatus.FLUSH_DISK_TIMEOUT
    # stored all the same: the next message of its queue comes after it
    assert again.queue_offset == slow.queue_offset + 1
