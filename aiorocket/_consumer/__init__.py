"""The push, pull and simple (POP) consumers: rebalance, per-queue pull tasks, process
queues, concurrent and orderly consumption, broker queue locks, offset stores (Java
``DefaultMQPushConsumer`` and ``DefaultLitePullConsumer``, rebuilt on coroutines; the 5.x
SDKs' ``SimpleConsumer`` over POP, and 5.5's lite consumer)."""

from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext
from aiorocket._consumer.lite_consumer import LiteConsumer
from aiorocket._consumer.popping import PoppedMessage
from aiorocket._consumer.pull_consumer import PullConsumer
from aiorocket._consumer.push_consumer import PushConsumer
from aiorocket._consumer.simple_consumer import SimpleConsumer
from aiorocket._consumer.stats import ConsumerStatistics, QueueStatistics, TopicStatistics

__all__ = [
    "ConsumeHook",
    "ConsumeHookContext",
    "ConsumerStatistics",
    "LiteConsumer",
    "PoppedMessage",
    "PullConsumer",
    "PushConsumer",
    "QueueStatistics",
    "SimpleConsumer",
    "TopicStatistics",
]
