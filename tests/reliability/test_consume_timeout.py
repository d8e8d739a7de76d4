"""Handler calls running past ``consume_timeout``: their messages are sent back for a retry
(Java ``cleanExpireMsg``) and, by default, the call is cancelled so its worker is free again;
``cancel_timed_out_handlers=False`` keeps Java's behaviour (the call runs on). A message whose
send-back fails stays cached and is consumed again locally, never lost."""

from __future__ import annotations

import asyncio

import pytest

from aiorocket import ConcurrentContext, Message, Producer, ReceivedMessage
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket.embedded import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.wait import wait_for
from tests.reliability.helpers import first_consumer

TOPIC = "Slow"

pytestmark = pytest.mark.broker(delay_levels=FAST_DELAYS)


class Handler:
    """Hangs on the first delivery of b"stuck"; everything else succeeds at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, int]] = []
        self.cancelled = 0
        self.finished_stuck = 0
        self.release = asyncio.Event()

    async def __call__(self, msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        for m in msgs:
            self.calls.append((m.body, m.reconsume_times))
            if m.body == b"stuck" and m.reconsume_times == 0:
                try:
                    await self.release.wait()
                except asyncio.CancelledError:
                    self.cancelled += 1
                    raise
                self.finished_stuck += 1

    def delivered(self, body: bytes) -> int:
        return sum(1 for b, _ in self.calls if b == body)


async def run(
    broker: EmbeddedBroker, handler: Handler, *, cancel: bool, fail_back: bool = False
) -> int:
    """Consume b"stuck" (its handler call timing out) then b"next" with ``handler``; the
    number of handler calls cancelled."""
    async with (
        # the first send creates the topic with one queue
        Producer(namesrv=broker.address, group="sp", default_topic_queue_nums=1) as producer,
    ):
        consumer = first_consumer(
            broker.address,
            "slow",
            concurrency=1,
            consume_timeout=0.5,
            cancel_timed_out_handlers=cancel,
            reconsume_later_delay=0.2,
        )
        consumer.subscribe(TOPIC)
        consumer.listener(handler)

        def cleaned_up() -> bool:
            # The clean-up took the timed-out call over: its send-back is stored (beside the
            # two messages sent), or, when sends back fail, both injected failures were used.
            if fail_back:
                return len(broker.injected_failures) == 2
            store = broker.store
            stored = sum(store.max_offset(t, q) for t, qs in store.queues().items() for q in qs)
            return stored > 2

        await producer.send(Message(TOPIC, b"stuck"))
        async with consumer:
            await wait_for(
                lambda: handler.delivered(b"stuck") == 1, timeout=10, what="the stuck call"
            )
            await producer.send(Message(TOPIC, b"next"))
            if fail_back:
                # neither the send-back nor the client's own resend gets through (set before
                # the clean-up, which runs every consume_timeout, finds the call)
                assert consumer.statistics().handlers_cancelled == 0
                broker.fail_next(RequestCode.CONSUMER_SEND_MSG_BACK, ResponseCode.SYSTEM_ERROR)
                broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_ERROR)
            if cancel:
                # the one worker is free again within 1-2 timeouts: b"next" gets through
                await wait_for(lambda: handler.delivered(b"next") == 1, timeout=5, what="b'next'")
            else:
                await wait_for(cleaned_up, timeout=10, what="the clean-up of the stuck call")
                await asyncio.sleep(0.3)  # a freed worker would take b"next" meanwhile
                assert handler.delivered(b"next") == 0  # the worker is still held
                handler.release.set()
                await wait_for(lambda: handler.delivered(b"next") == 1, timeout=5, what="b'next'")
            # the timed-out message comes back once (retry topic, or locally after a failed
            # send-back) and succeeds
            await wait_for(lambda: handler.delivered(b"stuck") == 2, timeout=10, what="the retry")
            await asyncio.sleep(0.5)
            cancelled = consumer.statistics().handlers_cancelled
        if fail_back:
            assert len(broker.injected_failures) == 2  # the retry did not come from the broker
    assert handler.delivered(b"stuck") == 2
    assert handler.delivered(b"next") == 1
    return cancelled


async def test_a_timed_out_handler_is_cancelled_and_its_worker_freed(
    broker: EmbeddedBroker,
) -> None:
    handler = Handler()
    assert await run(broker, handler, cancel=True) == 1
    assert handler.cancelled == 1
    assert handler.finished_stuck == 0


async def test_cancel_timed_out_handlers_off_keeps_javas_behaviour(broker: EmbeddedBroker) -> None:
    handler = Handler()
    assert await run(broker, handler, cancel=False) == 0
    assert handler.cancelled == 0
    assert handler.finished_stuck == 1  # ran to its end; its outcome was ignored


@pytest.mark.parametrize("cancel", [True, False])
async def test_a_timed_out_message_that_cannot_be_sent_back_is_kept(
    broker: EmbeddedBroker, cancel: bool
) -> None:
    handler = Handler()
    await run(broker, handler, cancel=cancel, fail_back=True)
    assert [t for b, t in handler.calls if b == b"stuck"] == [0, 1]  # consumed again locally
