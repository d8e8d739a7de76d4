"""Frame splitting and both header dialects, against real captures and the docs/protocol.md vectors."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol.codes import LanguageCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import (
    NEED_DATA,
    FrameDecoder,
    RequestTemplate,
    decode_frame,
    encode_command,
    encode_command_parts,
)
from aiorocket.errors import FrameTooLargeError, LocalProtocolError, RemoteProtocolError

DATA = Path(__file__).parent.parent / "data"


def _captures() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((DATA / "captures").glob("*.jsonl")):
        for i, line in enumerate(path.read_text().splitlines()):
            out.append((f"{path.stem}:{i}", json.loads(line)))
    return out


CAPTURES = _captures()


def _expected_ext(raw: dict[str, Any]) -> dict[str, str]:
    # docs/protocol.md §1.8: numbers to decimal text, booleans to "true"/"false".
    out = {}
    for k, v in raw.items():
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif v is not None:
            out[k] = str(v)
    return out


def test_captures_are_present() -> None:
    assert len(CAPTURES) >= 30


@pytest.mark.parametrize(("name", "cap"), CAPTURES, ids=[n for n, _ in CAPTURES])
def test_captured_frame_decodes_exactly(name: str, cap: dict[str, Any]) -> None:
    frame = bytes.fromhex(cap["frame_hex"])
    cmd = decode_frame(frame)
    header = cap["header"]
    assert cmd.serialize_type == cap["stype"] == SerializeType.JSON
    assert cmd.code == cap["code"] == header["code"]
    assert cmd.opaque == header["opaque"]
    assert cmd.flag == cap["flag"] == header["flag"]
    assert cmd.language == header["language"]
    assert cmd.version == header["version"]
    assert cmd.remark == header.get("remark")
    assert cmd.ext_fields == _expected_ext(header.get("extFields", {}))
    assert not cmd.is_response
    (hlen,) = struct.unpack_from(">I", frame, 4)
    assert cmd.body == frame[8 + hlen :]


def test_cpp_header_trailing_newline_is_tolerated() -> None:
    cpp = [c for n, c in CAPTURES if n.startswith("cpp")]
    frame = bytes.fromhex(cpp[0]["frame_hex"])
    assert frame.endswith(b"}\n")  # the C++ JSON writer appends a newline (§1.4.1)
    assert decode_frame(frame).code == 105


def test_v1_heartbeat_decodes_and_reencodes_byte_exactly() -> None:
    frame = (DATA / "vectors" / "v1.bin").read_bytes()
    cmd = decode_frame(frame)
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version) == (34, 1, 0, "JAVA", 409)
    assert cmd.ext_fields == {}
    assert cmd.remark is None
    assert len(cmd.body) == 585
    assert cmd.body.startswith(b'{"clientID":"192.168.0.10@12345#1"')
    assert encode_command(cmd) == frame


def test_v1_expected_response() -> None:
    req = decode_frame((DATA / "vectors" / "v1.bin").read_bytes())
    resp = req.make_response(0)
    header = encode_command(resp)[8:]
    # the spec's vector is a Java peer's answer; ours names our own language
    assert header == (
        b'{"code":0,"flag":1,"language":"PYTHON","opaque":1,'
        b'"serializeTypeCurrentRPC":"JSON","version":409}'
    )


def test_v2_pull_response_decodes() -> None:
    frame = (DATA / "vectors" / "v2.bin").read_bytes()
    cmd = decode_frame(frame)
    assert cmd.is_response
    assert (cmd.code, cmd.opaque, cmd.remark) == (0, 7, "FOUND")
    assert cmd.ext_fields == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "1",
        "minOffset": "0",
        "maxOffset": "1",
    }
    assert len(cmd.body) == 198
    assert cmd.body[:4] == b"\x00\x00\x00\xc6"
    assert encode_command(cmd) == frame  # ext keys keep their wire order


def test_v3_and_v4_are_the_same_command_in_two_dialects() -> None:
    v3 = decode_frame((DATA / "vectors" / "v3.bin").read_bytes())
    v4 = decode_frame((DATA / "vectors" / "v4.bin").read_bytes())
    assert v3.serialize_type == SerializeType.JSON
    assert v4.serialize_type == SerializeType.ROCKETMQ
    assert v3.ext_fields["i"] == (
        "KEYS\x01key1\x02TAGS\x01TagA\x02UNIQ_KEY\x017F00000130391234567805F5E1000001\x02WAIT\x01true"
    )
    for cmd in (v3, v4):
        assert (cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version) == (
            310,
            3,
            0,
            "JAVA",
            409,
        )
        assert cmd.body == b"Hello RocketMQ"
    assert v3.ext_fields == v4.ext_fields
    assert list(v3.ext_fields) == list("abcdefghijkmn")
    assert encode_command(v3) == (DATA / "vectors" / "v3.bin").read_bytes()
    assert encode_command(v4) == (DATA / "vectors" / "v4.bin").read_bytes()


def test_v5_header_word_and_notify() -> None:
    cmd = RemotingCommand(code=40, opaque=5, flag=2, ext_fields={"consumerGroup": "GID_demo"})
    frame = encode_command(cmd)
    (length, word) = struct.unpack_from(">iI", frame)
    assert word >> 24 == 0
    assert length == 4 + (word & 0xFFFFFF)
    assert frame[8:] == (
        b'{"code":40,"extFields":{"consumerGroup":"GID_demo"},"flag":2,"language":"PYTHON",'
        b'"opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    assert decode_frame(frame).is_oneway


def test_response_uses_the_request_dialect() -> None:
    v4 = decode_frame((DATA / "vectors" / "v4.bin").read_bytes())
    resp = v4.make_response(0, ext_fields={"msgId": "X", "queueId": "1"})
    frame = encode_command(resp)
    assert frame[4] == 1  # ROCKETMQ serialize type in the top byte of the header word
    back = decode_frame(frame)
    assert back.is_response
    assert back.opaque == 3
    assert back.ext_fields == {"msgId": "X", "queueId": "1"}


# --- malformed input (R15, codec rows) -------------------------------------------------------


def _raw_frame(stype: int, header: bytes, body: bytes = b"") -> bytes:
    return (
        struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body
    )


def test_oversized_length_rejected_before_buffering_the_frame() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    dec.feed(struct.pack(">i", 1025))
    with pytest.raises(FrameTooLargeError) as info:
        dec.next_command()
    assert info.value.length == 1025
    with pytest.raises(FrameTooLargeError):  # poisoned
        dec.next_command()


def test_default_cap_is_16_mib() -> None:
    dec = FrameDecoder()
    dec.feed(struct.pack(">i", 16 * 1024 * 1024 + 1))
    with pytest.raises(FrameTooLargeError):
        dec.next_command()
    ok = FrameDecoder()
    ok.feed(struct.pack(">i", 16 * 1024 * 1024))
    assert ok.next_command() is NEED_DATA


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 3])
def test_negative_or_tiny_length_rejected(length: int) -> None:
    dec = FrameDecoder()
    dec.feed(struct.pack(">i", length) + b"\x00" * 8)
    with pytest.raises(FrameTooLargeError):
        dec.next_command()


def test_header_length_beyond_frame() -> None:
    frame = struct.pack(">iI", 10, 7) + b"{}" + b"xxxx"
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        decode_frame(frame)


def test_unknown_serialize_type() -> None:
    with pytest.raises(RemoteProtocolError, match="serialize type"):
        decode_frame(_raw_frame(2, b'{"code":1}'))


@pytest.mark.parametrize(
    "header",
    [
        b"{not json",
        b"[1,2]",
        b'{"opaque":1}',
        b'{"code":"x"}',
        b'{"code":true}',
        b'{"code":1,"extFields":[1]}',
        b'{"code":1,"extFields":{"a":{"b":1}}}',
        b'{"code":1,"remark":5}',
        b'{"code":99999999999}',
        b"\xff\xfe",
        b"[" * 100000,
    ],
)
def test_invalid_json_header(header: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_frame(_raw_frame(0, header))


def test_json_header_coerces_numbers_and_booleans() -> None:
    header = b'{"code":11,"extFields":{"queueId":3,"x":true,"y":false,"z":null,"f":1.5},"opaque":2}'
    cmd = decode_frame(_raw_frame(0, header))
    assert cmd.ext_fields == {"queueId": "3", "x": "true", "y": "false", "f": "1.5"}
    assert cmd.language == "JAVA"


@pytest.mark.parametrize(
    "header",
    [
        b"\x00" * 20,  # shorter than the fixed part
        struct.pack(">hBhiii", 1, 0, 1, 1, 0, 100) + b"\x00" * 4,  # remark overruns
        struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", 10),  # ext overruns
        struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", 3) + b"\x00\x05a",
        struct.pack(">hBhiii", 1, 0, 1, 1, 0, 2) + b"\xff\xff" + struct.pack(">i", 0),
    ],
)
def test_invalid_binary_header(header: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_frame(_raw_frame(1, header))


def test_binary_empty_strings_read_as_absent() -> None:
    ext = b"\x00\x01a" + struct.pack(">i", 0) + b"\x00\x01b" + struct.pack(">i", 1) + b"x"
    header = struct.pack(">hBhiii", 1, 9, 1, 1, 0, 0) + struct.pack(">i", len(ext)) + ext
    cmd = decode_frame(_raw_frame(1, header))
    assert cmd.ext_fields == {"b": "x"}
    assert cmd.remark is None
    assert cmd.language == "GO"


def test_local_errors_on_unencodable_commands() -> None:
    with pytest.raises(LocalProtocolError):
        encode_command(RemotingCommand(code=200050, serialize_type=SerializeType.ROCKETMQ))
    with pytest.raises(LocalProtocolError):
        encode_command(
            RemotingCommand(code=1, language="KLINGON", serialize_type=SerializeType.ROCKETMQ)
        )
    with pytest.raises(LocalProtocolError):
        encode_command(RemotingCommand(code=1, remark="\ud800"))


def test_body_parts_are_sent_unjoined() -> None:
    cmd = RemotingCommand(code=0, flag=1, ext_fields={"a": "b"})
    parts = encode_command_parts(cmd, [b"abc", b"defg"])
    assert parts[1:] == [b"abc", b"defg"]
    assert decode_frame(b"".join(parts)).body == b"abcdefg"


# --- properties (Hypothesis) -----------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
_nonempty = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int16 = st.integers(-(2**15), 2**15 - 1)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    binary = draw(st.booleans())
    if binary:
        ext = draw(st.dictionaries(_nonempty, _nonempty, max_size=6))
        remark = draw(st.none() | _nonempty)
        code, version = draw(_int16), draw(_int16)
    else:
        ext = draw(st.dictionaries(_text, _text, max_size=6))
        remark = draw(st.none() | _text)
        code, version = draw(_int32), draw(_int32)
    return RemotingCommand(
        code=code,
        opaque=draw(_int32),
        flag=draw(st.sampled_from([0, 1, 2, 3]) | _int32),
        language=draw(st.sampled_from([m.name for m in LanguageCode])),
        version=version,
        remark=remark,
        ext_fields=ext,
        body=draw(st.binary(max_size=64)),
        serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON,
    )


@settings(max_examples=1500, deadline=None)
@given(commands())
def test_round_trip(cmd: RemotingCommand) -> None:
    assert decode_frame(encode_command(cmd)) == cmd


@settings(max_examples=500, deadline=None)
@given(st.lists(commands(), min_size=1, max_size=6), st.data())
def test_byte_by_byte_equals_all_at_once(cmds: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(encode_command(c) for c in cmds)
    whole = FrameDecoder()
    whole.feed(stream)
    at_once = []
    while (c := whole.next_command()) is not NEED_DATA:
        at_once.append(c)
    assert at_once == cmds
    # Byte by byte, and in random chunk sizes.
    for chunking in ("bytes", "random"):
        dec = FrameDecoder()
        got: list[RemotingCommand] = []
        i = 0
        while i < len(stream):
            step = 1 if chunking == "bytes" else data.draw(st.integers(1, 64))
            dec.feed(stream[i : i + step])
            i += step
            while (c := dec.next_command()) is not NEED_DATA:
                got.append(c)
        assert got == cmds
        assert dec.buffered == 0


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_protocol_errors(blob: bytes) -> None:
    dec = FrameDecoder(max_frame_size=4096)
    dec.feed(blob)
    try:
        while dec.next_command() is not NEED_DATA:
            pass
    except RemoteProtocolError:
        pass


@settings(max_examples=2000, deadline=None)
@given(commands(), st.data())
def test_mutated_frames_raise_only_protocol_errors(
    cmd: RemotingCommand, data: st.DataObject
) -> None:
    frame = bytearray(encode_command(cmd))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(frame) - 1))
        frame[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    dec = FrameDecoder(max_frame_size=1 << 20)
    dec.feed(bytes(frame[:cut]))
    try:
        while dec.next_command() is not NEED_DATA:
            pass
    except RemoteProtocolError:
        pass


# --- receiving into the decoder's own buffer (BufferedProtocol) ------------------------------


def _receive(dec: FrameDecoder, data: bytes, chunk: int) -> list[RemotingCommand]:
    """What a buffered transport does: recv_into the lent view, then buffer_updated."""
    got: list[RemotingCommand] = []
    i = 0
    while i < len(data):
        view = dec.get_buffer(-1)
        assert len(view) > 0
        n = min(len(view), chunk, len(data) - i)
        view[:n] = data[i : i + n]
        dec.buffer_updated(n)
        i += n
        while (c := dec.next_command()) is not NEED_DATA:
            got.append(c)
    return got


@settings(max_examples=300, deadline=None)
@given(st.lists(commands(), min_size=1, max_size=8), st.integers(1, 100))
def test_buffered_receive_equals_feed(cmds: list[RemotingCommand], chunk: int) -> None:
    stream = b"".join(encode_command(c) for c in cmds)
    dec = FrameDecoder()
    assert _receive(dec, stream, chunk) == cmds
    assert dec.buffered == 0


def test_buffered_receive_makes_room_for_a_whole_large_frame() -> None:
    # Once the length prefix is in, the lent buffer holds the rest of the frame: a 3 MiB
    # response arrives in place instead of growing piecewise.
    big = RemotingCommand(code=0, opaque=1, flag=1, body=b"x" * (3 << 20))
    small = RemotingCommand(code=0, opaque=2, flag=1, body=b"y" * 100)
    frame = encode_command(big)
    dec = FrameDecoder()
    view = dec.get_buffer(-1)
    assert len(view) < len(frame)
    view[:8] = frame[:8]
    dec.buffer_updated(8)
    assert dec.next_command() is NEED_DATA
    view = dec.get_buffer(-1)
    assert len(view) >= len(frame) - 8
    view[: len(frame) - 8] = frame[8:]
    dec.buffer_updated(len(frame) - 8)
    assert dec.next_command() == big
    # The emptied large buffer is given back; decoding goes on.
    assert len(dec.get_buffer(-1)) < 1 << 20
    assert _receive(dec, encode_command(small) * 3, 1000) == [small] * 3


def test_buffered_receive_keeps_a_partial_frame_when_the_buffer_wraps() -> None:
    # Frames that straddle the end of the buffer are moved to its front, intact.
    cmds = [
        RemotingCommand(code=i, opaque=i, body=bytes([i % 256]) * (5000 + i)) for i in range(60)
    ]
    stream = b"".join(encode_command(c) for c in cmds)
    dec = FrameDecoder()
    assert _receive(dec, stream, 7001) == cmds


def test_buffered_receive_gives_no_room_for_a_bad_prefix() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    view = dec.get_buffer(-1)
    view[:4] = struct.pack(">i", 1 << 30)
    dec.buffer_updated(4)
    assert len(dec.get_buffer(-1)) < 1 << 20  # nothing allocated for the claimed length
    with pytest.raises(FrameTooLargeError):
        dec.next_command()


# --- request templates ----------------------------------------------------------------------

_ints = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(_text, _text, min_size=1, max_size=8),
    st.data(),
    _int32,
    st.none() | _text,
    st.binary(max_size=32),
)
def test_template_frames_equal_the_encoded_command(
    ext: dict[str, str], data: st.DataObject, opaque: int, remark: str | None, body: bytes
) -> None:
    keys = data.draw(st.lists(st.sampled_from(sorted(ext)), unique=True))
    cmd = RemotingCommand(code=11, remark=remark, ext_fields=ext, body=body)
    template = RequestTemplate(cmd, keys)
    values = data.draw(st.lists(_ints, min_size=len(keys), max_size=len(keys)))
    expected = template.command(values, opaque)
    assert expected.ext_fields == {**ext, **{k: str(v) for k, v in zip(keys, values, strict=True)}}
    assert b"".join(template.encode(opaque, values)) == encode_command(expected)
    assert decode_frame(b"".join(template.encode(opaque, values))) == expected


def test_template_keeps_percent_signs_and_refuses_what_it_cannot_render() -> None:
    ext = {"consumerGroup": "g%d%%s", "topic": "@0@ @@1@@", "queueOffset": "0"}
    cmd = RemotingCommand.request(11, ext)
    template = RequestTemplate(cmd, ("queueOffset",))
    back = decode_frame(b"".join(template.encode(5, (42,))))
    assert back.ext_fields == {**ext, "queueOffset": "42"}
    assert back.opaque == 5
    with pytest.raises(ValueError, match="not in the ext fields"):
        RequestTemplate(cmd, ("nope",))
    binary = RemotingCommand(code=11, ext_fields={"a": "1"}, serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(ValueError, match="JSON"):
        RequestTemplate(binary, ("a",))
