"""``aiorocket demo``: the best end-to-end run the project has so far.

Today that is the remoting layer on real loopback TCP: a server with a request-code table and a
pooled client exchanging pipelined requests, with every response checked against its request.
"""

from __future__ import annotations

import asyncio
import time

from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting import Connection, ConnectionPool, Dispatcher, Server


async def _echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.make_response(0, ext_fields={"n": cmd.ext_fields["n"]}, body=cmd.body)


async def run_demo(*, requests: int) -> int:
    """Exchange ``requests`` pipelined requests over loopback and print a summary."""
    dispatcher = Dispatcher()
    dispatcher.register(RequestCode.HEART_BEAT, _echo)
    async with Server(dispatcher) as server:
        host, port = server.address
        print(f"server listening on {host}:{port}")
        pool = ConnectionPool()
        conn = await pool.get(f"{host}:{port}")
        window = asyncio.Semaphore(256)
        bad = 0

        async def one(i: int) -> None:
            nonlocal bad
            async with window:
                resp = await conn.request(
                    RemotingCommand.request(34, {"n": str(i)}, body=b"x" * 128)
                )
                bad += resp.ext_fields.get("n") != str(i) or len(resp.body) != 128

        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for i in range(requests):
                tg.create_task(one(i))
        elapsed = time.perf_counter() - t0
        await pool.close()
    print(
        f"exchanged {requests} requests in {elapsed:.2f} s ({requests / elapsed:,.0f} req/s), mismatched: {bad}"
    )
    return 0 if bad == 0 else 1
