"""POP on the wire (docs/protocol.md §12.3): receipt handles, offset infos, batch-ack bit sets
and the assignment bodies, against the forms Apache RocketMQ 5.3's Java code writes."""

from __future__ import annotations

import pytest

from aiorocket._client.pop import batch_acks, pop_response, popped_records
from aiorocket._names import pop_retry_topic
from aiorocket._protocol.codes import ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import encode_message
from aiorocket._protocol.pop import (
    BatchAck,
    BatchAckMessageRequestBody,
    MessageQueueAssignment,
    MessageRequestModeWrapper,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    QueryAssignmentResponseBody,
    ReceiptHandle,
    SetMessageRequestModeRequestBody,
    format_offset_info,
    parse_offset_info,
    retry_mark,
)
from aiorocket.errors import BrokerError, RemoteProtocolError, RequestCodeNotSupportedError
from aiorocket.models import MessageQueue
from tests._harness.protocol import message_record, pop_header

# ExtraInfoUtil.buildExtraInfo(10, 1700000000000, 30000, 3, "%RETRY%G_T", "broker-a", 2, 12)
HANDLE = "10 1700000000000 30000 3 1 broker-a 2 12"


def test_receipt_handle_reads_and_writes_java_extra_info() -> None:
    h = ReceiptHandle.parse(HANDLE)
    assert (h.ck_offset, h.pop_time, h.invisible_time, h.revive_qid) == (
        10,
        1700000000000,
        30000,
        3,
    )
    assert (h.retry, h.broker_name, h.queue_id, h.offset) == ("1", "broker-a", 2, 12)
    assert h.text == HANDLE
    assert h.visible_at_ms == 1700000030000
    assert not h.ordered
    assert h.popped_topic("T", "G") == "%RETRY%G_T"


def test_receipt_handle_topics_and_order() -> None:
    normal = ReceiptHandle.parse("0 1 2 999 0 b 0 0")
    assert normal.popped_topic("T", "G") == "T"
    assert normal.ordered
    v2 = ReceiptHandle.parse("0 1 2 3 2 b 0 0")
    assert v2.popped_topic("T", "G") == "%RETRY%G+T" == pop_retry_topic("T", "G", v2=True)


def test_renewed_handle_starts_its_checkpoint_at_the_message() -> None:
    # ChangeInvisibleTimeProcessor writes a new checkpoint at the message's own offset.
    renewed = ReceiptHandle.parse(HANDLE).renewed(1700000005000, 60000, 5)
    assert renewed.text == "12 1700000005000 60000 5 1 broker-a 2 12"


@pytest.mark.parametrize(
    "text",
    ["", "1 2 3", "1 2 3 4 0 b 0", "1 2 3 4 0 b 0 0 9", "x 2 3 4 0 b 0 0", "1 2 3 4 7 b 0 0"],
)
def test_malformed_receipt_handles(text: str) -> None:
    with pytest.raises(RemoteProtocolError, match="receipt handle"):
        ReceiptHandle.parse(text)


def test_retry_marks() -> None:
    assert retry_mark("T") == "0"
    assert retry_mark("%RETRY%G_T") == "1"
    assert retry_mark("%RETRY%G") == "1"
    assert retry_mark("%RETRY%G+T") == "2"


def test_offset_info_round_trip_in_java_form() -> None:
    # ExtraInfoUtil.buildStartOffsetInfo / buildMsgOffsetInfo, two queues.
    text = format_offset_info([("T", "1", [5]), ("%RETRY%G_T", "0", [7, 8])])
    assert text == "0 1 5;1 0 7,8"
    assert parse_offset_info(text) == {"0@1": [5], "1@0": [7, 8]}
    assert parse_offset_info(None) == {} == parse_offset_info("")


@pytest.mark.parametrize("text", ["0 1", "0 1 x", "0 1 5;0 1 6"])
def test_malformed_offset_info(text: str) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_offset_info(text)


def test_batch_ack_writes_the_bit_set_as_fastjson_does() -> None:
    # java.util.BitSet {0, 3, 9}.toByteArray() = [0x09, 0x02], base64 "CQI=".
    ack = BatchAck(
        consumer_group="G",
        topic="T",
        retry="0",
        start_offset=5,
        queue_id=1,
        revive_queue_id=2,
        pop_time=100,
        invisible_time=200,
        bits=frozenset({0, 3, 9}),
    )
    assert ack.to_json() == (
        b'{"b":"CQI=","c":"G","it":200,"pt":100,"q":1,"r":"0","rq":2,"so":5,"t":"T"}'
    )
    body = BatchAckMessageRequestBody(broker_name="broker-a", acks=(ack,))
    assert BatchAckMessageRequestBody.from_json(body.to_json()) == body
    with pytest.raises(RemoteProtocolError):
        BatchAck.from_json(b'{"b":"**","c":"G","it":2,"pt":1,"q":1,"r":"0","rq":2,"so":5,"t":"T"}')


def test_batch_acks_group_handles_by_checkpoint() -> None:
    a = ReceiptHandle.parse("10 100 30000 3 0 b 2 10")
    b = ReceiptHandle.parse("10 100 30000 3 0 b 2 13")
    c = ReceiptHandle.parse("20 100 30000 3 0 b 1 21")
    acks = sorted(batch_acks("G", [("T", a), ("T", b), ("T", c)]), key=lambda x: x.queue_id)
    assert [(x.queue_id, x.start_offset, sorted(x.bits)) for x in acks] == [
        (1, 20, [1]),
        (2, 10, [0, 3]),
    ]


def test_assignment_and_mode_bodies() -> None:
    answer = QueryAssignmentResponseBody(
        message_queue_assignments=(
            MessageQueueAssignment(message_queue=MessageQueue("T", "b", -1), mode="POP"),
        )
    )
    assert answer.to_json() == (
        b'{"messageQueueAssignments":[{"messageQueue":{"brokerName":"b","queueId":-1,'
        b'"topic":"T"},"mode":"POP"}]}'
    )
    assert QueryAssignmentResponseBody.from_json(answer.to_json()) == answer
    mode = SetMessageRequestModeRequestBody(topic="T", consumer_group="G", mode="POP")
    table = MessageRequestModeWrapper(message_request_mode_map={"T": {"G": mode}})
    assert MessageRequestModeWrapper.from_json(table.to_json()) == table
    # fastjson may write the enum by ordinal
    read = SetMessageRequestModeRequestBody.from_json(b'{"topic":"T","consumerGroup":"G","mode":1}')
    assert read.mode == "POP"


def _pop_answer(records: bytes, **fields: object) -> RemotingCommand:
    header = PopMessageResponseHeader(
        pop_time=1000,
        invisible_time=30000,
        revive_qid=4,
        rest_num=7,
        **fields,  # type: ignore[arg-type]
    )
    return RemotingCommand(code=ResponseCode.SUCCESS, ext_fields=header.to_ext(), body=records)


def test_popped_records_get_java_handles() -> None:
    # Two from queue 1 (listed out of order in the body), one from the retry topic's queue 0.
    body = b"".join(
        encode_message(message_record(topic=t, body=b"x", queue_id=q, queue_offset=o))
        for t, q, o in [("T", 1, 6), ("T", 1, 5), ("%RETRY%G_T", 0, 9)]
    )
    resp = _pop_answer(
        body,
        start_offset_info="0 1 5;1 0 9",
        msg_offset_info="0 1 5,6;1 0 9",
    )
    result = pop_response(resp, "broker-a")
    assert result.rest == 7
    assert [h.text for _, h in result.records] == [
        "5 1000 30000 4 0 broker-a 1 6",
        "5 1000 30000 4 0 broker-a 1 5",
        "9 1000 30000 4 1 broker-a 0 9",
    ]


def test_popped_records_without_offset_infos_use_the_first_offset_per_queue() -> None:
    body = b"".join(
        encode_message(message_record(topic="T", body=b"x", queue_id=0, queue_offset=o))
        for o in (3, 4)
    )
    header = PopMessageResponseHeader(pop_time=1, invisible_time=2, revive_qid=0, rest_num=0)
    handles = [h.text for _, h in popped_records(header, body, "b")]
    assert handles == ["3 1 2 0 0 b 0 3", "3 1 2 0 0 b 0 4"]


def test_popped_records_must_be_covered_by_the_offset_infos() -> None:
    body = encode_message(message_record(topic="T", body=b"x", queue_id=2, queue_offset=3))
    with pytest.raises(RemoteProtocolError, match="no offsets"):
        pop_response(_pop_answer(body, start_offset_info="0 1 5", msg_offset_info="0 1 5"), "b")


def test_pop_statuses_and_refusals() -> None:
    empty = RemotingCommand(code=ResponseCode.POLLING_TIMEOUT, ext_fields={"restNum": "0"})
    assert pop_response(empty, "b").records == []
    with pytest.raises(RequestCodeNotSupportedError, match="POP"):
        pop_response(RemotingCommand(code=ResponseCode.REQUEST_CODE_NOT_SUPPORTED), "b")
    with pytest.raises(BrokerError):
        pop_response(RemotingCommand(code=ResponseCode.TOPIC_NOT_EXIST, remark="no"), "b")


def test_pop_request_header_wire_names() -> None:
    header = pop_header(consumer_group="G", topic="T", poll_time=20000, order=True, broker_name="b")
    assert header.to_ext() == {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": "60000",
        "pollTime": "20000",
        "bornTime": "1",
        "initMode": "0",
        "order": "true",
        "bname": "b",
    }
    assert PopMessageRequestHeader.from_ext(header.to_ext()) == header
