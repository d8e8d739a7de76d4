"""An orderly consumer process for multi-process tests: records every handler call.

    python orderly_proc.py --namesrv HOST:PORT --group G --topic T --out FILE --name NAME

Message bodies are ``"<key>:<n>"``. ``--order-by sharding_key`` orders by the
``__SHARDINGKEY`` property instead of the whole queue (with ``--concurrency``). Lines written
to ``--out`` (each flushed to the OS at once, so a SIGKILL loses nothing already written):

* ``{"k": "s", "c": name, "q": queue_id, "y": key, "t": time, "lk": lock_time,
  "ids": [bodies], "r": [reconsume_times]}`` when a handler call starts (``y``: the call's
  ``ctx.key``; ``lk``: epoch seconds of the last granted lock request of the queue, as the
  consumer's statistics report it);
* ``{"k": "e", "c": name, "q": queue_id, "y": key, "t": time}`` when it ends;
* ``{"k": "a", "c": name, "t": time, "locks": {queue_id: lock_time}}`` every 100 ms, the
  queues of the topic held under a live lock.

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
    out, consumer = member_consumer(
        args,
        orderly=True,
        consume_from="first",
        heartbeat_interval=args.heartbeat_interval,
        lock_renew_interval=args.lock_renew_interval,
        lock_expiry=args.lock_expiry,
        unlock_delay=args.unlock_delay,
        pull_suspend_timeout=1.0,
        order_by=args.order_by,
        concurrency=args.concurrency,
    )

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        q = ctx.queue
        lock = consumer.statistics().queues.get(q)
        out.write(
            {
                "k": "s",
                "c": args.name,
                "q": q.queue_id,
                "y": ctx.key,
                "t": time.time(),
                "lk": lock.last_lock_time if lock else 0.0,
                "ids": [m.body.decode() for m in msgs],
                "r": [m.reconsume_times for m in msgs],
            }
        )
        if args.sleep:
            await asyncio.sleep(args.sleep * len(msgs))
        out.write({"k": "e", "c": args.name, "q": q.queue_id, "y": ctx.key, "t": time.time()})

    def snapshot() -> None:
        queues = consumer.statistics().queues
        locks = {
            mq.queue_id: q.last_lock_time
            for mq, q in queues.items()
            if mq.topic == args.topic and q.locked
        }
        out.write({"k": "a", "c": args.name, "t": time.time(), "locks": locks})

    stop = stop_on_signals()
    async with consumer:
        print("READY", flush=True)
        await until_stopped(stop, snapshot)
    out.write({"k": "a", "c": args.name, "t": time.time(), "locks": {}, "closed": True})
    out.close()
    return 0


if __name__ == "__main__":
    parser = member_parser()
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per message")
    parser.add_argument("--rebalance-interval", type=float, default=0.5)
    parser.add_argument("--persist-interval", type=float, default=0.5)
    parser.add_argument("--heartbeat-interval", type=float, default=1.0)
    parser.add_argument("--lock-renew-interval", type=float, default=0.5)
    parser.add_argument("--lock-expiry", type=float, default=2.0)
    parser.add_argument("--unlock-delay", type=float, default=0.3)
    parser.add_argument("--order-by", choices=("queue", "sharding_key"), default="queue")
    parser.add_argument("--concurrency", type=int, default=64)
    sys.exit(asyncio.run(main(parser.parse_args())))
