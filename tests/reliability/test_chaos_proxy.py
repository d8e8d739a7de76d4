"""ChaosProxy on its own: each fault against a length-prefixed echo server over loopback TCP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from aiorocket.testing import ChaosProxy


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = int.from_bytes(await reader.readexactly(4), "big")
    return await reader.readexactly(size)


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, list[BaseException]]]:
    """A server answering every frame with the same frame; collects its connections' errors."""
    errors: list[BaseException] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                payload = await read_frame(reader)
                writer.write(frame(payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            errors.append(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"127.0.0.1:{port}", errors


@pytest.fixture
async def proxy(echo: tuple[str, list[BaseException]]) -> AsyncIterator[ChaosProxy]:
    async with ChaosProxy(echo[0]) as p:
        yield p


async def connect(proxy: ChaosProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def test_forwards_both_ways(proxy: ChaosProxy) -> None:
    reader, writer = await connect(proxy)
    writer.write(frame(b"hello"))
    assert await asyncio.wait_for(read_frame(reader), 5) == b"hello"
    assert proxy.connections == 1
    assert proxy.bytes_forwarded == 2 * 9
    writer.close()
    await asyncio.sleep(0.1)
    assert proxy.connections == 0


async def test_stall_holds_bytes_without_closing_and_heal_delivers_them(proxy: ChaosProxy) -> None:
    reader, writer = await connect(proxy)
    proxy.stall()
    assert proxy.stalled
    writer.write(frame(b"held"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(read_frame(reader), 0.5)
    assert proxy.connections == 1  # a black hole: nothing was closed
    # a connection accepted while stalled is stalled too
    reader2, writer2 = await connect(proxy)
    writer2.write(frame(b"late"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(read_frame(reader2), 0.3)
    proxy.heal()
    assert await asyncio.wait_for(read_frame(reader), 5) == b"held"  # nothing was dropped
    assert await asyncio.wait_for(read_frame(reader2), 5) == b"late"
    writer.close()
    writer2.close()


async def test_reset_sends_rst_to_both_sides(
    proxy: ChaosProxy, echo: tuple[str, list[BaseException]]
) -> None:
    reader, writer = await connect(proxy)
    writer.write(frame(b"x"))
    await asyncio.wait_for(read_frame(reader), 5)
    assert proxy.reset() == 1
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.read(10), 5)
    await asyncio.sleep(0.1)
    assert any(isinstance(e, ConnectionResetError) for e in echo[1]), echo[1]
    writer.close()
    # new connections work
    reader, writer = await connect(proxy)
    writer.write(frame(b"again"))
    assert await asyncio.wait_for(read_frame(reader), 5) == b"again"
    writer.close()


async def test_truncate_lets_half_a_frame_through_then_closes(proxy: ChaosProxy) -> None:
    reader, writer = await connect(proxy)
    writer.write(frame(b"warm-up"))
    await asyncio.wait_for(read_frame(reader), 5)
    assert proxy.truncate() == 1
    writer.write(frame(b"y" * 1000))
    got = await asyncio.wait_for(reader.read(), 5)  # up to EOF
    assert 0 < len(got) < 1004
    assert got[:4] == (1000).to_bytes(4, "big")
    assert proxy.truncated == 1
    writer.close()


async def test_truncate_upstream_cuts_requests(
    proxy: ChaosProxy, echo: tuple[str, list[BaseException]]
) -> None:
    reader, writer = await connect(proxy)
    writer.write(frame(b"warm-up"))  # (the proxy has paired the connection by the answer)
    await asyncio.wait_for(read_frame(reader), 5)
    assert proxy.truncate("upstream") == 1
    writer.write(frame(b"z" * 100))
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing echoed
    await asyncio.sleep(0.1)
    assert any(isinstance(e, asyncio.IncompleteReadError) for e in echo[1]), echo[1]
    writer.close()


async def test_delay_and_bandwidth(proxy: ChaosProxy) -> None:
    reader, writer = await connect(proxy)
    proxy.delay(0.2)
    t0 = time.monotonic()
    writer.write(frame(b"slow"))
    assert await asyncio.wait_for(read_frame(reader), 5) == b"slow"
    assert time.monotonic() - t0 >= 0.4  # 0.2 s each way
    proxy.delay(0)
    proxy.bandwidth(100_000)
    t0 = time.monotonic()
    writer.write(frame(b"b" * 20_000))
    assert len(await asyncio.wait_for(read_frame(reader), 5)) == 20_000
    assert time.monotonic() - t0 >= 0.3  # 20 kB at 100 kB/s, each way
    proxy.heal()
    t0 = time.monotonic()
    writer.write(frame(b"b" * 20_000))
    await asyncio.wait_for(read_frame(reader), 5)
    assert time.monotonic() - t0 < 0.3
    writer.close()


async def test_no_upstream_closes_the_client() -> None:
    async with ChaosProxy() as proxy:
        reader, writer = await connect(proxy)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    with pytest.raises(ValueError, match="host:port"):
        ChaosProxy("nowhere")
