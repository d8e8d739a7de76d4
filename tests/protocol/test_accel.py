"""The compiled codec against the pure-Python one: the same results and the same errors."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiorocket._protocol import accel, frame, message
from aiorocket._protocol.codes import SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import NEED_DATA, FrameDecoder, encode_command
from aiorocket._protocol.message import MessageRecord, decode_messages, encode_message
from aiorocket.errors import RemoteProtocolError

DATA = Path(__file__).parent.parent / "data"
T = TypeVar("T")

needs_ext = pytest.mark.skipif(not accel.AVAILABLE, reason=accel.describe())


def _both(fn: Callable[[], T]) -> tuple[T | str, T | str]:
    """``fn()`` with the pure-Python codec and with the compiled one; an exception becomes
    its type and message."""
    out: list[T | str] = []
    for compiled in (False, True):
        accel.use(compiled)
        try:
            out.append(fn())
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
        finally:
            accel.use(accel.ACTIVE)
    return out[0], out[1]


def _split(stream: bytes) -> list[RemotingCommand]:
    dec = FrameDecoder()
    dec.feed(stream)
    cmds = []
    while (cmd := dec.next_command()) is not NEED_DATA:
        cmds.append(cmd)
    assert not dec.buffered
    return cmds


def _golden_frames() -> list[bytes]:
    frames = [
        bytes.fromhex(json.loads(line)["frame_hex"])
        for path in sorted((DATA / "captures").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    frames += [p.read_bytes() for p in sorted((DATA / "vectors").glob("*.bin"))]
    return frames


def test_switch_selects_the_implementation() -> None:
    """accel.use swaps the functions the codec calls, and refuses a missing extension."""
    accel.use(False)
    try:
        assert message._decode_run_impl is message._decode_run
        assert FrameDecoder.next_command is frame._next_command_py
    finally:
        accel.use(accel.ACTIVE)
    if accel.AVAILABLE:
        accel.use(True)
        try:
            assert message._decode_run_impl is not message._decode_run
            assert FrameDecoder.next_command is not frame._next_command_py
        finally:
            accel.use(accel.ACTIVE)
    else:
        with pytest.raises(RuntimeError):
            accel.use(True)


@needs_ext
def test_golden_captures_decode_identically() -> None:
    """Every captured frame and docs/protocol.md vector, one by one and as one stream, decodes to
    the same commands; the records in the pull-response vector too."""
    frames = _golden_frames()
    assert len(frames) >= 30
    for raw in frames:
        py, c = _both(lambda raw=raw: _split(raw))  # type: ignore[misc]
        assert py == c
        assert isinstance(py, list)
    py, c = _both(lambda: _split(b"".join(frames)))
    assert py == c
    bodies = [cmd.body for cmd in _split(b"".join(frames)) if cmd.code == 0 and cmd.body]
    assert bodies  # v2: a pull response carrying a record
    for body in bodies:
        py_recs, c_recs = _both(lambda body=body: decode_messages(body))  # type: ignore[misc]
        assert py_recs == c_recs
        assert isinstance(py_recs, list)


@needs_ext
def test_results_are_exact_types() -> None:
    """Compiled results are the same classes with the same field types (not just equal)."""
    rec = MessageRecord(
        "T", b"x", 1, 2, 3, 4, 0, 5, "10.0.0.1", 6, 7, "10.0.0.2", 8, 9, 10, {"K": "v"}
    )
    accel.use(True)
    try:
        (got,) = decode_messages(encode_message(rec))
        cmd = frame.decode_frame(
            encode_command(
                RemotingCommand(5, 1, 0, "JAVA", 9, None, {"a": "b"}, b"", SerializeType.ROCKETMQ)
            )
        )
    finally:
        accel.use(accel.ACTIVE)
    assert type(got) is MessageRecord
    assert all(type(getattr(got, f)) is type(getattr(rec, f)) for f in MessageRecord.__slots__)
    assert type(cmd) is RemotingCommand
    assert cmd.serialize_type is SerializeType.ROCKETMQ
    assert cmd.remark is None
    assert cmd.ext_fields == {"a": "b"}


_HOSTS = st.sampled_from(["10.0.0.1", "192.168.255.254", "::1", "fe80::1:2"])
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=6)


@st.composite
def _record_bytes(draw: st.DrawFn) -> bytes:
    born, store = draw(_HOSTS), draw(_HOSTS)
    sys_flag = draw(st.sampled_from([0, 1, 4])) | (0x10 if ":" in born else 0)
    sys_flag |= 0x20 if ":" in store else 0
    rec = MessageRecord(
        topic=draw(_TEXT),
        body=draw(st.binary(max_size=20)),
        queue_id=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=0,
        queue_offset=draw(st.integers(-(2**63), 2**63 - 1)),
        commit_log_offset=draw(st.integers(0, 2**40)),
        sys_flag=sys_flag,
        born_timestamp=draw(st.integers(0, 2**45)),
        born_host=born,
        born_port=draw(st.integers(0, 65535)),
        store_timestamp=1,
        store_host=store,
        store_port=10911,
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=0,
        properties=draw(st.dictionaries(_TEXT.filter(bool), _TEXT.filter(bool), max_size=3)),
        magic=draw(st.sampled_from([message.MAGIC_V1, message.MAGIC_V2])),
    )
    return encode_message(rec)


@needs_ext
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record_bytes(), min_size=1, max_size=3), st.data())
def test_mutated_records_give_the_same_result_or_error(records: list[bytes], data: Any) -> None:
    """Records with bytes overwritten, cut or appended: equal records or the same error."""
    body = bytearray(b"".join(records))
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xC3, 0xFF]))
    cut = data.draw(st.integers(0, len(body)))
    blob = bytes(body[:cut] + data.draw(st.binary(max_size=4)))
    py, c = _both(lambda: decode_messages(blob))
    assert py == c


@needs_ext
@settings(max_examples=600, deadline=None)
@given(
    st.integers(-(2**15), 2**15 - 1),
    st.dictionaries(_TEXT.filter(bool), _TEXT, max_size=4),
    st.one_of(st.none(), _TEXT),
    st.data(),
)
def test_mutated_binary_frames_give_the_same_result_or_error(
    code: int, ext: dict[str, str], remark: str | None, data: Any
) -> None:
    """Binary-header frames with bytes overwritten or cut: equal commands or the same error
    (the decoder's poisoned state included)."""
    cmd = RemotingCommand(code, 3, 1, "JAVA", 7, remark, ext, b"body", SerializeType.ROCKETMQ)
    stream = bytearray(encode_command(cmd) * 2)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(stream) - 1))
        stream[i] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xC3, 0xFF]))
    blob = bytes(stream[: data.draw(st.integers(0, len(stream)))])

    def run() -> list[object]:
        dec = FrameDecoder(max_frame_size=4096)
        dec.feed(blob)
        out: list[object] = []
        for _ in range(3):
            try:
                out.append(dec.next_command())
            except RemoteProtocolError as exc:
                out.append(f"{type(exc).__name__}: {exc}")
        return [*out, dec.buffered]

    py, c = _both(run)
    assert py == c


def test_environment_variable_forces_pure_python() -> None:
    """AIOROCKET_NO_EXTENSIONS=1 leaves the pure-Python functions in place at import."""
    code = (
        "from aiorocket._protocol import accel, frame, message\n"
        "assert not accel.ACTIVE\n"
        "assert message._decode_run_impl is message._decode_run\n"
        "assert frame.FrameDecoder.next_command is frame._next_command_py\n"
        "print(accel.describe())\n"
    )
    env = {**os.environ, "AIOROCKET_NO_EXTENSIONS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert "pure-Python codec" in out.stdout


@needs_ext
def test_binary_header_field_widths() -> None:
    """Hand-built binary headers: negative int16 code and version, an unknown language, and
    a value that is not UTF-8."""

    def frame_of(value: bytes) -> bytes:
        ext = struct.pack(">H", 1) + b"k" + struct.pack(">i", len(value)) + value
        header = struct.pack(">hBhiii", -2, 99, -3, -4, 5, 0) + struct.pack(">i", len(ext)) + ext
        return struct.pack(">iI", 4 + len(header), (1 << 24) | len(header)) + header

    py, c = _both(lambda: frame.decode_frame(frame_of("é".encode())))
    assert py == c
    assert isinstance(py, RemotingCommand)
    assert (py.code, py.version, py.language, py.opaque) == (-2, -3, "OTHER", -4)
    assert py.ext_fields == {"k": "é"}
    py, c = _both(lambda: frame.decode_frame(frame_of(b"v\xc3")))
    assert py == c == "RemoteProtocolError: binary header string is not UTF-8"
