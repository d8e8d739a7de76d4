"""Pull results: the request a pull loop repeats, the pull statuses, and the messages a pull
response holds (Java ``PullResult`` + ``PullAPIWrapper.processPullResult``).

`pull_response` is the one place a PULL_MESSAGE response code is decoded into a
`PullStatus` (docs/protocol.md §3.3).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from aiorocket._client.binary import BinaryRequestTemplate
from aiorocket._names import without_namespace
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import RequestTemplate
from aiorocket._protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.properties import RETRY_TOPIC, TAGS
from aiorocket._protocol.tags import TagFilter
from aiorocket.errors import broker_error
from aiorocket.models import ReceivedMessage

__all__ = ["PreparedPull", "PullResponse", "PullStatus", "pull_response", "to_received"]


class PullStatus(enum.IntEnum):
    """The response codes a pull answers with as a result rather than an error (Java
    ``PullStatus``, docs/protocol.md §3.3)."""

    #: messages were found from the offset on
    FOUND = int(ResponseCode.SUCCESS)
    #: the offset is the queue's end: nothing to read yet (``PULL_NOT_FOUND``)
    NO_NEW_MSG = int(ResponseCode.PULL_NOT_FOUND)
    #: entries exist but none matched the subscription (``PULL_RETRY_IMMEDIATELY``)
    NO_MATCHED_MSG = int(ResponseCode.PULL_RETRY_IMMEDIATELY)
    #: the offset is outside the queue (``PULL_OFFSET_MOVED``)
    OFFSET_ILLEGAL = int(ResponseCode.PULL_OFFSET_MOVED)


# A dict lookup, not PullStatus(code): this runs once per pull.
_STATUS_BY_CODE: Final = {int(s): s for s in PullStatus}


@dataclass(frozen=True, slots=True)
class PullResponse:
    """A pull's status, header and body (stored records)."""

    code: PullStatus
    header: PullMessageResponseHeader
    body: bytes


def pull_response(resp: RemotingCommand) -> PullResponse:
    """Decode a PULL_MESSAGE response.

    Raises:
        BrokerError: a code that is not a `PullStatus`.
    """
    status = _STATUS_BY_CODE.get(resp.code)
    if status is None:
        raise broker_error(resp.code, resp.remark)
    return PullResponse(status, PullMessageResponseHeader.from_ext(resp.ext_fields), resp.body)


_PULL_VARIABLE = ("queueOffset", "sysFlag", "commitOffset")


class PreparedPull:
    """A queue's PULL_MESSAGE with every field fixed but the offset, the flag and the commit
    offset: a pull loop sends the same request thousands of times, so its header is encoded
    once (`RequestTemplate`; the binary twin is made on first use by a client set to
    the binary dialect).

    Args:
        header: the request; its ``queue_offset``, ``sys_flag`` and ``commit_offset`` are
            replaced at each pull.
    """

    __slots__ = ("_binary", "template")

    def __init__(self, header: PullMessageRequestHeader) -> None:
        self.template = RequestTemplate(
            RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext()), _PULL_VARIABLE
        )
        self._binary: BinaryRequestTemplate | None = None

    @property
    def binary_template(self) -> BinaryRequestTemplate:
        """The same request in the binary header dialect."""
        if self._binary is None:
            self._binary = BinaryRequestTemplate(self.template.command((0, 0, 0)), _PULL_VARIABLE)
        return self._binary


def to_received(
    records: list[MessageRecord],
    *,
    broker_name: str,
    tag_filter: TagFilter | None,
    retry_queue: bool,
    namespace: str | None,
) -> list[ReceivedMessage]:
    """Turn pulled records into handler messages (``PullAPIWrapper.processPullResult`` +
    ``resetRetryAndNamespace``): drop those whose tag string does not match ``tag_filter``
    (``None`` or match-all keeps everything), take a retried message's topic from its
    ``RETRY_TOPIC`` property, and strip the client namespace from topics.

    This is the per-message hot path: no per-message call besides object creation.
    """
    if tag_filter is not None and not tag_filter.match_all:
        tags = tag_filter.tags
        records = [r for r in records if r.properties.get(TAGS) in tags]
    if not records:
        return []
    new = object.__new__
    cls = ReceivedMessage
    out: list[ReceivedMessage] = []
    append = out.append
    if retry_queue or namespace:
        # The few distinct wire topics of a pull, each stripped once.
        names: dict[str, str] = {}
        for r in records:
            topic = r.properties.get(RETRY_TOPIC, r.topic) if retry_queue else r.topic
            name = names.get(topic)
            if name is None:
                name = names[topic] = without_namespace(namespace, topic)
            m = new(cls)
            m._r = r
            m._topic = name
            m._broker_name = broker_name
            m._reconsume_times = r.reconsume_times
            append(m)
    else:
        for r in records:
            m = new(cls)
            m._r = r
            m._topic = r.topic
            m._broker_name = broker_name
            m._reconsume_times = r.reconsume_times
            append(m)
    return out
