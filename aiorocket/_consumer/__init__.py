"""The push and pull consumers: rebalance, per-queue pull tasks, process queues, concurrent and
orderly consumption, broker queue locks, offset stores (Java ``DefaultMQPushConsumer`` and
``DefaultLitePullConsumer``, rebuilt on coroutines)."""

from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext
from aiorocket._consumer.pull_consumer import PullConsumer
from aiorocket._consumer.push_consumer import PushConsumer
from aiorocket._consumer.stats import ConsumerStatistics, QueueStatistics, TopicStatistics

__all__ = [
    "ConsumeHook",
    "ConsumeHookContext",
    "ConsumerStatistics",
    "PullConsumer",
    "PushConsumer",
    "QueueStatistics",
    "TopicStatistics",
]
