"""Send results: the response codes a send answers with as a result rather than an error, and
their [`SendStatus`][aiorocket.SendStatus] (Java ``MQClientAPIImpl.processSendResponse``).

`send_response` is the one place a SEND_MESSAGE response code is decoded into a status
(docs/protocol.md §3.1: 0, 10, 11 and 12 mean the message was stored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aiorocket._protocol.codes import ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import SendMessageResponseHeader
from aiorocket.errors import broker_error
from aiorocket.models import SendStatus

__all__ = ["SEND_STATUS_BY_CODE", "SendResponse", "send_response"]

#: the response codes of a stored message, and the status each means (processSendResponse)
SEND_STATUS_BY_CODE: Final[dict[int, SendStatus]] = {
    int(ResponseCode.SUCCESS): SendStatus.SEND_OK,
    int(ResponseCode.FLUSH_DISK_TIMEOUT): SendStatus.FLUSH_DISK_TIMEOUT,
    int(ResponseCode.SLAVE_NOT_AVAILABLE): SendStatus.SLAVE_NOT_AVAILABLE,
    int(ResponseCode.FLUSH_SLAVE_TIMEOUT): SendStatus.FLUSH_SLAVE_TIMEOUT,
}


@dataclass(frozen=True, slots=True)
class SendResponse:
    """A stored message's status and the response header saying where it went."""

    status: SendStatus
    header: SendMessageResponseHeader


def send_response(resp: RemotingCommand) -> SendResponse:
    """Decode a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE / SEND_REPLY_MESSAGE_V2 response.

    Raises:
        BrokerError: a code that is not in `SEND_STATUS_BY_CODE`: the message was not
            stored.
    """
    # A dict lookup, not a chain of comparisons: this runs once per send.
    status = SEND_STATUS_BY_CODE.get(resp.code)
    if status is None:
        raise broker_error(resp.code, resp.remark)
    return SendResponse(status, SendMessageResponseHeader.from_ext(resp.ext_fields))
