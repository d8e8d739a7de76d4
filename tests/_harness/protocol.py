"""Protocol values the tests build by hand, with every field a test does not care about at
its plain default, and the example bodies of docs/protocol.md §5 (in fastjson's dialect)."""

from __future__ import annotations

from typing import Any

from aiorocket._protocol.headers import PullMessageRequestHeader
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.pop import PopMessageRequestHeader

__all__ = [
    "CLUSTER_5_4",
    "RESET_5_7",
    "ROUTE_5_3",
    "create_topic_fields",
    "message_record",
    "pop_header",
    "pull_header",
]

#: the topic route of docs/protocol.md §5.3 (bare integer keys)
ROUTE_5_3 = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"192.168.1.5:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
    b'"perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)
#: the cluster info of §5.4
CLUSTER_5_4 = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"192.168.1.5:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}},'
    b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
)
#: the reset-offset body of §5.7 (object keys)
RESET_5_7 = (
    b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:1234,'
    b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:99}}'
)

#: the fields of PULL_MESSAGE a test leaves alone: queue 0 from offset 0, 32 messages, no flags
_PULL_DEFAULTS: dict[str, Any] = {
    "queue_id": 0,
    "queue_offset": 0,
    "max_msg_nums": 32,
    "sys_flag": 0,
    "commit_offset": 0,
    "suspend_timeout_millis": 0,
    "sub_version": 0,
}

#: the fields of a stored message a test leaves alone (all zero, loopback hosts, no properties)
_RECORD_DEFAULTS: dict[str, Any] = {
    "queue_id": 0,
    "flag": 0,
    "queue_offset": 0,
    "commit_log_offset": 0,
    "sys_flag": 0,
    "born_timestamp": 0,
    "born_host": "127.0.0.1",
    "born_port": 0,
    "store_timestamp": 0,
    "store_host": "127.0.0.1",
    "store_port": 0,
    "reconsume_times": 0,
    "prepared_transaction_offset": 0,
}


def pull_header(*, consumer_group: str, topic: str, **fields: Any) -> PullMessageRequestHeader:
    """A PULL_MESSAGE header: ``fields`` over queue 0, offset 0, 32 messages, no flags."""
    return PullMessageRequestHeader(
        consumer_group=consumer_group, topic=topic, **{**_PULL_DEFAULTS, **fields}
    )


#: the fields of POP_MESSAGE a test leaves alone: any queue, 32 messages, 60 s invisible, no
#: hold, born at 1 ms, from the queue's start
_POP_DEFAULTS: dict[str, Any] = {
    "queue_id": -1,
    "max_msg_nums": 32,
    "invisible_time": 60_000,
    "poll_time": 0,
    "born_time": 1,
    "init_mode": 0,
}


def pop_header(*, consumer_group: str, topic: str, **fields: Any) -> PopMessageRequestHeader:
    """A POP_MESSAGE header: ``fields`` over any queue, 32 messages, 60 s, no hold."""
    return PopMessageRequestHeader(
        consumer_group=consumer_group, topic=topic, **{**_POP_DEFAULTS, **fields}
    )


def message_record(*, topic: str, body: bytes, **fields: Any) -> MessageRecord:
    """A stored message: ``fields`` over zeros, loopback hosts and no properties."""
    return MessageRecord(topic=topic, body=body, **{"properties": {}, **_RECORD_DEFAULTS, **fields})


def create_topic_fields(topic: str, queues: int) -> dict[str, str]:
    """The UPDATE_AND_CREATE_TOPIC header ``mqadmin updateTopic`` sends for a plain topic of
    ``queues`` read and write queues."""
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
