"""R16: SIGKILL the writer during sync-flush writes, repeatedly, and check the store after each.

Each round starts ``crash_writer`` on the same data directory, lets it write for a random
moment and kills it. Every message whose acknowledgement line was printed (after
``wait_durable``) must then be present exactly once, at its acknowledged queue and offset,
with its body intact; nothing invalid may be served, and writing must go on at the right
offsets in the next round. Some rounds also leave a torn tail behind, as a crash during a
write would on a file system without atomic appends.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from aiorocket._protocol.message import decode_messages
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.store_results import GetStatus
from tests.embedded.crash_writer import (
    CRASH_CQ_ENTRIES,
    CRASH_QUEUES,
    CRASH_SEGMENT_SIZE,
    CRASH_TOPICS,
    body_for,
)

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 12
Ack = tuple[str, int, int]


def _run_writer(data_dir: Path, run_id: str, rng: random.Random) -> list[tuple[Ack, str]]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.embedded.crash_writer", str(data_dir), run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        # Unbuffered: readline() then takes "ready\n" alone. A buffered reader may take the
        # first acks with it, which communicate() (reading the pipe itself) never sees: the
        # first line it returns would start mid-line.
        bufsize=0,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready == b"ready\n", proc.stderr.read() if proc.stderr else ready
        time.sleep(rng.uniform(0.05, 0.5))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")
    acks = []
    # A line cut short by the kill was never fully acknowledged: only whole lines count.
    for line in out.decode().split("\n")[:-1]:
        tag, topic, qid, qo, uid = line.split(" ")
        assert tag == "ack"
        acks.append(((topic, int(qid), int(qo)), uid))
    return acks


def _tear_tail(data_dir: Path, rng: random.Random) -> None:
    segment = sorted((data_dir / "commitlog").iterdir())[-1]
    with open(segment, "ab") as f:
        kind = rng.randrange(3)
        if kind == 0:
            f.write(os.urandom(rng.randrange(1, 3000)))
        elif kind == 1:
            f.write(bytes(rng.randrange(1, 3000)))
        else:  # the start of a plausible record: a sane size, then nothing
            f.write((300).to_bytes(4, "big") + bytes.fromhex("DAA320A7") + os.urandom(40))


async def _check(data_dir: Path, acked: dict[str, Ack]) -> int:
    store = MessageStore(
        data_dir,
        flush="sync",
        segment_size=CRASH_SEGMENT_SIZE,
        cq_entries_per_segment=CRASH_CQ_ENTRIES,
    )
    async with store:
        seen: dict[str, Ack] = {}
        for topic in CRASH_TOPICS:
            for qid in range(CRASH_QUEUES):
                offset = store.min_offset(topic, qid)
                assert offset == 0  # no retention here
                while True:
                    result = store.get(topic, qid, offset, max_msgs=32)
                    if result.status is not GetStatus.FOUND:
                        assert result.status in (
                            GetStatus.OFFSET_OVERFLOW_ONE,
                            GetStatus.NO_MATCHED_LOGIC_QUEUE,
                        ), result.status
                        break
                    assert result.queue_offsets == list(range(offset, result.next_begin_offset))
                    records = decode_messages(b"".join(result.messages))
                    for raw, rec in zip(result.messages, records, strict=True):
                        uid = rec.properties["UNIQ_KEY"]
                        assert uid not in seen, f"{uid} stored twice"
                        seen[uid] = (topic, qid, rec.queue_offset)
                        assert rec.topic == topic
                        assert rec.queue_id == qid
                        assert rec.body == body_for(uid)
                        assert store.read_at(rec.commit_log_offset) == raw
                    offset = result.next_begin_offset
                assert offset == store.max_offset(topic, qid)
        for uid, where in acked.items():
            assert seen.get(uid) == where, f"acknowledged {uid} at {where}, found {seen.get(uid)}"
        return len(seen)


async def test_sigkill_during_sync_writes_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(20240607)
    data_dir = tmp_path / "store"
    acked: dict[str, Ack] = {}
    stored = 0
    started = time.monotonic()
    for round_ in range(ROUNDS):
        for where, uid in _run_writer(data_dir, f"r{round_}", rng):
            assert uid not in acked
            acked[uid] = where
        if round_ % 3 == 2:
            _tear_tail(data_dir, rng)
        now_stored = await _check(data_dir, acked)
        assert now_stored >= stored  # nothing that survived one recovery is lost later
        stored = now_stored
    assert len(acked) > ROUNDS * 10, "the writer barely ran; the test proves little"
    assert time.monotonic() - started < 60
