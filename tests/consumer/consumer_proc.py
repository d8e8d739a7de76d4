"""A consumer process for multi-process tests: records every delivery as a JSON line.

    python consumer_proc.py --namesrv HOST:PORT --group G --topic T --out FILE --name NAME

Lines written to ``--out`` (flushed to the OS before the handler returns, so a SIGKILL loses
nothing that was acknowledged):

* ``{"k": "d", "c": name, "q": queue_id, "o": offset, "id": body, "r": reconsume_times,
  "t": time}`` per delivered message;
* ``{"k": "a", "c": name, "t": time, "queues": [queue ids]}`` with the held queues of the
  topic, every 100 ms (a snapshot, not only changes).

Prints ``READY`` once started. SIGTERM or SIGINT closes the consumer gracefully (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from typing import Any, TextIO

import aiorocket as rmq


async def main(args: argparse.Namespace) -> int:
    out: TextIO = open(args.out, "a", encoding="utf-8")  # noqa: SIM115
    consumer = rmq.PushConsumer(
        group=args.group,
        namesrv=args.namesrv,
        rebalance_interval=args.rebalance_interval,
        offset_persist_interval=args.persist_interval,
        shutdown_grace=5.0,
    )
    consumer.subscribe(args.topic)

    def write(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out.flush()

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        if args.sleep:
            await asyncio.sleep(args.sleep)
        now = time.time()
        out.write(
            "".join(
                json.dumps(
                    {
                        "k": "d",
                        "c": args.name,
                        "q": m.queue_id,
                        "o": m.queue_offset,
                        "id": m.body.decode(),
                        "r": m.reconsume_times,
                        "t": now,
                    },
                    separators=(",", ":"),
                )
                + "\n"
                for m in msgs
            )
        )
        out.flush()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with consumer:
        print("READY", flush=True)
        while not stop.is_set():
            queues = consumer.statistics().queues
            held = sorted(mq.queue_id for mq in queues if mq.topic == args.topic)
            write({"k": "a", "c": args.name, "t": time.time(), "queues": held})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
    write({"k": "a", "c": args.name, "t": time.time(), "queues": [], "closed": True})
    out.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--rebalance-interval", type=float, default=1.0)
    parser.add_argument("--persist-interval", type=float, default=1.0)
    sys.exit(asyncio.run(main(parser.parse_args())))
