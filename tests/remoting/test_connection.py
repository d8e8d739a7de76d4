"""The connection layer over real loopback TCP (and one in-memory unit test of the seam)."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import time

import pytest

from aiorocket._protocol.codes import FLAG_RESPONSE, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import FrameDecoder, RequestTemplate, encode_command
from aiorocket._remoting import Connection, ConnectionPool, Dispatcher, Server, memory_pipe
from aiorocket._remoting.pool import parse_address
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionClosedError,
    RequestTimeoutError,
)


async def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.make_response(0, ext_fields={"echo": cmd.ext_fields.get("n", "")}, body=cmd.body)


async def slow(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    await asyncio.sleep(float(cmd.ext_fields.get("sleep", "0")))
    return cmd.make_response(0)


def _dispatcher() -> Dispatcher:
    d = Dispatcher()
    d.register(RequestCode.HEART_BEAT, echo)
    d.register(RequestCode.PULL_MESSAGE, slow)
    return d


async def _raw_peer(pool: ConnectionPool) -> tuple[socket.socket, socket.socket, Connection]:
    """A listening socket on a free port, the peer socket it accepted and ``pool``'s
    connection to it."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen()
    lsock.setblocking(False)
    get = asyncio.create_task(pool.get(f"127.0.0.1:{lsock.getsockname()[1]}"))
    peer, _ = await asyncio.get_running_loop().sock_accept(lsock)
    return lsock, peer, await get


def _addr(server: Server) -> str:
    return f"{server.address[0]}:{server.address[1]}"


async def test_100k_requests_many_in_flight_all_matched() -> None:
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        try:
            conn = await pool.get(_addr(server))
            total, window = 100_000, 512
            sem = asyncio.Semaphore(window)
            mismatches = 0
            max_in_flight = 0

            async def one(i: int) -> None:
                nonlocal mismatches, max_in_flight
                async with sem:
                    cmd = RemotingCommand.request(34, {"n": str(i)}, body=i.to_bytes(4, "big"))
                    fut = conn.request(cmd, timeout=30)
                    max_in_flight = max(max_in_flight, conn.pending_count + 1)
                    resp = await fut
                    if resp.ext_fields["echo"] != str(i) or resp.body != i.to_bytes(4, "big"):
                        mismatches += 1

            async with asyncio.TaskGroup() as tg:
                for i in range(total):
                    tg.create_task(one(i))
            assert mismatches == 0
            assert max_in_flight > 100
            assert conn.pending_count == 0
        finally:
            await pool.close()


async def test_unknown_code_gets_code_3_and_connection_stays_open() -> None:
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        conn = await pool.get(_addr(server))
        resp = await conn.request(RemotingCommand.request(9999))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert resp.remark == " request type 9999 not supported"
        ok = await conn.request(RemotingCommand.request(34, {"n": "1"}))
        assert ok.code == 0
        await pool.close()


async def test_peer_dying_mid_request_fails_every_pending_call_fast() -> None:
    accepted: list[socket.socket] = []
    loop = asyncio.get_running_loop()
    pool = ConnectionPool()
    lsock, peer, conn = await _raw_peer(pool)
    port = lsock.getsockname()[1]
    accepted.append(peer)
    calls = [
        asyncio.create_task(conn.request(RemotingCommand.request(34), timeout=30))
        for _ in range(50)
    ]
    await asyncio.sleep(0.05)
    # Half a frame, then an abortive close (RST) from the peer.
    peer.send(struct.pack(">i", 100) + b"\x00\x00\x00\x10{")
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    t0 = time.monotonic()
    peer.close()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert time.monotonic() - t0 < 1.0
    assert all(isinstance(r, ConnectionClosedError) for r in results)
    # The pool reconnects on the next use.
    get2 = asyncio.create_task(pool.get(f"127.0.0.1:{port}"))
    peer2, _ = await loop.sock_accept(lsock)
    conn2 = await get2
    assert conn2 is not conn
    peer2.close()
    lsock.close()
    await pool.close()


async def test_request_timeout() -> None:
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        conn = await pool.get(_addr(server))
        with pytest.raises(RequestTimeoutError):
            await conn.request(RemotingCommand.request(11, {"sleep": "5"}), timeout=0.1)
        assert conn.pending_count == 0
        # The late answer is dropped; the connection goes on working.
        resp = await conn.request(RemotingCommand.request(11, {"sleep": "0"}), timeout=3)
        assert resp.code == 0
        await pool.close()


async def test_unknown_opaque_response_is_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    pool = ConnectionPool()
    lsock, peer, conn = await _raw_peer(pool)
    call = asyncio.create_task(conn.request(RemotingCommand.request(34), timeout=5))
    data = await loop.sock_recv(peer, 4096)
    dec = FrameDecoder()
    dec.feed(data)
    req = dec.next_command()
    assert isinstance(req, RemotingCommand)
    stray = RemotingCommand(code=0, opaque=req.opaque + 1000, flag=FLAG_RESPONSE)
    with caplog.at_level(logging.DEBUG, logger="aiorocket.remoting"):
        await loop.sock_sendall(peer, encode_command(stray) + encode_command(req.make_response(0)))
        resp = await call
    assert resp.code == 0
    assert any("unknown opaque" in r.getMessage() for r in caplog.records)
    peer.close()
    lsock.close()
    await pool.close()


async def test_malformed_frame_closes_only_that_connection() -> None:
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        good = await pool.get(_addr(server))
        loop = asyncio.get_running_loop()
        for junk in (
            struct.pack(">i", 64 * 1024 * 1024),  # oversized: no allocation, closed
            struct.pack(">i", -5),
            struct.pack(">iI", 12, 0x02000004) + b"abcd" + b"xxxx",  # unknown serialize type
            struct.pack(">iI", 10, 3) + b"{x}zzz",  # invalid JSON
            struct.pack(">iI", 8, 100) + b"{}\x00\x00",  # header longer than the frame
        ):
            bad = socket.create_connection(server.address)
            bad.setblocking(False)
            await loop.sock_sendall(bad, junk)
            got = await asyncio.wait_for(loop.sock_recv(bad, 100), 2)
            assert got == b""  # the server closed it
            bad.close()
        resp = await good.request(RemotingCommand.request(34, {"n": "7"}))
        assert resp.ext_fields["echo"] == "7"
        assert len(server.connections) == 1
        await pool.close()


async def test_pool_shares_one_connect_and_reconnects() -> None:
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        conns = await asyncio.gather(*(pool.get(_addr(server)) for _ in range(20)))
        assert len({id(c) for c in conns}) == 1
        conns[0].close()
        await conns[0].wait_closed()
        again = await pool.get(_addr(server))
        assert again is not conns[0]
        assert (await again.request(RemotingCommand.request(34))).code == 0
        await pool.close()
        with pytest.raises(ClientClosedError):
            await pool.get(_addr(server))


async def test_connect_error_is_typed() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    pool = ConnectionPool(connect_timeout=1)
    with pytest.raises(ConnectError):
        await pool.get(f"127.0.0.1:{port}")
    await pool.close()


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:9876") == ("127.0.0.1", 9876)
    assert parse_address("[::1]:10911") == ("::1", 10911)
    for bad in ("nohost", ":1", "h:0", "h:70000", "h:x"):
        with pytest.raises(ConfigurationError):
            parse_address(bad)


async def test_server_requests_flow_to_clients_and_oneway_gets_no_answer() -> None:
    """The broker → client direction (NOTIFY_CONSUMER_IDS_CHANGED) on the same socket."""
    notified: list[RemotingCommand] = []

    async def on_notify(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        notified.append(cmd)
        return None

    client_side = Dispatcher()
    client_side.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    async with Server(_dispatcher()) as server, asyncio.TaskGroup() as tg:
        pool = ConnectionPool(handler=client_side, spawn=tg.create_task)
        conn = await pool.get(_addr(server))
        await conn.request(RemotingCommand.request(34))
        (server_conn,) = server.connections
        await server_conn.send_oneway(
            RemotingCommand.request(40, {"consumerGroup": "G"}, oneway=True)
        )
        for _ in range(100):
            if notified:
                break
            await asyncio.sleep(0.01)
        assert notified[0].ext_fields == {"consumerGroup": "G"}
        assert notified[0].is_oneway
        await pool.close()


async def test_handler_exception_becomes_system_error() -> None:
    async def boom(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("kaput")

    d = Dispatcher()
    d.register(34, boom)
    async with Server(d) as server:
        pool = ConnectionPool()
        conn = await pool.get(_addr(server))
        resp = await conn.request(RemotingCommand.request(34))
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark is not None
        assert "kaput" in resp.remark
        await pool.close()


async def test_in_memory_pipe_runs_client_and_server_without_sockets() -> None:
    async with asyncio.TaskGroup() as tg:
        server_conn = Connection(handler=_dispatcher(), spawn=tg.create_task)
        client_conn = Connection()
        memory_pipe(client_conn, server_conn)
        order = list(range(200))
        random.shuffle(order)
        resps = await asyncio.gather(
            *(client_conn.request(RemotingCommand.request(34, {"n": str(i)})) for i in order)
        )
        assert [r.ext_fields["echo"] for r in resps] == [str(i) for i in order]
        pending = asyncio.create_task(
            client_conn.request(RemotingCommand.request(11, {"sleep": "10"}))
        )
        await asyncio.sleep(0)
        server_conn.close()
        with pytest.raises(ConnectionClosedError):
            await pending
        await client_conn.wait_closed()


async def test_timeouts_fire_on_time_whatever_order_the_deadlines_come_in() -> None:
    # One timer per connection, armed for the soonest deadline: a short call made after a long
    # one must still time out on time, and the long one later, on its own time.
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        conn = await pool.get(_addr(server))
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def call(timeout: float) -> float:
            with pytest.raises(RequestTimeoutError, match=f"within {timeout:g} s"):
                await conn.request(RemotingCommand.request(11, {"sleep": "5"}), timeout=timeout)
            return loop.time() - started

        long_call = asyncio.create_task(call(0.6))
        await asyncio.sleep(0.01)
        short = await call(0.15)
        assert 0.15 <= short < 0.4
        assert not long_call.done()
        # Calls that are answered in time leave the others' deadlines alone.
        fast = await conn.request(RemotingCommand.request(11, {"sleep": "0"}), timeout=0.05)
        assert fast.code == 0
        assert 0.6 <= await long_call < 0.9
        assert conn.pending_count == 0
        await pool.close()


async def test_many_calls_time_out_together_and_the_connection_goes_on() -> None:
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        conn = await pool.get(_addr(server))
        results = await asyncio.gather(
            *(
                conn.request(RemotingCommand.request(11, {"sleep": "5"}), timeout=0.05 + i / 1000)
                for i in range(100)
            ),
            return_exceptions=True,
        )
        assert all(isinstance(r, RequestTimeoutError) for r in results)
        assert conn.pending_count == 0
        resp = await conn.request(RemotingCommand.request(34, {"n": "after"}), timeout=1)
        assert resp.ext_fields == {"echo": "after"}
        await pool.close()


async def test_request_template_over_tcp_matches_the_plain_request() -> None:
    async with Server(_dispatcher()) as server:
        pool = ConnectionPool()
        conn = await pool.get(_addr(server))
        template = RequestTemplate(RemotingCommand.request(34, {"n": "0", "k": "v"}), ("n",))
        resps = await asyncio.gather(
            *(conn.request_template(template, (i,), timeout=3) for i in range(300))
        )
        assert [r.ext_fields["echo"] for r in resps] == [str(i) for i in range(300)]
        slow_template = RequestTemplate(
            RemotingCommand.request(11, {"sleep": "5", "n": "1"}), ("n",)
        )
        with pytest.raises(RequestTimeoutError):
            await conn.request_template(slow_template, (2,), timeout=0.05)
        assert conn.pending_count == 0
        quick_template = RequestTemplate(RemotingCommand.request(11, {"sleep": "0"}), ())
        assert (await conn.request_template(quick_template, ())).code == 0
        await pool.close()


async def test_request_template_goes_through_the_request_hook() -> None:
    # ACL signing needs the whole command: a hooked connection builds it.
    seen: list[dict[str, str]] = []

    def hook(cmd: RemotingCommand) -> None:
        seen.append(dict(cmd.ext_fields))
        cmd.ext_fields["signed"] = "yes"

    async with asyncio.TaskGroup() as tg:
        server_conn = Connection(handler=_dispatcher(), spawn=tg.create_task)
        client_conn = Connection(request_hook=hook)
        memory_pipe(client_conn, server_conn)
        template = RequestTemplate(RemotingCommand.request(34, {"n": "0"}), ("n",))
        resp = await client_conn.request_template(template, (41,))
        assert resp.ext_fields == {"echo": "41"}
        assert seen == [{"n": "41"}]
        server_conn.close()
        await client_conn.wait_closed()
