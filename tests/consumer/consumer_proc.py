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
import sys
import time

import aiorocket as rmq
from tests._harness.child import member_consumer, member_parser, stop_on_signals, until_stopped


async def main(args: argparse.Namespace) -> int:
    out, consumer = member_consumer(args)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        if args.sleep:
            await asyncio.sleep(args.sleep)
        out.deliveries(msgs, bytes.decode)

    def snapshot() -> None:
        queues = consumer.statistics().queues
        held = sorted(mq.queue_id for mq in queues if mq.topic == args.topic)
        out.write({"k": "a", "c": args.name, "t": time.time(), "queues": held})

    stop = stop_on_signals()
    async with consumer:
        print("READY", flush=True)
        await until_stopped(stop, snapshot)
    out.write({"k": "a", "c": args.name, "t": time.time(), "queues": [], "closed": True})
    out.close()
    return 0


if __name__ == "__main__":
    parser = member_parser()
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--rebalance-interval", type=float, default=1.0)
    parser.add_argument("--persist-interval", type=float, default=1.0)
    sys.exit(asyncio.run(main(parser.parse_args())))
