"""Recalling a timer message (RocketMQ 5.3.2+): the handle a send answers with, and the
RECALL_MESSAGE (370) request and response headers (docs/protocol.md §12.7).

A broker answers the send of a timer message (not a batch, not a retry) with a recall handle:
Java's ``RecallMessageHandle.HandleV1``, URL-safe base64 of ``"v1 <topic> <brokerName>
<due ms> <UNIQ_KEY>"``. RECALL_MESSAGE with that handle makes the broker park a cancelling
timer message (``TIMER_DEL_UNIQKEY``) due at the same time, so the original is never
delivered; once the due time has passed the broker refuses (ILLEGAL_OPERATION).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final

from aiorocket._protocol.schema import Header, header_class, wire
from aiorocket.errors import RemoteProtocolError

__all__ = ["RecallHandle", "RecallMessageRequestHeader", "RecallMessageResponseHeader"]

_VERSION_1: Final = "v1"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """A decoded recall handle (``RecallMessageHandle.HandleV1``).

    Attributes:
        topic: the message's topic (its wire name, namespace included).
        broker_name: the broker that parked it.
        due_ms: when it is due (``TIMER_OUT_MS`` + 1), as the decimal text Java sends.
        message_id: its ``UNIQ_KEY``.
    """

    topic: str
    broker_name: str
    due_ms: str
    message_id: str

    def encode(self) -> str:
        """The handle as brokers send and take it."""
        raw = " ".join((_VERSION_1, self.topic, self.broker_name, self.due_ms, self.message_id))
        return base64.urlsafe_b64encode(raw.encode()).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> RecallHandle:
        """Parse a handle (``RecallMessageHandle.decodeHandle``).

        Raises:
            RemoteProtocolError: not a v1 handle (Java: "recall handle is invalid").
        """
        try:
            raw = base64.urlsafe_b64decode(text.encode("ascii")).decode("utf-8")
        except (binascii.Error, UnicodeError, ValueError):
            raise RemoteProtocolError("recall handle is invalid") from None
        items = raw.split(" ")
        if len(items) < 5 or items[0] != _VERSION_1:
            raise RemoteProtocolError("recall handle is invalid")
        return cls(items[1], items[2], items[3], items[4])


@header_class
class RecallMessageRequestHeader(Header):
    """RECALL_MESSAGE (370) — Java's ``RecallMessageRequestHeader``."""

    producer_group: str | None = wire("producerGroup", default=None)
    topic: str = wire("topic", required=True)
    recall_handle: str = wire("recallHandle", required=True)
    #: the broker the handle names: a proxy routes by it
    broker_name: str | None = wire("bname", default=None)


@header_class
class RecallMessageResponseHeader(Header):
    """The response to RECALL_MESSAGE: the recalled message's ``UNIQ_KEY``."""

    msg_id: str = wire("msgId", required=True)
