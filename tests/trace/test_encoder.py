"""The trace text format, byte for byte as Java's ``TraceDataEncoder`` writes and reads it."""

from __future__ import annotations

import pytest

from aiorocket._trace import (
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    decode_trace,
    encode_trace,
)
from aiorocket._trace.data import encode_consume
from aiorocket.models import ReceivedMessage

C, F = "\x01", "\x02"


def _pub(**kw: object) -> TraceContext:
    bean = TraceBean(
        topic="Orders",
        msg_id="0A0000010000ABCD",
        tags="created",
        keys="k1 k2",
        store_host="10.0.0.2:10911",
        body_length=5,
        msg_type=MessageType.Normal_Msg,
        offset_msg_id="0A00000200002A9F0000000000000010",
    )
    ctx = TraceContext(
        TraceType.Pub,
        timestamp=1700000000123,
        region_id="DefaultRegion",
        group="shop",
        cost_ms=3,
        beans=[bean],
    )
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


def test_pub_record() -> None:
    out = encode_trace(_pub())
    assert (
        out.data
        == C.join(
            [
                "Pub",
                "1700000000123",
                "DefaultRegion",
                "shop",
                "Orders",
                "0A0000010000ABCD",
                "created",
                "k1 k2",
                "10.0.0.2:10911",
                "5",
                "3",
                "0",
                "0A00000200002A9F0000000000000010",
                "true",
            ]
        )
        + F
    )
    # TraceTransferBean keys: the message id, then each key
    assert out.keys == ("0A0000010000ABCD", "k1", "k2")


def test_java_nulls_are_written_as_null() -> None:
    ctx = _pub(success=False)
    ctx.beans[0].tags = None
    ctx.beans[0].keys = None
    ctx.beans[0].msg_type = MessageType.Trans_Msg_Half
    out = encode_trace(ctx)
    fields = out.data.rstrip(F).split(C)
    assert fields[6:8] == ["null", "null"]
    assert fields[11] == "1"
    assert fields[-1] == "false"
    assert out.keys == ("0A0000010000ABCD",)


def test_sub_before_and_after_one_record_per_message() -> None:
    beans = [
        TraceBean(topic="Orders", msg_id="ID1", keys="a", retry_times=0),
        TraceBean(topic="Orders", msg_id="ID2", keys=None, retry_times=2),
    ]
    before = TraceContext(
        TraceType.SubBefore,
        timestamp=1700000000200,
        region_id="DefaultRegion",
        group="billing",
        request_id="REQ1",
        beans=beans,
    )
    assert encode_trace(before).data == (
        f"SubBefore{C}1700000000200{C}DefaultRegion{C}billing{C}REQ1{C}ID1{C}0{C}a{F}"
        f"SubBefore{C}1700000000200{C}DefaultRegion{C}billing{C}REQ1{C}ID2{C}2{C}null{F}"
    )
    assert encode_trace(before).keys == ("ID1", "a", "ID2")
    after = TraceContext(
        TraceType.SubAfter,
        timestamp=1700000000250,
        region_id="DefaultRegion",
        group="billing",
        request_id="REQ1",
        cost_ms=25,
        success=False,
        context_code=2,
        beans=beans,
    )
    # the local access channel appends the timestamp and the group (4.9.8 and 5.3.3 alike)
    assert encode_trace(after).data == (
        f"SubAfter{C}REQ1{C}ID1{C}25{C}false{C}a{C}2{C}1700000000250{C}billing{F}"
        f"SubAfter{C}REQ1{C}ID2{C}25{C}false{C}null{C}2{C}1700000000250{C}billing{F}"
    )


def _received(msg_id: str, keys: str | None, retry: int, **props: str) -> ReceivedMessage:
    base = {"UNIQ_KEY": msg_id, "MSG_REGION": "DefaultRegion", **props}
    if keys is not None:
        base["KEYS"] = keys
    return ReceivedMessage.create(topic="Orders", body=b"x", properties=base, reconsume_times=retry)


@pytest.mark.parametrize("count", [1, 3])
def test_a_handler_call_encodes_as_its_two_contexts(count: int) -> None:
    # The consume hook queues the call; the dispatcher encodes it later, and the bytes must be
    # those of Java's SubBefore and SubAfter contexts (one record per traced message each).
    msgs = [
        _received("ID1", "a b", 0),
        _received("ID2", None, 2),
        _received("ID3", "c", 1, TRACE_ON="false"),  # left out, as Java does
    ][:count]
    traced = [m for m in msgs if m.properties.get("TRACE_ON") != "false"]
    beans = [
        TraceBean(msg_id=m.msg_id, keys=m.properties.get("KEYS"), retry_times=m.reconsume_times)
        for m in traced
    ]
    before = TraceContext(
        TraceType.SubBefore,
        timestamp=1000,
        region_id="DefaultRegion",
        group="billing",
        request_id="REQ1",
        beans=beans,
    )
    after = TraceContext(
        TraceType.SubAfter,
        timestamp=1090,
        region_id="DefaultRegion",
        group="billing",
        request_id="REQ1",
        cost_ms=90 // len(msgs),
        success=False,
        context_code=4,
        beans=beans,
    )
    bean = encode_consume((msgs, 1000, 1090, False, 4), "billing", "REQ1")
    assert bean is not None
    assert bean.data == encode_trace(before).data + encode_trace(after).data
    assert set(bean.keys) == set(encode_trace(before).keys)


def test_a_call_of_untraced_messages_encodes_nothing() -> None:
    msgs = [_received("ID1", None, 0, TRACE_ON="false")]
    assert encode_consume((msgs, 1, 2, True, 0), "g", "R") is None


def test_end_transaction_record() -> None:
    bean = TraceBean(
        topic="Pay",
        msg_id="ID9",
        tags=None,
        keys="order-1",
        store_host="10.0.0.2:10911",
        msg_type=MessageType.Trans_msg_Commit,
        transaction_id="ID9",
        transaction_state="COMMIT_MESSAGE",
        from_transaction_check=True,
    )
    ctx = TraceContext(
        TraceType.EndTransaction,
        timestamp=1700000000300,
        region_id="DefaultRegion",
        group="pay-tx",
        beans=[bean],
    )
    assert encode_trace(ctx).data == (
        f"EndTransaction{C}1700000000300{C}DefaultRegion{C}pay-tx{C}Pay{C}ID9{C}null{C}"
        f"order-1{C}10.0.0.2:10911{C}2{C}ID9{C}COMMIT_MESSAGE{C}true{F}"
    )


def test_decode_round_trip() -> None:
    text = encode_trace(_pub()).data
    beans = [TraceBean(topic="Orders", msg_id="ID1", keys="a", retry_times=1)]
    text += encode_trace(
        TraceContext(
            TraceType.SubBefore, timestamp=5, region_id="R", group="g", request_id="Q", beans=beans
        )
    ).data
    text += encode_trace(
        TraceContext(
            TraceType.SubAfter, timestamp=9, group="g", request_id="Q", cost_ms=4, beans=beans
        )
    ).data
    pub, before, after = decode_trace(text)
    assert pub.trace_type is TraceType.Pub
    assert (pub.group, pub.cost_ms, pub.success) == ("shop", 3, True)
    assert pub.beans[0].offset_msg_id == "0A00000200002A9F0000000000000010"
    assert pub.beans[0].msg_type is MessageType.Normal_Msg
    assert (before.request_id, before.beans[0].retry_times) == ("Q", 1)
    assert (after.timestamp, after.group, after.cost_ms, after.success) == (9, "g", 4, True)
    assert after.beans[0].msg_id == "ID1"


def test_decode_old_layouts_and_garbage() -> None:
    # a 13-field Pub (no offset id) and a 7-field SubAfter (4.x before the timestamp/group)
    old_pub = C.join(["Pub", "1", "R", "g", "T", "ID", "t", "k", "h:1", "2", "3", "0", "false"])
    old_after = C.join(["SubAfter", "Q", "ID", "4", "true", "k", "0"])
    out = decode_trace(old_pub + F + old_after + F + "Pub" + C + "x" + F + "Unknown" + F)
    assert [c.trace_type for c in out] == [TraceType.Pub, TraceType.SubAfter]
    assert out[0].success is False
    assert out[0].beans[0].offset_msg_id == ""
    assert (out[1].timestamp, out[1].group) == (0, "")
