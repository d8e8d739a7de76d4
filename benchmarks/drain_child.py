"""One member of a multi-process drain (``consumer.drain_processes``); not run by hand.

    python benchmarks/drain_child.py ADDR TOPIC GROUP PER_QUEUE BATCH QUEUES MEMBERS

Starts a ``PushConsumer`` paused, waits until the group has settled (this member holds
``QUEUES / MEMBERS`` queues), prints ``ready``, waits for ``go`` on stdin, resumes, and when
every queue it holds has delivered ``PER_QUEUE`` messages prints ``done <t0> <t1> <cpu>``:
``time.monotonic()`` at the go and at the last message, and its CPU seconds in between. This is
what ``aiorocket run --workers N`` deploys: N processes, one event loop each, in one group.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiorocket as rmq


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def main(argv: list[str]) -> None:
    addr, topic, group = argv[0], argv[1], argv[2]
    per_queue, batch, queues, members = (int(a) for a in argv[3:7])
    share = queues // members
    counts: Counter[int] = Counter()
    done = asyncio.Event()
    held: set[int] = set()
    finished = 0
    consumer = rmq.PushConsumer(
        group=group,
        namesrv=addr,
        consume_from="first",
        pull_batch_size=32,
        consume_batch_size=batch,
    )
    consumer.subscribe(topic)

    async def handler(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        nonlocal finished
        q = ctx.queue.queue_id
        counts[q] += len(msgs)
        if counts[q] == per_queue and q in held and ctx.queue.topic == topic:
            finished += 1
            if finished == share:
                done.set()

    consumer.register_listener(handler)
    # Paused from the start: no member pulls before the group has split the queues, so the
    # clock starts on a settled group (as Java's figure starts at its first message).
    consumer.pause()
    async with consumer:
        deadline = time.monotonic() + 60
        while len(mine := [mq for mq in consumer.held() if mq.topic == topic]) != share:
            if time.monotonic() > deadline:
                raise SystemExit(f"group did not settle: holding {len(mine)} of {topic}")
            await asyncio.sleep(0.05)
        held.update(mq.queue_id for mq in mine)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)
        t0, c0 = time.monotonic(), _cpu()
        consumer.resume()
        await asyncio.wait_for(done.wait(), 600)
        t1, c1 = time.monotonic(), _cpu()
        print(f"done {t0} {t1} {c1 - c0}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
