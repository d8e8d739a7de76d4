"""The revive log: POP checkpoints and acks made durable as records of a system topic of the
message store, Apache's ``rmq_sys_REVIVE_LOG_<cluster>`` (docs/protocol.md §12.3).

Design. Every change to the in-flight state is appended to the log before it is applied in
memory (``pop_inflight.py``) and before the request that made it is answered:

* a POP appends one checkpoint record per queue it took messages from (tag ``ck``);
* an ack appends an ack record (tag ``ack``, one offset) or a batch ack (tag ``bAck``, several);
* CHANGE_MESSAGE_INVISIBLETIME appends a new checkpoint, then an ack of the old one;
* a revive appends a batch ack of the offsets it re-put into the retry topic, so a restart
  does not revive them again.

The record bodies are the JSON of Apache's ``PopCheckPoint`` / ``AckMsg`` / ``BatchAckMsg``
(fastjson short names ``so pt it bm n q t c d bn`` and ``ao aol``). An append is one
synchronous store put of ~200 bytes: in the page cache when it returns, so a killed process
loses nothing; with sync flush the caller also waits for the fsync.

Restart: the *revive offset* is the smallest log position of a checkpoint still in flight
(the log's end when none is); it is stored in the consumer-offset table under
``CID_RMQ_SYS_REVIVE_GROUP`` whenever that table is written. `ReviveLog.replay` reads
the log from it and rebuilds the in-flight table: every checkpoint record after it, minus
what later ack records took away. The revive offset can only grow (new checkpoints land at
the log's end), so a stale one only means a longer replay, never a lost checkpoint. The
same replay also yields, per queue, the offset after the last message popped, which restores
a POP consumer offset the crash kept from being written: the offset table and the revive
offset are written in one file, so everything popped after that write is in the replayed
part of the log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Final

from aiorocket._protocol import properties as mp
from aiorocket._protocol.message import decode_message
from aiorocket._protocol.tags import tags_code
from aiorocket.embedded.offsets import ConsumerOffsets
from aiorocket.embedded.pop_inflight import Checkpoint, CheckpointKey, InflightTable
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.store_results import GetStatus, PutResult
from aiorocket.embedded.topics import revive_topic
from aiorocket.embedded.writer import broker_record
from aiorocket.errors import RemoteProtocolError

__all__ = [
    "ACK_TAG",
    "BATCH_ACK_TAG",
    "CK_TAG",
    "REVIVE_GROUP",
    "QueuePosition",
    "ReviveLog",
]

log = logging.getLogger("aiorocket.embedded")

#: ``PopAckConstants.REVIVE_GROUP``: the group whose offset of the revive topic is the revive
#: offset
REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"
#: ``PopAckConstants`` tags of the revive log records
CK_TAG: Final = "ck"
ACK_TAG: Final = "ack"
BATCH_ACK_TAG: Final = "bAck"
#: records read per store call during a replay
_REPLAY_BATCH: Final = 512
_REPLAY_BYTES: Final = 4 * 1024 * 1024

#: (group, topic, queue id)
QueuePosition = tuple[str, str, int]


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def _checkpoint_body(ck: Checkpoint, broker_name: str) -> dict[str, Any]:
    return {
        "bm": 0,
        "bn": broker_name,
        "c": ck.group,
        "d": [o - ck.start_offset for o in ck.offsets],
        "it": ck.invisible_time,
        "n": len(ck.offsets),
        "pt": ck.pop_time,
        "q": ck.queue_id,
        "so": ck.start_offset,
        "t": ck.topic,
    }


def _checkpoint_of(data: dict[str, Any], log_offset: int) -> Checkpoint:
    start = int(data["so"])
    return Checkpoint(
        group=str(data["c"]),
        topic=str(data["t"]),
        queue_id=int(data["q"]),
        start_offset=start,
        pop_time=int(data["pt"]),
        invisible_time=int(data["it"]),
        offsets=tuple(start + int(d) for d in data["d"]),
        log_offset=log_offset,
    )


def _ack_key(data: dict[str, Any]) -> CheckpointKey:
    return (str(data["c"]), str(data["t"]), int(data["q"]), int(data["so"]), int(data["pt"]))


class ReviveLog:
    """Appends POP checkpoints and acks to the revive topic, and replays them.

    Args:
        store: the open message store.
        offsets: where the revive offset is kept (and the POP offsets a replay restores).
        cluster: the cluster name, part of the topic's name.
        broker_name: written into the records (``bn``).
        store_address: the broker's ``(ip, port)``, the born and store host of the records.
    """

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsets,
        *,
        cluster: str,
        broker_name: str,
        store_address: Callable[[], tuple[str, int]],
    ) -> None:
        self._store = store
        self._offsets = offsets
        self._topic = revive_topic(cluster)
        self._broker_name = broker_name
        self._store_address = store_address
        self._codes = {tag: tags_code(tag) for tag in (CK_TAG, ACK_TAG, BATCH_ACK_TAG)}
        #: the last record appended (its end is what a sync-flush caller waits for)
        self.last_put: PutResult | None = None

    @property
    def topic(self) -> str:
        """The revive topic (one queue, 0)."""
        return self._topic

    def _append(self, tag: str, body: dict[str, Any]) -> PutResult:
        rec = broker_record(
            self._topic, _json(body), self._store_address(), properties={mp.TAGS: tag}
        )
        result = self._store.put(rec, tags_code=self._codes[tag])
        self.last_put = result
        return result

    def append_checkpoint(self, ck: Checkpoint) -> PutResult:
        """Append ``ck``'s record and set its `log_offset`.

        Raises:
            the errors of `MessageStore.put` (nothing was appended).
        """
        result = self._append(CK_TAG, _checkpoint_body(ck, self._broker_name))
        ck.log_offset = result.queue_offset
        return result

    def append_acks(self, ck: Checkpoint, offsets: list[int]) -> PutResult:
        """Append the ack of ``offsets`` of ``ck`` (one ``ack`` record, or a ``bAck`` for
        several).

        Raises:
            the errors of `MessageStore.put` (nothing was appended).
        """
        body: dict[str, Any] = {
            "bn": self._broker_name,
            "c": ck.group,
            "pt": ck.pop_time,
            "q": ck.queue_id,
            "so": ck.start_offset,
            "t": ck.topic,
        }
        if len(offsets) == 1:
            body["ao"] = offsets[0]
            return self._append(ACK_TAG, body)
        body["ao"] = -1
        body["aol"] = list(offsets)
        return self._append(BATCH_ACK_TAG, body)

    def progress(self, table: InflightTable) -> int:
        """The revive offset now: the oldest log position still in flight, else the log's
        end."""
        oldest = table.oldest_log_offset()
        return self._store.max_offset(self._topic, 0) if oldest is None else oldest

    def commit_progress(self, table: InflightTable) -> None:
        """Record the revive offset in the offset table (written with it); nothing while the
        log is empty (a broker nobody popped from keeps its offset table as it was)."""
        if self._store.max_offset(self._topic, 0) > 0:
            self._offsets.commit(REVIVE_GROUP, self._topic, 0, self.progress(table))

    def replay(self, table: InflightTable) -> dict[QueuePosition, int]:
        """Rebuild ``table`` from the log after the stored revive offset; returns, per queue a
        checkpoint names, the offset after the last message popped from it.

        Records that do not decode are logged and skipped.

        Raises:
            OSError: the store failed to read.
        """
        store = self._store
        stored = self._offsets.query(REVIVE_GROUP, self._topic, 0)
        offset = max(stored or 0, store.min_offset(self._topic, 0))
        positions: dict[QueuePosition, int] = {}
        records = 0
        while True:
            result = store.get(
                self._topic, 0, offset, max_msgs=_REPLAY_BATCH, max_bytes=_REPLAY_BYTES
            )
            if result.status is not GetStatus.FOUND:
                if result.next_begin_offset > offset and result.status in (
                    GetStatus.MESSAGE_WAS_REMOVING,
                    GetStatus.OFFSET_FOUND_NULL,
                    GetStatus.NO_MATCHED_MESSAGE,
                ):
                    offset = result.next_begin_offset
                    continue
                break
            for raw, log_offset in zip(result.messages, result.queue_offsets, strict=True):
                self._apply(table, raw, log_offset, positions)
            records += len(result.messages)
            offset = result.next_begin_offset
        if records:
            log.info(
                "POP revive log: %d records replayed, %d checkpoints in flight",
                records,
                len(table),
            )
        return positions

    def _apply(
        self,
        table: InflightTable,
        raw: bytes,
        log_offset: int,
        positions: dict[QueuePosition, int],
    ) -> None:
        try:
            rec, _ = decode_message(raw)
            tag = rec.properties.get(mp.TAGS)
            data = json.loads(rec.body)
            if not isinstance(data, dict):
                raise TypeError("not an object")
            if tag == CK_TAG:
                ck = _checkpoint_of(data, log_offset)
                if ck.offsets:
                    where = (ck.group, ck.topic, ck.queue_id)
                    positions[where] = max(positions.get(where, 0), ck.offsets[-1] + 1)
                if ck.key in table:
                    raise ValueError(f"checkpoint {ck.key} twice")
                table.add(ck)
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                found = table.get(_ack_key(data))
                if found is not None:
                    acked = data["aol"] if tag == BATCH_ACK_TAG else [data["ao"]]
                    table.ack(found, [int(o) for o in acked])
            else:
                raise ValueError(f"unknown tag {tag!r}")
        except (RemoteProtocolError, ValueError, KeyError, TypeError) as exc:
            log.warning("POP revive log: record %d skipped: %s", log_offset, exc)
