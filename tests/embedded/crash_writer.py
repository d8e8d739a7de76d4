"""Record helpers for the store tests, and the writer process of ``test_store_crash.py``.

Run as ``python -m tests.embedded.crash_writer DATA_DIR RUN_ID``: opens a sync-flush store,
prints ``ready``, then puts messages from several concurrent tasks forever and prints
``ack <topic> <queue id> <queue offset> <uid>`` for each one once :meth:`wait_durable`
returned. The parent kills it with SIGKILL at a random moment.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
from pathlib import Path

from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.tags import tags_code
from aiorocket.embedded.store import MessageStore
from tests._harness.protocol import message_record

CRASH_TOPICS = ("CrashA", "CrashB")
CRASH_QUEUES = 3
CRASH_SEGMENT_SIZE = 64 * 1024
CRASH_CQ_ENTRIES = 64


def make_record(
    topic: str,
    queue_id: int,
    body: bytes,
    properties: dict[str, str] | None = None,
) -> MessageRecord:
    """A record as a broker builds it before :meth:`MessageStore.put` fills the offsets."""
    return message_record(
        topic=topic,
        body=body,
        queue_id=queue_id,
        queue_offset=-1,
        commit_log_offset=-1,
        born_timestamp=1_700_000_000_000,
        born_host="10.0.0.7",
        born_port=40001,
        store_port=10911,
        properties={} if properties is None else properties,
    )


def body_for(uid: str) -> bytes:
    """A deterministic body of 16..3076 bytes derived from ``uid``."""
    digest = hashlib.sha256(uid.encode()).digest()
    size = 16 + digest[0] * 12
    return (digest * (size // len(digest) + 1))[:size]


async def _writer(store: MessageStore, run_id: str, worker: int, rng: random.Random) -> None:
    seq = 0
    out = sys.stdout
    while True:
        uid = f"{run_id}-{worker}-{seq}"
        seq += 1
        topic = CRASH_TOPICS[rng.randrange(len(CRASH_TOPICS))]
        qid = rng.randrange(CRASH_QUEUES)
        tag = f"tag{seq % 3}"
        record = make_record(topic, qid, body_for(uid), {"UNIQ_KEY": uid, "TAGS": tag})
        result = store.put(record, tags_code=tags_code(tag))
        await store.wait_durable(result.commit_log_end)
        out.write(f"ack {topic} {qid} {result.queue_offset} {uid}\n")
        out.flush()


async def _main(data_dir: Path, run_id: str) -> None:
    store = MessageStore(
        data_dir,
        flush="sync",
        segment_size=CRASH_SEGMENT_SIZE,
        cq_entries_per_segment=CRASH_CQ_ENTRIES,
    )
    await store.open()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    rng = random.Random(run_id)
    await asyncio.gather(*(_writer(store, run_id, w, rng) for w in range(4)))


if __name__ == "__main__":
    asyncio.run(_main(Path(sys.argv[1]), sys.argv[2]))
