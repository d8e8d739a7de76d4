"""Message trace as the Java client writes it (``org.apache.rocketmq.client.trace``).

`data` holds the records and ``TraceDataEncoder``'s text format;
`dispatcher` the bounded, batching sender (``AsyncTraceDispatcher``)
that stores them in the trace topic, keyed by message id and keys so that ``mqadmin
queryMsgTraceById`` (QUERY_MESSAGE by key) finds them. The producer's and consumers' hooks
that fill the records live in their own layers.
"""

from aiorocket._trace.data import (
    DEFAULT_TRACE_TOPIC,
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    TransferBean,
    decode_trace,
    encode_trace,
)
from aiorocket._trace.dispatcher import TraceDispatcher

__all__ = [
    "DEFAULT_TRACE_TOPIC",
    "MessageType",
    "TraceBean",
    "TraceContext",
    "TraceDispatcher",
    "TraceType",
    "TransferBean",
    "decode_trace",
    "encode_trace",
]
