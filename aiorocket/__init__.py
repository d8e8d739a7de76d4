"""aiorocket: an asyncio-native Apache RocketMQ framework.

The public API grows here as it lands; everything not listed in ``__all__`` is private.
"""

from aiorocket._admin import Admin, GroupLag, QueueLag, TopicRoute, TraceEntry
from aiorocket._consumer import (
    ConsumeHook,
    ConsumeHookContext,
    ConsumerStatistics,
    LiteConsumer,
    PoppedMessage,
    PullConsumer,
    PushConsumer,
    QueueStatistics,
    SimpleConsumer,
    TopicStatistics,
)
from aiorocket._consumer.hooks import ReceiveHook, ReceiveHookContext
from aiorocket._producer.hooks import SendCallContext, SendCallHook, SendHook, SendHookContext
from aiorocket._producer.producer import Producer
from aiorocket._producer.request import create_reply_message
from aiorocket._producer.transaction import (
    PreparedMessage,
    TransactionProducer,
    TransactionSendResult,
    TransactionState,
)
from aiorocket._reader import QueueReader, ReadBatch, ReadStatus, SyncQueueReader
from aiorocket.app import App, DeadLetter, ReconsumeLater, RetryPolicy
from aiorocket.errors import RocketError, UnsupportedFeatureError
from aiorocket.models import (
    ConcurrentContext,
    ConsumeStatus,
    Message,
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
    ReceivedMessage,
    SendResult,
    SendStatus,
    TopicMessageType,
)

__version__ = "0.1.0"

__all__ = [
    "Admin",
    "App",
    "ConcurrentContext",
    "ConsumeHook",
    "ConsumeHookContext",
    "ConsumeStatus",
    "ConsumerStatistics",
    "DeadLetter",
    "GroupLag",
    "LiteConsumer",
    "Message",
    "MessageQueue",
    "OrderlyContext",
    "OrderlyStatus",
    "PoppedMessage",
    "PreparedMessage",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "QueueLag",
    "QueueReader",
    "QueueStatistics",
    "ReadBatch",
    "ReadStatus",
    "ReceiveHook",
    "ReceiveHookContext",
    "ReceivedMessage",
    "ReconsumeLater",
    "RetryPolicy",
    "RocketError",
    "SendCallContext",
    "SendCallHook",
    "SendHook",
    "SendHookContext",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "SyncQueueReader",
    "TopicMessageType",
    "TopicRoute",
    "TopicStatistics",
    "TraceEntry",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
    "UnsupportedFeatureError",
    "__version__",
    "create_reply_message",
]
