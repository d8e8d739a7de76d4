"""A transactional producer that stops inside its local transaction, for crash tests.

    python -m tests.producer.tx_proc NAMESRV TOPIC GROUP

It sends one half message, prints ``{"ev": "half", "msg_id": ...}`` from ``execute_local`` and
then waits there forever, so the test can kill the process before it ends the transaction.
:func:`crash_in_transaction` is the test side: it runs this script and kills it there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiorocket as rmq

#: the repository's root, the child's working directory and ``PYTHONPATH``
ROOT = Path(__file__).resolve().parents[2]


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


async def crash_in_transaction(namesrv: str, topic: str, group: str, *, timeout: float) -> None:
    """Run this script, wait (``timeout`` seconds at most) until it has sent its half message
    ``b"crash"`` and kill it with SIGKILL before it ends the transaction."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.producer.tx_proc",
        namesrv,
        topic,
        group,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout)
        assert json.loads(line) == {"ev": "half", "body": "crash"}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
