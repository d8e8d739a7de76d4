"""The send path (Java ``DefaultMQProducerImpl.sendDefaultImpl`` and ``sendKernelImpl``): a
send's attempts within one timeout budget, each to a queue chosen anew; after a failure,
whether to try again, after what pause, and on which broker.

A send is an `Outgoing` (what goes on the wire, the same for every attempt) and a
`QueueChoice` (how each attempt picks its queue); `Sender` runs its attempts.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from aiorocket._client.instance import ClientInstance, is_retriable
from aiorocket._client.send import SendResponse
from aiorocket._names import now_ms, without_namespace, wrap_namespace
from aiorocket._producer.checks import Release
from aiorocket._producer.hooks import SendHook, SendHookContext, run_send_after, run_send_before
from aiorocket._producer.publish import PublishRoutes, QueueChoice
from aiorocket._protocol.bodies import HeartbeatData
from aiorocket._protocol.headers import SendMessageRequestHeader
from aiorocket._protocol.message import BatchItem, encode_batch_body
from aiorocket._protocol.properties import WAIT, encode_properties
from aiorocket.errors import (
    ConnectError,
    FlowControlError,
    RequestTimeoutError,
    RocketError,
    ServiceNotAvailableError,
    SystemBusyError,
    UnsupportedFeatureError,
)
from aiorocket.models import Message, MessageQueue, SendResult
from aiorocket.settings import ProducerSettings

__all__ = ["Outgoing", "Sender", "retry_pause", "should_retry"]

log = logging.getLogger("aiorocket.producer")

#: first pause before retrying a send a broker refused as busy; doubles per attempt, jittered
_BUSY_BACKOFF: Final = 0.05
#: a sub-batch's own properties: every message's are inside its body
_BATCH_PROPERTIES: Final = encode_properties({WAIT: "true"})


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One send's message as it goes on the wire, the same for each of its attempts.

    Attributes:
        topic: the wire topic (namespace included).
        body: the body as sent (compressed, or a sub-batch's encoded messages).
        properties: the encoded properties.
        uniq: its ``UNIQ_KEY`` (a sub-batch's, ``,``-joined): the result's ``msg_id``.
        message: the message a send hook and a selector see; ``None`` for a sub-batch.
        sys_flag: its ``MessageSysFlag`` bits.
        batch: a sub-batch's messages (empty for a single message).
        msg_type: the message type a send hook sees.
        needs: the broker release it needs (``None``: any).
        oneway: sent without waiting for an answer: one attempt, no result.
        reply: a reply to a request (SEND_REPLY_MESSAGE_V2).
    """

    topic: str
    body: bytes
    properties: str
    uniq: str
    message: Message | None
    sys_flag: int = 0
    batch: Sequence[Message] = ()
    msg_type: str = "Normal"
    needs: Release | None = None
    oneway: bool = False
    reply: bool = False


def should_retry(exc: RocketError, attempt: int, attempts: int, remaining: float) -> bool:
    """Whether attempt ``attempt`` (from 0) of ``attempts``, failed with ``exc`` and
    ``remaining`` seconds of the budget left, is followed by another: Java's sync send retries
    retriable codes and transport errors while attempts and time are left."""
    return is_retriable(exc) and attempt + 1 < attempts and remaining > 0


def retry_pause(
    exc: RocketError, attempt: int, remaining: float, route_retry_interval: float
) -> float | None:
    """Seconds to wait before the attempt after ``attempt`` failed with ``exc`` (``None``: go on
    at once), at most half the ``remaining`` budget."""
    if isinstance(exc, SystemBusyError | FlowControlError):
        # An overloaded broker (full send queue, busy page cache): back off before asking
        # again.
        return min(_BUSY_BACKOFF * 2.0**attempt * random.uniform(0.5, 1.0), remaining / 2)
    if isinstance(exc, ConnectError | ServiceNotAvailableError):
        # The master is gone or unknown: the next attempt's route refresh may name a new one
        # (a DLedger group elects it in seconds); give it time.
        return min(route_retry_interval, remaining / 2)
    return None


class Sender:
    """Sends a producer's messages: each send's attempts, hooks and result.

    Args:
        client: the producer's client instance.
        routes: its publish routes.
        settings: its settings (group, namespace, retries, template topic).
        hooks: its send hooks, the list itself: hooks registered later run too.
        heartbeat_data: what a heartbeat says, to ask a broker that never answered its
            release.
        check_running: raises when the producer cannot send (closed, not started).
    """

    def __init__(
        self,
        client: ClientInstance,
        routes: PublishRoutes,
        settings: ProducerSettings,
        hooks: list[SendHook],
        heartbeat_data: Callable[[], HeartbeatData],
        check_running: Callable[[], None],
    ) -> None:
        self._client = client
        self._routes = routes
        self._settings = settings
        self._hooks = hooks
        self._heartbeat_data = heartbeat_data
        self._check_running = check_running
        self._wire_group = wrap_namespace(settings.namespace, settings.group)

    async def send(self, out: Outgoing, choice: QueueChoice, timeout: float) -> SendResult | None:
        """Send ``out`` to the queue ``choice`` picks, trying again after a retriable failure
        (up to ``retries`` more times, on another broker unless ``choice`` is pinned), all
        within ``timeout`` seconds; ``None`` for a oneway send.

        Raises:
            RocketError: the last attempt's error, or what stopped the retries.
            ClientClosedError: the producer is closed or was never started.
        """
        self._check_running()
        attempts = 1 if out.oneway else 1 + self._settings.retries
        # Java's sendMsgTimeout is the budget of the whole call, retries included
        # (sendDefaultImpl): each attempt gets what is left of it.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        avoid: str | None = None
        failure: RocketError | None = None
        hook: SendHookContext | None = None
        try:
            for attempt in range(attempts):
                info = await self._routes.get(out.topic, refresh=failure is not None)
                mq = choice.pick(info, out.message, avoid)
                header = self._header(out, mq)
                remaining = deadline - loop.time()
                if remaining <= 0 and failure is not None:
                    raise failure
                hook = None
                try:
                    # sends need the master; without one the route is asked again at once
                    addr = await self._client.find_broker(mq.broker_name, out.topic, master=True)
                    if out.needs is not None:
                        await self._require_release(addr, out.needs)
                    if self._hooks:
                        hook = self._before(out, mq, addr)
                    resp = await self._client.send_message(
                        addr,
                        header,
                        out.body,
                        timeout=max(remaining, 0.001),
                        oneway=out.oneway,
                        reply=out.reply,
                    )
                except RocketError as exc:
                    if hook is not None:
                        hook.exception = exc
                        self._after(hook, None, mq, out.uniq)
                    failure = exc
                    remaining = deadline - loop.time()
                    if not should_retry(exc, attempt, attempts, remaining):
                        raise
                    log.info(
                        "send to %s failed (%s); retry %d/%d", mq, exc, attempt + 1, attempts - 1
                    )
                    # selectOneMessageQueue(tpInfo, lastBrokerName): round-robin avoids it next
                    avoid = None if choice.pinned else mq.broker_name
                    pause = retry_pause(
                        exc, attempt, remaining, self._settings.route_retry_interval
                    )
                    if pause is not None:
                        await asyncio.sleep(pause)
                    continue
                if hook is not None:
                    return self._after(hook, resp, mq, out.uniq)
                return None if resp is None else self._result(resp, mq, out.uniq)
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            # The raised error's traceback holds this frame: unbound, no cycle is left.
            failure = hook = None

    async def send_chunks(
        self,
        topic: str,
        chunks: Sequence[Sequence[tuple[BatchItem, str, Message]]],
        choice: QueueChoice,
        timeout: float,
    ) -> list[SendResult]:
        """Send a batch's sub-batches (from `split_batch`) to ``topic`` (a wire topic), one
        after the other, each as one `send`, all
        within ``timeout`` seconds.

        Raises:
            RequestTimeoutError: the budget ran out between sub-batches.
            RocketError: as ``send``; the error's note says how many sub-batches were stored.
        """
        results = []
        # One budget for the whole call, as for send(): each sub-batch gets what is left.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for i, chunk in enumerate(chunks):
            out = Outgoing(
                topic,
                encode_batch_body([it for it, _, _ in chunk]),
                _BATCH_PROPERTIES,
                ",".join(u for _, u, _ in chunk),
                None,
                batch=[m for _, _, m in chunk],
            )
            remaining = deadline - loop.time()
            try:
                if remaining <= 0:
                    raise RequestTimeoutError(f"send_batch: the {timeout:g} s budget ran out")
                result = await self.send(out, choice, remaining)
            except RocketError as exc:
                if i:
                    exc.add_note(f"{i} of {len(chunks)} sub-batches were stored before this one")
                raise
            if result is not None:
                results.append(result)
        return results

    def _header(self, out: Outgoing, mq: MessageQueue) -> SendMessageRequestHeader:
        s = self._settings
        return SendMessageRequestHeader(
            producer_group=self._wire_group,
            topic=out.topic,
            default_topic=s.create_topic_key,
            default_topic_queue_nums=s.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=out.sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=out.properties,
            reconsume_times=0,
            unit_mode=False,
            batch=bool(out.batch),
            broker_name=mq.broker_name,
        )

    def _before(self, out: Outgoing, mq: MessageQueue, addr: str) -> SendHookContext:
        # A sub-batch is seen as one message of its topic, as Java's MessageBatch.
        message = out.message if out.message is not None else Message(out.batch[0].topic, out.body)
        hook = SendHookContext(
            self._settings.group, message, mq, addr, out.msg_type, started=now_ms(), batch=out.batch
        )
        run_send_before(self._hooks, hook)
        return hook

    def _after(
        self, hook: SendHookContext, resp: SendResponse | None, mq: MessageQueue, uniq: str
    ) -> SendResult | None:
        # sendKernelImpl: the after-hooks see the result or the error.
        hook.cost_ms = now_ms() - hook.started
        result = None
        if resp is not None:
            hook.result = result = self._result(resp, mq, uniq)
            hook.region_id, hook.trace_on = resp.header.msg_region, resp.header.trace_on
        run_send_after(self._hooks, hook)
        return result

    async def _require_release(self, addr: str, needs: Release) -> None:
        # An older broker stores timer or priority properties as plain ones (delivering at
        # once, in no priority order): refuse instead. Its release is the version of its
        # responses (docs/protocol.md §0.3).
        needed, release, what = needs
        version = self._client.server_version(addr)
        if version is None:
            # It never answered us (its first heartbeat may still be on its way): ask it now.
            version = await self._client.heartbeat(addr, self._heartbeat_data())
        if version < needed:
            raise UnsupportedFeatureError(
                f"broker {addr} answers as MQVersion ordinal {version}, older than {release} "
                f"({needed}): it cannot {what}",
                broker=addr,
                version=version,
                needed=needed,
            )

    def _result(self, resp: SendResponse, mq: MessageQueue, uniq: str) -> SendResult:
        h = resp.header
        return SendResult(
            status=resp.status,
            msg_id=uniq,
            offset_msg_id=h.msg_id,
            # Without the namespace, as Java's processSendResponse builds it.
            queue=MessageQueue(
                without_namespace(self._settings.namespace, mq.topic), mq.broker_name, h.queue_id
            ),
            queue_offset=h.queue_offset,
            recall_handle=h.recall_handle,
        )
