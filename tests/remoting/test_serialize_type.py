"""The client's header dialect setting (``serialize_type``): binary requests, responses in
the dialect of the request they answer, the binary pull template, the per-dialect counts."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket import Admin, Producer, PullConsumer, PushConsumer, QueueReader
from aiorocket._client.binary import BinaryRequestTemplate
from aiorocket._client.instance import ClientInstance
from aiorocket._client.pull import PreparedPull
from aiorocket._protocol.codes import RequestCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import RequestTemplate, decode_frame, encode_command
from aiorocket._remoting import Connection, Dispatcher, memory_pipe
from aiorocket.app.settings import load_app_settings
from aiorocket.errors import ConfigurationError, LocalProtocolError
from aiorocket.settings import ClientSettings, ConsumerSettings, build_settings
from tests._harness.protocol import pull_header

JSON, BINARY = SerializeType.JSON, SerializeType.ROCKETMQ

# Text without surrogates (UTF-8 cannot carry them), non-ASCII included.
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_int32 = st.integers(-(2**31), 2**31 - 1)
_ints = st.integers(-(2**63), 2**63 - 1)


# -- the binary template ----------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(_text.filter(bool), _text, min_size=1, max_size=8),
    st.data(),
    _int32,
    st.none() | _text,
    st.binary(max_size=32),
    st.sampled_from(["PYTHON", "JAVA", "GO"]),
)
def test_binary_template_frames_decode_to_the_command(
    ext: dict[str, str],
    data: st.DataObject,
    opaque: int,
    remark: str | None,
    body: bytes,
    language: str,
) -> None:
    keys = data.draw(st.lists(st.sampled_from(sorted(ext)), unique=True))
    cmd = RemotingCommand(code=11, remark=remark, ext_fields=ext, body=body, language=language)
    template = BinaryRequestTemplate(cmd, keys)
    values = data.draw(st.lists(_ints, min_size=len(keys), max_size=len(keys)))
    frame = b"".join(template.encode(opaque, values))
    expected = template.command(values, opaque)
    assert expected.serialize_type == BINARY
    assert expected.ext_fields == {**ext, **{k: str(v) for k, v in zip(keys, values, strict=True)}}
    # The same command the general encoder writes (entries in another order, which the
    # dialect leaves free); empty values and an empty remark decode as absent (§1.5).
    got = decode_frame(frame)
    assert got == decode_frame(encode_command(expected))
    assert got.ext_fields == {k: v for k, v in expected.ext_fields.items() if v}
    assert got.remark == (remark or None)
    assert (got.opaque, got.language, got.body, got.serialize_type) == (
        opaque,
        language,
        body,
        BINARY,
    )
    assert len(frame) == len(encode_command(expected))


def test_binary_pull_template_of_a_prepared_pull() -> None:
    header = pull_header(
        consumer_group="g",
        topic="T",
        queue_id=1,
        sys_flag=6,
        suspend_timeout_millis=15000,
        subscription="*",
        sub_version=1,
        expression_type="TAG",
        broker_name="broker-a",
    )
    prepared = PreparedPull(header)
    template = prepared.binary_template
    assert prepared.binary_template is template  # made once
    for values in [(0, 0, 0), (9, 7, 5), (12_345_678_901, 3, 12_345_678_900), (10**9, 1, 0)]:
        got = decode_frame(b"".join(template.encode(3, values)))
        as_json = decode_frame(b"".join(prepared.template.encode(3, values)))
        assert got.serialize_type == BINARY
        assert as_json.serialize_type == JSON
        as_json.serialize_type = BINARY
        assert got == as_json


def test_binary_template_refuses_what_the_dialect_cannot_carry() -> None:
    with pytest.raises(ValueError, match="not in the ext fields"):
        BinaryRequestTemplate(RemotingCommand.request(11, {"a": "1"}), ("b",))
    with pytest.raises(LocalProtocolError, match="int16"):
        BinaryRequestTemplate(RemotingCommand.request(200_050, {"a": "1"}), ("a",))
    with pytest.raises(LocalProtocolError, match="language"):
        BinaryRequestTemplate(RemotingCommand(11, language="COBOL"), ())
    with pytest.raises(LocalProtocolError, match="ext key"):
        BinaryRequestTemplate(RemotingCommand.request(11, {"": "x", "a": "1"}), ("a",))


# -- connections --------------------------------------------------------------------------


async def _echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.make_response(0, ext_fields={"got": cmd.ext_fields.get("n", "")})


async def test_binary_connection_sends_binary_and_answers_in_the_request_dialect() -> None:
    served: list[SerializeType] = []

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        served.append(cmd.serialize_type)
        return await _echo(conn, cmd)

    dispatcher = Dispatcher()
    dispatcher.register(RequestCode.HEART_BEAT, handler)
    dispatcher.register(RequestCode.PULL_MESSAGE, handler)
    async with asyncio.TaskGroup() as tg:
        server = Connection(handler=dispatcher, spawn=tg.create_task)
        client = Connection(handler=dispatcher, spawn=tg.create_task, serialize_type=BINARY)
        memory_pipe(client, server)
        # requests of the binary client: binary whatever the command says
        resp = await client.request(RemotingCommand.request(34, {"n": "1"}))
        assert (resp.ext_fields, resp.serialize_type) == ({"got": "1"}, BINARY)
        await client.send_oneway(RemotingCommand.request(34, {"n": "2"}, oneway=True))
        # a JSON template is re-encoded in the connection's dialect; a binary one sent as is
        json_template = RequestTemplate(RemotingCommand.request(11, {"n": "0"}), ("n",))
        resp = await client.request_template(json_template, (3,))
        assert (resp.ext_fields, resp.serialize_type) == ({"got": "3"}, BINARY)
        bin_template = BinaryRequestTemplate(RemotingCommand.request(11, {"n": "0"}), ("n",))
        resp = await client.request_template(bin_template, (4,))
        assert (resp.ext_fields, resp.serialize_type) == ({"got": "4"}, BINARY)
        # a request from the peer (a broker's) in JSON is answered in JSON, as Java answers
        resp = await server.request(RemotingCommand.request(34, {"n": "5"}))
        assert (resp.ext_fields, resp.serialize_type) == ({"got": "5"}, JSON)
        await asyncio.sleep(0.01)  # the oneway request's handler
        assert served == [BINARY, BINARY, BINARY, BINARY, JSON]
        assert server.requests_received == {JSON: 0, BINARY: 4}
        assert server.responses_received == {JSON: 1, BINARY: 0}
        assert client.requests_received == {JSON: 1, BINARY: 0}
        assert client.responses_received == {JSON: 0, BINARY: 3}
        server.close()
        await client.wait_closed()


async def test_default_connection_keeps_the_command_dialect() -> None:
    async with asyncio.TaskGroup() as tg:
        server = Connection(handler=_echo, spawn=tg.create_task)
        client = Connection()
        memory_pipe(client, server)
        resp = await client.request(RemotingCommand.request(34, {"n": "1"}))
        assert resp.serialize_type == JSON
        template = RequestTemplate(RemotingCommand.request(11, {"n": "0"}), ("n",))
        assert (await client.request_template(template, (1,))).serialize_type == JSON
        assert server.requests_received == {JSON: 2, BINARY: 0}
        assert client.responses_received == {JSON: 2, BINARY: 0}
        server.close()
        await client.wait_closed()


async def test_binary_connection_signs_the_whole_binary_command() -> None:
    # A request hook (ACL signing) sees the command of a template, in the binary dialect.
    seen: list[tuple[dict[str, str], SerializeType]] = []

    def hook(cmd: RemotingCommand) -> None:
        seen.append((dict(cmd.ext_fields), cmd.serialize_type))
        cmd.ext_fields["Signature"] = "sig"

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(0, ext_fields={"sig": cmd.ext_fields.get("Signature", "")})

    async with asyncio.TaskGroup() as tg:
        server = Connection(handler=handler, spawn=tg.create_task)
        client = Connection(request_hook=hook, serialize_type=BINARY)
        memory_pipe(client, server)
        template = BinaryRequestTemplate(RemotingCommand.request(11, {"n": "0"}), ("n",))
        resp = await client.request_template(template, (7,))
        assert (resp.ext_fields, resp.serialize_type) == ({"sig": "sig"}, BINARY)
        assert seen == [({"n": "7"}, BINARY)]
        server.close()
        await client.wait_closed()


# -- settings -------------------------------------------------------------------------------


def test_serialize_type_setting() -> None:
    assert build_settings(ClientSettings, {"namesrv": "127.0.0.1:9876"}).serialize_type == "json"
    s = build_settings(
        ConsumerSettings, {"namesrv": "a:1", "group": "g", "serialize_type": "rocketmq"}
    )
    assert s.serialize_type == "rocketmq"
    with pytest.raises(ConfigurationError, match="serialize_type"):
        build_settings(ClientSettings, {"namesrv": "a:1", "serialize_type": "ROCKETMQ "})
    # every client kind takes it
    for kind in (Producer, QueueReader, Admin):
        assert kind(namesrv="a:1", serialize_type="rocketmq").settings.serialize_type == "rocketmq"
    for consumer in (PushConsumer, PullConsumer):
        c = consumer(namesrv="a:1", group="g", serialize_type="rocketmq")
        assert c.settings.serialize_type == "rocketmq"


def test_app_settings_pass_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "serialize_type" not in load_app_settings({}).client_settings()
    monkeypatch.setenv("AIOROCKET_SERIALIZE_TYPE", "rocketmq")
    assert load_app_settings({}).client_settings()["serialize_type"] == "rocketmq"
    assert load_app_settings({"serialize_type": "json"}).serialize_type == "json"
    monkeypatch.setenv("AIOROCKET_SERIALIZE_TYPE", "xml")
    with pytest.raises(ConfigurationError, match="serialize_type"):
        load_app_settings({})


async def test_client_instance_connections_use_the_setting() -> None:
    for value, expected in (("json", False), ("rocketmq", True)):
        cs = build_settings(ClientSettings, {"namesrv": "127.0.0.1:9", "serialize_type": value})
        client = ClientInstance(cs)
        assert client.connections() == {}
        client.start(asyncio.get_running_loop().create_task)
        assert client._binary is expected
        assert client._pool is not None
        assert client._pool._stype == (BINARY if expected else None)
        await client.close()
