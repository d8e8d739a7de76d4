"""Replays frames captured from the C++ client 1.x and ali-ons 3.12 against the broker: the
exact bytes those clients put on the wire (JSON numbers and booleans in extFields, a trailing
newline after the header, ``batch: "0"``, heartbeat subscriptions without tag sets, empty
ACL fields) must all be served as a Java broker serves them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import FrameDecoder
from aiorocket._protocol.message import decode_messages
from aiorocket.embedded.topics import TopicConfig
from tests.embedded.test_broker_kit import running_broker

CAPTURES = Path(__file__).parent.parent / "data" / "captures"


async def _response(
    reader: asyncio.StreamReader, decoder: FrameDecoder, opaque: int
) -> RemotingCommand:
    while True:
        cmd = decoder.next_command()
        if isinstance(cmd, RemotingCommand):
            if cmd.is_response and cmd.opaque == opaque:
                return cmd
            # a NOTIFY_CONSUMER_IDS_CHANGED the broker sends once the client has heartbeated
            assert cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
            continue
        data = await asyncio.wait_for(reader.read(65536), 5)
        assert data, "the broker closed the connection"
        decoder.feed(data)


@pytest.mark.parametrize("capture", ["cpp-client-1.x.jsonl", "ali-ons-3.12.jsonl"])
async def test_captured_client_frames_are_served(capture: str) -> None:
    frames = [json.loads(line) for line in (CAPTURES / capture).read_text().splitlines()]
    async with running_broker(long_poll_max_hold=0.1) as broker:
        # The capturing broker had given %RETRY%CG several queues; the C++ client pulls two.
        broker.topics.put(TopicConfig(name="%RETRY%CG", read_queue_nums=4, write_queue_nums=4))
        # TopicA existed there too (the captures start with its route lookup answered 0); a
        # lookup creates nothing here either (docs/protocol.md §7.5).
        broker.topics.put(TopicConfig(name="TopicA", read_queue_nums=4, write_queue_nums=4))
        host, port = broker.address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        decoder = FrameDecoder()
        sent_bodies: list[bytes] = []
        try:
            for frame in frames:
                writer.write(bytes.fromhex(frame["frame_hex"]))
                resp = await _response(reader, decoder, frame["header"]["opaque"])
                code = frame["code"]
                assert resp.serialize_type == 0
                assert all(isinstance(v, str) for v in resp.ext_fields.values())
                if code == RequestCode.PULL_MESSAGE:
                    assert resp.code in (0, 19), resp
                    if resp.code == 0:
                        records = decode_messages(resp.body)
                        assert {r.body for r in records} <= set(sent_bodies)
                else:
                    assert resp.code == 0, (code, resp.code, resp.remark)
                if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
                    raw = bytes.fromhex(frame["frame_hex"])
                    hlen = int.from_bytes(raw[4:8], "big") & 0xFFFFFF
                    sent_bodies.append(raw[8 + hlen :])
                    assert int(resp.ext_fields["queueOffset"]) >= 0
                    assert len(resp.ext_fields["msgId"]) == 32
        finally:
            writer.close()
        assert broker.topics.get("%RETRY%CG") is not None
        stored = sum(broker.store.max_offset("TopicA", q) for q in range(4))
        assert stored == len(sent_bodies) > 0
