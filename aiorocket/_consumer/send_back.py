"""Returning a consumed message to the broker for a later retry (Java
``DefaultMQPushConsumerImpl.sendMessageBack``; docs/protocol.md §6.6).

CONSUMER_SEND_MSG_BACK first: the broker stores the message in ``%RETRY%<group>`` with the
next delay level (or in ``%DLQ%<group>`` past ``max_reconsume_times``). If that fails, the
client resends the message itself into ``%RETRY%<group>`` with the properties Java's fallback
sets. Used by the push consumer's concurrent service and by ``PullConsumer.reconsume_later``.
"""

from __future__ import annotations

import logging
import random
import time

from aiorocket._client.instance import ClientInstance
from aiorocket._names import CREATE_TOPIC_KEY, retry_topic, wrap_namespace
from aiorocket._protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from aiorocket._protocol.properties import (
    DELAY,
    MAX_RECONSUME_TIMES,
    ORIGIN_MESSAGE_ID,
    RECONSUME_TIME,
    RETRY_TOPIC,
    TRAN_MSG,
    encode_properties,
)
from aiorocket.errors import BrokerError, TransportError
from aiorocket.models import MessageQueue, ReceivedMessage
from aiorocket.settings import ConsumerSettings

__all__ = ["SendBack"]

log = logging.getLogger("aiorocket.consumer")

#: the producer group of the client's own resends (Java MixAll.CLIENT_INNER_PRODUCER_GROUP)
_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"


class SendBack:
    """Sends failed messages of one consumer group back to the broker.

    Args:
        group: the wire consumer group (namespace applied).
    """

    def __init__(self, *, client: ClientInstance, group: str, settings: ConsumerSettings) -> None:
        self._client = client
        self._group = group
        self._settings = settings
        self._retry_topic = retry_topic(group)
        self._max_reconsume = settings.effective_max_reconsume_times

    async def send_back(self, msg: ReceivedMessage, delay_level: int, broker_name: str) -> bool:
        """Return ``msg`` for a later retry; True when it got there, False (logged) when
        neither the send-back nor the resend did."""
        try:
            await self.send_back_or_raise(msg, delay_level, broker_name)
        except (BrokerError, TransportError) as exc:
            log.warning("resend of %s to %s failed: %s", msg.msg_id, self._retry_topic, exc)
            return False
        return True

    async def send_back_or_raise(
        self, msg: ReceivedMessage, delay_level: int, broker_name: str
    ) -> None:
        """Return ``msg`` for a later retry: CONSUMER_SEND_MSG_BACK to the master of
        ``broker_name``, else a resend into ``%RETRY%<group>``.

        Raises:
            BrokerError, TransportError: the resend failed too (its error).
        """
        origin_topic = wrap_namespace(self._settings.namespace, msg.topic)
        try:
            await self.request(msg, delay_level, broker_name)
            return
        except (BrokerError, TransportError) as exc:
            log.warning("send-back of %s failed (%s); resending it", msg.msg_id, exc)
        await self._resend_to_retry_topic(msg, origin_topic, broker_name)

    async def request(
        self, msg: ReceivedMessage, delay_level: int, broker_name: str, *, topic: str | None = None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK of ``msg`` to the master of ``broker_name``: the broker
        stores it in ``%RETRY%<group>`` with ``delay_level``, or in ``%DLQ%<group>`` for level
        -1 or past ``max_reconsume_times``. No fallback. ``topic``: the wire topic whose route
        names the broker (default: the message's own), refreshed if its address is stale
        (`ClientInstance.call_broker`).

        Raises:
            BrokerError, TransportError: the request failed.
        """
        origin_topic = wrap_namespace(self._settings.namespace, msg.topic)
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=self._group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=origin_topic,
            unit_mode=False,
            max_reconsume_times=self._max_reconsume,
            broker_name=broker_name,
        )
        client, timeout = self._client, self._settings.send_back_timeout
        await client.call_broker(
            broker_name,
            topic or origin_topic,
            lambda addr: client.send_back(addr, header, timeout=timeout),
            master=True,
        )

    async def _resend_to_retry_topic(
        self, msg: ReceivedMessage, origin_topic: str, broker_name: str
    ) -> None:
        props = dict(msg.properties)
        props[RETRY_TOPIC] = origin_topic
        props[ORIGIN_MESSAGE_ID] = props.get(ORIGIN_MESSAGE_ID) or msg.msg_id
        props[DELAY] = str(3 + msg.reconsume_times)
        for key in (TRAN_MSG, RECONSUME_TIME, MAX_RECONSUME_TIMES):
            # RECONSUME_TIME and MAX_RECONSUME_TIMES travel as header fields j and l.
            props.pop(key, None)
        route = self._client.route(self._retry_topic)
        queues = route.publish_queues(self._retry_topic) if route is not None else []
        mq = random.choice(queues) if queues else MessageQueue(self._retry_topic, broker_name, 0)
        header = SendMessageRequestHeader(
            producer_group=_INNER_PRODUCER,
            topic=self._retry_topic,
            default_topic=CREATE_TOPIC_KEY,
            default_topic_queue_nums=4,
            queue_id=mq.queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=msg.flag,
            properties=encode_properties(props),
            reconsume_times=msg.reconsume_times + 1,
            unit_mode=False,
            max_reconsume_times=self._max_reconsume,
            batch=False,
            broker_name=mq.broker_name,
        )
        client, timeout = self._client, self._settings.send_back_timeout
        await client.call_broker(
            mq.broker_name,
            self._retry_topic,
            lambda addr: client.send_message(addr, header, msg.body, timeout=timeout),
            master=True,
        )
