"""The broker's server connections: responses leave in one write per loop iteration, and
handlers of eager codes start inside the read callback (a held one goes on in a task)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting import Connection, ConnectionPool, Dispatcher, Server

HOLD = int(RequestCode.PULL_MESSAGE)
QUICK = int(RequestCode.HEART_BEAT)


class Handlers:
    """A quick echo and a handler that waits for ``release`` (or for its cancellation)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.cancelled = 0
        self.waiting = 0

    async def quick(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.tasks.append(asyncio.current_task())
        if cmd.ext_fields.get("fail"):
            raise ValueError("boom")
        return cmd.make_response(0, ext_fields={"n": cmd.ext_fields["n"]})

    async def hold(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.waiting += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return cmd.make_response(0, ext_fields={"n": cmd.ext_fields["n"]})

    def dispatcher(self) -> Dispatcher:
        d = Dispatcher()
        d.register(QUICK, self.quick)
        d.register(HOLD, self.hold)
        return d


def _addr(server: Server) -> str:
    return f"{server.address[0]}:{server.address[1]}"


async def test_responses_to_requests_sent_together_leave_in_one_write() -> None:
    h = Handlers()
    async with Server(h.dispatcher(), eager_codes=frozenset({QUICK})) as server:
        pool = ConnectionPool()
        try:
            client = await pool.get(_addr(server))
            await client.request(RemotingCommand.request(QUICK, {"n": "warm-up"}))
            (conn,) = server.connections
            transport = conn._transport
            assert transport is not None
            writes: list[int] = []
            real = transport.writelines

            def counting(parts: Any) -> None:
                writes.append(len(parts))
                real(parts)

            transport.writelines = counting  # type: ignore[method-assign,assignment]
            # Requests made in one loop iteration leave the client in one write, so the
            # server reads them together.
            replies = await asyncio.gather(
                *(client.request(RemotingCommand.request(QUICK, {"n": str(i)})) for i in range(20))
            )
            assert [r.ext_fields["n"] for r in replies] == [str(i) for i in range(20)]
            assert len(writes) == 1, writes
            assert writes[0] >= 20
        finally:
            await pool.close()


async def test_eager_handlers_run_without_a_task_and_errors_are_answered() -> None:
    h = Handlers()
    async with Server(h.dispatcher(), eager_codes=frozenset({QUICK})) as server:
        pool = ConnectionPool()
        try:
            client = await pool.get(_addr(server))
            ok = await client.request(RemotingCommand.request(QUICK, {"n": "1"}))
            failed = await client.request(RemotingCommand.request(QUICK, {"n": "2", "fail": "1"}))
        finally:
            await pool.close()
    assert ok.code == 0
    assert (failed.code, failed.remark) == (ResponseCode.SYSTEM_ERROR, "ValueError: boom")
    assert h.tasks == [None, None]


async def test_an_eager_handler_that_waits_goes_on_in_a_task() -> None:
    h = Handlers()
    async with Server(h.dispatcher(), eager_codes=frozenset({QUICK, HOLD})) as server:
        pool = ConnectionPool()
        try:
            client = await pool.get(_addr(server))
            held = asyncio.ensure_future(
                client.request(RemotingCommand.request(HOLD, {"n": "7"}), timeout=10)
            )
            while not h.waiting:
                await asyncio.sleep(0.01)
            (conn,) = server.connections
            assert len(conn._serving) == 1
            # Other requests are served meanwhile.
            assert (await client.request(RemotingCommand.request(QUICK, {"n": "8"}))).code == 0
            h.release.set()
            resp = await held
            assert (resp.code, resp.ext_fields["n"]) == (0, "7")
            assert not conn._serving
        finally:
            await pool.close()


async def test_a_held_eager_handler_is_cancelled_when_its_client_goes() -> None:
    h = Handlers()
    async with Server(h.dispatcher(), eager_codes=frozenset({HOLD})) as server:
        pool = ConnectionPool()
        client = await pool.get(_addr(server))
        held = asyncio.ensure_future(
            client.request(RemotingCommand.request(HOLD, {"n": "1"}), timeout=10)
        )
        while not h.waiting:
            await asyncio.sleep(0.01)
        await pool.close()
        for _ in range(100):
            if h.cancelled:
                break
            await asyncio.sleep(0.01)
        assert h.cancelled == 1
        assert not server.connections
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)
