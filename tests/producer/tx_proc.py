"""A transactional producer that stops inside its local transaction, for crash tests.

    python -m tests.producer.tx_proc NAMESRV TOPIC GROUP

It sends one half message, prints ``{"ev": "half", "msg_id": ...}`` from ``execute_local`` and
then waits there forever, so the test can kill the process before it ends the transaction.
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiorocket as rmq


async def main(namesrv: str, topic: str, group: str) -> None:
    async def execute_local(msg: rmq.Message, arg: object) -> rmq.TransactionState:
        print(json.dumps({"ev": "half", "body": msg.body.decode()}), flush=True)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def check(msg: rmq.ReceivedMessage) -> rmq.TransactionState:
        # This process never answers: it is killed before any check-back reaches it.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with rmq.TransactionProducer(
        namesrv=namesrv, group=group, execute_local=execute_local, check=check
    ) as producer:
        await producer.send_in_transaction(rmq.Message(topic, b"crash"))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
