"""The pull processor's pre-rendered SUCCESS frame against the general encoder."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aiorocket._protocol.codes import PullSysFlag, RequestCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import encode_command_parts
from aiorocket._protocol.message import decode_messages
from aiorocket.embedded.pull import FoundResponse, PullProcessor
from aiorocket.embedded.store_results import GetResult, GetStatus
from tests._harness.protocol import pull_header
from tests.embedded.test_broker_kit import RawClient, running_broker

_FOUND = FoundResponse()
_LONG = st.integers(min_value=0, max_value=2**63 - 1)


@given(
    opaque=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    offsets=st.tuples(_LONG, _LONG, _LONG),
    body=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=40),
)
def test_found_frame_is_byte_identical_to_the_general_encoding(
    opaque: int, offsets: tuple[int, int, int], body: list[bytes]
) -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"})
    request.opaque = opaque
    result = GetResult(GetStatus.FOUND, *offsets, messages=body)
    expected = encode_command_parts(
        PullProcessor._response(request, result, 0), body_parts=list(body)
    )
    got = _FOUND.encode(opaque, result, body)
    assert b"".join(got) == b"".join(expected)
    assert got[1:] == body  # the records go out as they are, not joined


async def test_found_pull_in_the_binary_dialect_is_answered_in_kind() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        assert (await c.send("Bin", b"payload", queue_id=0)).code == 0
        json_resp, _ = await c.pull("G", "Bin", 0, 0)
        header = pull_header(
            consumer_group="G",
            topic="Bin",
            sys_flag=int(PullSysFlag.SUBSCRIPTION),
            subscription="*",
        )
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext())
        cmd.serialize_type = SerializeType.ROCKETMQ
        conn = await c.pool.get(broker.address)
        resp = await conn.request(cmd)
        assert resp.serialize_type == SerializeType.ROCKETMQ
        assert json_resp.serialize_type == SerializeType.JSON
        assert (resp.code, resp.remark, resp.ext_fields) == (
            json_resp.code,
            json_resp.remark,
            json_resp.ext_fields,
        )
        assert [r.body for r in decode_messages(resp.body)] == [b"payload"]
