"""The push consumer: rebalance, per-queue pull tasks, process queues, concurrent and orderly
consumption, broker queue locks, offset stores (Java ``DefaultMQPushConsumer``, rebuilt on
coroutines)."""

from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext
from aiorocket._consumer.push_consumer import PushConsumer
from aiorocket._consumer.stats import ConsumerStatistics, QueueStatistics, TopicStatistics

__all__ = [
    "ConsumeHook",
    "ConsumeHookContext",
    "ConsumerStatistics",
    "PushConsumer",
    "QueueStatistics",
    "TopicStatistics",
]
