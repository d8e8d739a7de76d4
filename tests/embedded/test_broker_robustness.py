"""R15 on the broker side (bad input hurts only its own connection), name validation before
the disk, and the optional ACL (docs/protocol.md §1.7, §8; docs/reliability.md R15)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from aiorocket._protocol import acl
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import FrameDecoder, encode_command
from aiorocket._protocol.headers import SendMessageRequestHeader
from tests.embedded.test_broker_kit import RawClient, running_broker


async def _raw(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = address.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _read_command(reader: asyncio.StreamReader) -> RemotingCommand:
    decoder = FrameDecoder()
    while True:
        cmd = decoder.next_command()
        if isinstance(cmd, RemotingCommand):
            return cmd
        data = await asyncio.wait_for(reader.read(65536), 2.0)
        assert data, "connection closed"
        decoder.feed(data)


async def test_unknown_code_gets_3_with_the_same_opaque_and_the_connection_stays() -> None:
    async with running_broker() as broker:
        reader, writer = await _raw(broker.address)
        cmd = RemotingCommand.request(9999, {"x": "1"})
        cmd.opaque = 4242
        writer.write(encode_command(cmd))
        resp = await _read_command(reader)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert resp.opaque == 4242
        assert resp.is_response
        ok = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"})
        ok.opaque = 4243
        writer.write(encode_command(ok))
        resp = await _read_command(reader)
        assert (resp.code, resp.opaque) == (0, 4243)
        writer.close()


BAD_FRAMES = {
    "oversized": struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16,
    "negative": struct.pack(">i", -5),
    "header_overruns": struct.pack(">iI", 8, 1000) + b"{}{}",
    "bad_json": struct.pack(">iI", 4 + 9, 9) + b"{not json",
    "unknown_dialect": struct.pack(">iI", 4 + 2, (7 << 24) | 2) + b"{}",
    "no_code": struct.pack(">iI", 4 + 2, 2) + b"{}",
}


@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
async def test_malformed_frame_closes_only_that_connection(name: str) -> None:
    async with running_broker() as broker, RawClient(broker.address) as good:
        assert (await good.send("Live", b"before")).code == 0
        reader, writer = await _raw(broker.address)
        writer.write(BAD_FRAMES[name])
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 2.0) == b""  # closed by the broker
        writer.close()
        assert (await good.send("Live", b"after")).code == 0
        assert [r.body for r in await good.pull_all("G", "Live", 0)] == [b"before", b"after"]


async def test_a_missing_header_field_is_a_system_error() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.request(RequestCode.PULL_MESSAGE, {"topic": "T"})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        resp = await c.request(RequestCode.SEND_MESSAGE_V2, {"b": "T"})
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert (await c.send("StillFine", b"x")).code == 0


def _dirs(root: Path) -> set[str]:
    return {p.name for p in (root / "consumequeue").iterdir()} if root.exists() else set()


@pytest.mark.parametrize(
    "name", ["../escape", "a/b", "with space", "x" * 128, "é", "", "semi;colon"]
)
async def test_invalid_names_never_touch_the_disk(tmp_path: Path, name: str) -> None:
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        if name:
            resp = await c.send(name, b"x")
            assert resp.code == ResponseCode.SYSTEM_ERROR
            resp, _ = await c.route(name)
            assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        resp, _ = await c.pull(name or "G", "T", 0, 0)
        assert resp.code in (ResponseCode.SYSTEM_ERROR, ResponseCode.TOPIC_NOT_EXIST)
        assert (await c.update_offset(name or "G", name or "x/y", 0, 1)).code == 1
        hb = await c.heartbeat("cid", consumer_group=name or "a b", topics={"T": "*"})
        assert hb.code == ResponseCode.SYSTEM_ERROR
        back = await c.request(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"offset": "0", "group": name or "a b", "delayLevel": "0"},
        )
        assert back.code == ResponseCode.SYSTEM_ERROR
        assert all(n in ("TBW102",) or "/" not in n for n in broker.topics.names())
        assert not any(name and name in n for n in broker.topics.names())
    assert not any(name and name in d for d in _dirs(tmp_path))
    text = (
        (tmp_path / "config" / "topics.json").read_text()
        if (tmp_path / "config" / "topics.json").exists()
        else ""
    )
    assert not name or name not in text


def _signed_send(topic: str, *, access_key: str, secret_key: str) -> dict[str, str]:
    header = SendMessageRequestHeader(
        producer_group="PG", topic=topic, queue_id=0, born_timestamp=1, properties="a\x01b"
    ).to_ext(v2=True)
    header["OnsChannel"] = "ALIYUN"
    return header


async def test_acl_on_requires_a_valid_signature() -> None:
    async with (
        running_broker(access_key="rocketmq2", secret_key="12345678") as broker,
        RawClient(broker.address) as c,
    ):
        body = b"secret"
        ext = _signed_send("Acl", access_key="rocketmq2", secret_key="12345678")
        signed = acl.signed_ext_fields(ext, body, access_key="rocketmq2", secret_key="12345678")
        assert (await c.request(RequestCode.SEND_MESSAGE_V2, signed, body)).code == 0

        unsigned = await c.request(RequestCode.SEND_MESSAGE_V2, ext, body)
        assert unsigned.code == ResponseCode.SYSTEM_ERROR
        wrong = acl.signed_ext_fields(ext, body, access_key="rocketmq2", secret_key="nope")
        assert (await c.request(RequestCode.SEND_MESSAGE_V2, wrong, body)).code == 1
        other = acl.signed_ext_fields(ext, body, access_key="someone", secret_key="12345678")
        assert (await c.request(RequestCode.SEND_MESSAGE_V2, other, body)).code == 1
        tampered = dict(signed)
        tampered["b"] = "Acl2"
        assert (await c.request(RequestCode.SEND_MESSAGE_V2, tampered, body)).code == 1
        assert (await c.request(RequestCode.SEND_MESSAGE_V2, signed, b"changed")).code == 1
        # the name-server codes are not checked, as on a 4.x name server
        resp, _ = await c.route("Acl")
        assert resp.code == 0
        # nothing unsigned got stored
        assert broker.store.max_offset("Acl", 0) == 1


async def test_acl_off_ignores_signature_fields() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        ext = _signed_send("NoAcl", access_key="", secret_key="")
        ext |= {"AccessKey": "", "Signature": "", "OnsChannel": ""}  # what C++ always sends
        assert (await c.request(RequestCode.SEND_MESSAGE_V2, ext, b"x")).code == 0
        ext |= {"AccessKey": "ak", "Signature": "garbage"}
        assert (await c.request(RequestCode.SEND_MESSAGE_V2, ext, b"y")).code == 0
