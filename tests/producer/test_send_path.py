"""The send path's decisions (Java ``DefaultMQProducerImpl.sendDefaultImpl``): which queue and
broker each attempt goes to, whether a failure is tried again, after what pause, and that the
attempts stop when the retries or the budget run out."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aiorocket import Message, MessageQueue, Producer
from aiorocket._producer.publish import ROUND_ROBIN, QueueChoice, TopicPublishInfo, queue_for_key
from aiorocket._producer.sender import retry_pause, should_retry
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import (
    BrokerSystemError,
    ConnectError,
    FlowControlError,
    MessageIllegalError,
    RequestTimeoutError,
    RocketError,
    ServiceNotAvailableError,
    SystemBusyError,
    UnsupportedFeatureError,
)

_A = [MessageQueue("T", "broker-a", i) for i in range(2)]
_B = [MessageQueue("T", "broker-b", i) for i in range(2)]


def _info() -> TopicPublishInfo:
    return TopicPublishInfo([*_A, *_B])


def test_round_robin_moves_to_another_broker_after_a_failure() -> None:
    info = _info()
    # wherever the rotation stands, the attempt after a failure on a broker avoids it
    for _ in range(len(info.queues)):
        failed = ROUND_ROBIN.pick(info, None, None)
        retry = ROUND_ROBIN.pick(info, None, failed.broker_name)
        assert retry.broker_name != failed.broker_name
    assert not ROUND_ROBIN.pinned


def test_a_topic_on_one_broker_retries_on_it() -> None:
    info = TopicPublishInfo(list(_A))
    assert ROUND_ROBIN.pick(info, None, "broker-a").broker_name == "broker-a"


def _first(queues: Sequence[MessageQueue], msg: object, key: str | None) -> MessageQueue:
    return queues[0]


@pytest.mark.parametrize(
    "choice",
    [
        QueueChoice(queue=_B[1]),
        QueueChoice(sharding_key="order-7"),
        QueueChoice(selector=_first),
        QueueChoice(lite_topic="room-1"),
    ],
)
def test_a_pinned_queue_stays_the_same_on_retry(choice: QueueChoice) -> None:
    # a keyed, selected, lite or explicit queue must not move: its order would break
    info = _info()
    first = choice.pick(info, None, None)
    assert choice.pinned
    assert choice.pick(info, None, first.broker_name) == first


def test_the_first_choice_that_applies_wins() -> None:
    info = _info()
    assert QueueChoice(queue=_B[1], sharding_key="k").pick(info, None, None) == _B[1]
    keyed = QueueChoice(sharding_key="k", selector=_first).pick(info, None, None)
    assert keyed == queue_for_key(info.queues, "k")


@pytest.mark.parametrize(
    "exc",
    [
        BrokerSystemError("x"),
        SystemBusyError("x"),
        FlowControlError("x"),
        ServiceNotAvailableError("x"),
        ConnectError("x"),
        RequestTimeoutError("x"),
    ],
)
def test_retriable_failures_are_tried_again_while_attempts_and_time_last(exc: RocketError) -> None:
    assert should_retry(exc, 0, 3, 1.0)
    assert should_retry(exc, 1, 3, 1.0)
    assert not should_retry(exc, 2, 3, 1.0)  # the last attempt
    assert not should_retry(exc, 0, 1, 1.0)  # a oneway send has one
    assert not should_retry(exc, 0, 3, 0.0)  # the budget is spent


@pytest.mark.parametrize(
    "exc",
    [
        MessageIllegalError("x"),
        UnsupportedFeatureError("x", broker="b", version=1, needed=2),
    ],
)
def test_other_failures_end_the_send(exc: RocketError) -> None:
    assert not should_retry(exc, 0, 3, 1.0)


def test_a_busy_broker_is_given_a_growing_jittered_pause() -> None:
    for attempt in range(3):
        pause = retry_pause(SystemBusyError("x"), attempt, 10.0, 1.0)
        assert pause is not None
        assert 0.025 * 2**attempt <= pause <= 0.05 * 2**attempt
    # never more than half of what is left of the budget
    assert retry_pause(FlowControlError("x"), 5, 0.2, 1.0) == 0.1


def test_a_missing_master_is_given_the_route_retry_interval() -> None:
    assert retry_pause(ConnectError("x"), 0, 10.0, 1.0) == 1.0
    assert retry_pause(ServiceNotAvailableError("x"), 0, 1.0, 1.0) == 0.5


def test_other_retriable_failures_are_tried_again_at_once() -> None:
    assert retry_pause(BrokerSystemError("x"), 0, 10.0, 1.0) is None
    assert retry_pause(RequestTimeoutError("x"), 0, 10.0, 1.0) is None


async def test_a_retriable_refusal_is_tried_retries_more_times_then_raised(
    broker: EmbeddedBroker,
) -> None:
    async with Producer(namesrv=broker.address, group="pg", retries=2) as p:
        await p.send(Message("Retried", b"warm-up"))
        broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_ERROR, times=4)
        with pytest.raises(BrokerSystemError):
            await p.send(Message("Retried", b"x"))
        assert len(broker.injected_failures) == 3  # one attempt and two retries
        # the fourth refusal is left for the next send, which its first retry gets past
        await p.send(Message("Retried", b"y"))
    assert len(broker.injected_failures) == 4


async def test_a_refusal_that_is_not_retriable_ends_the_send_at_once(
    broker: EmbeddedBroker,
) -> None:
    async with Producer(namesrv=broker.address, group="pg", retries=2) as p:
        await p.send(Message("Refused", b"warm-up"))
        broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.MESSAGE_ILLEGAL, times=2)
        with pytest.raises(MessageIllegalError):
            await p.send(Message("Refused", b"x"))
        assert len(broker.injected_failures) == 1


async def test_a_oneway_send_is_not_retried(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg", retries=2) as p:
        first = await p.send(Message("Oneway", b"warm-up"))
        broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_ERROR, times=1)
        await p.send_oneway(Message("Oneway", b"lost"), queue=first.queue)
        # the refusal was used up by the oneway send, not by a retry of it: the next message
        # of the queue is stored right after the warm-up
        after = await p.send(Message("Oneway", b"stored"), queue=first.queue)
    assert len(broker.injected_failures) == 1
    assert after.queue_offset == first.queue_offset + 1
