"""Rebalance: which queues this member should hold (Java ``RebalanceImpl``).

Plan first, then I/O. `allocate_topic` and `plan_rebalance` are pure: from the
queues held now and each topic's freshly computed share they return the queues to add and to
drop. `Rebalancer` gathers the inputs (routes, GET_CONSUMER_LIST_BY_GROUP) and applies
a plan through a `QueueHost` (the consumer's queue table): drops first (mark dropped,
stop pulling, persist the offset), then adds (start offset from the store or the consume-from
policy, a new process queue and its pull task).

A topic whose inputs could not be gathered this round (no route yet, the broker did not
answer), or whose allocation strategy raised, keeps what it holds; the next round tries again.

Orderly consumption in clustering mode passes a `QueueLocker`: the queues to add are
locked on their brokers (LOCK_BATCH_MQ) before anything else happens to them, and a queue
whose lock is refused (another member still holds it) is not added this round
(``RebalanceImpl.updateProcessQueueTableInRebalance``: "add a new mq failed ... because lock
failed"); the next round tries again.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.offset_store import OffsetStore
from aiorocket._names import is_retry_topic
from aiorocket._protocol.allocation import AllocationStrategy, sort_client_ids, sort_queues
from aiorocket.errors import BrokerError, TransportError, broker_error
from aiorocket.models import MessageQueue

__all__ = [
    "QueueHost",
    "QueueLocker",
    "RebalancePlan",
    "Rebalancer",
    "StartPolicy",
    "allocate_topic",
    "describe_queues",
    "plan_rebalance",
    "start_policy",
]

log = logging.getLogger("aiorocket.consumer")


def describe_queues(queues: Iterable[MessageQueue], *, topics: bool = True) -> str:
    """Queues in one short phrase, runs of ids joined: ``orders@broker-a:0-3,6`` (without
    ``topics``: ``broker-a:0-3,6``)."""
    ids: dict[tuple[str, str], list[int]] = defaultdict(list)
    for mq in queues:
        ids[(mq.topic, mq.broker_name)].append(mq.queue_id)
    parts = []
    for (topic, broker), qids in sorted(ids.items()):
        runs: list[list[int]] = []
        for q in sorted(qids):
            if runs and q == runs[-1][-1] + 1:
                runs[-1].append(q)
            else:
                runs.append([q])
        text = ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
        parts.append(f"{topic}@{broker}:{text}" if topics else f"{broker}:{text}")
    return ", ".join(parts) or "no queues"


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    """Queues to start and to stop holding, each sorted."""

    add: tuple[MessageQueue, ...] = ()
    drop: tuple[MessageQueue, ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing to do."""
        return not self.add and not self.drop


def allocate_topic(
    *,
    mq_all: Iterable[MessageQueue],
    cid_all: Iterable[str],
    client_id: str,
    strategy: AllocationStrategy,
    broadcasting: bool = False,
) -> list[MessageQueue]:
    """This member's share of one topic (``rebalanceByTopic``).

    Broadcasting takes every queue. Clustering sorts both lists as Java does and applies
    ``strategy``; a result that names queues outside ``mq_all`` (a faulty custom strategy) is
    trimmed to the real ones.
    """
    queues = sort_queues(mq_all)
    if broadcasting:
        return queues
    cids = sort_client_ids(cid_all)
    if not queues or not cids:
        return []
    mine = strategy(queues, cids, client_id)
    known = set(queues)
    out = sort_queues(mq for mq in set(mine) if mq in known)
    if len(out) != len(set(mine)):
        log.warning("allocation strategy returned queues that are not in the topic's route")
    return out


def plan_rebalance(
    held: Collection[MessageQueue],
    allocated: Mapping[str, Iterable[MessageQueue]],
    subscribed: Collection[str],
) -> RebalancePlan:
    """Compare what is held with this round's allocation.

    Args:
        held: the queues held now.
        allocated: this member's share per topic, for the topics allocated this round.
        subscribed: every subscribed topic; held queues of other topics are dropped
            (``truncateMessageQueueNotMyTopic``).

    Topics subscribed but missing from ``allocated`` keep their queues.
    """
    held_set = set(held)
    add: list[MessageQueue] = []
    drop: list[MessageQueue] = []
    for topic, share in allocated.items():
        target = set(share)
        drop.extend(mq for mq in held_set if mq.topic == topic and mq not in target)
        add.extend(mq for mq in target if mq not in held_set)
    drop.extend(mq for mq in held_set if mq.topic not in subscribed)
    return RebalancePlan(add=tuple(sort_queues(add)), drop=tuple(sort_queues(set(drop))))


#: How to find a start offset when none is stored (docs/protocol.md §6.5 table).
StartPolicy = Literal["zero", "max", "search"]


def start_policy(consume_from: Literal["last", "first"] | datetime, topic: str) -> StartPolicy:
    """``computePullFromWhere`` for a queue with no stored offset.

    ========== ============== ===========
    policy     normal topic   %RETRY% topic
    ========== ============== ===========
    last       max offset     0
    first      0              0
    timestamp  search by time max offset
    ========== ============== ===========
    """
    retry = is_retry_topic(topic)
    if consume_from == "first":
        return "zero"
    if consume_from == "last":
        return "zero" if retry else "max"
    return "max" if retry else "search"


class QueueHost(Protocol):
    """What the rebalancer needs from the table of queues a consumer holds
    (`QueueTable`)."""

    def held(self) -> Collection[MessageQueue]:
        """The queues held now."""

    def start_queue(self, mq: MessageQueue, offset: int, *, locked_at: float | None = None) -> None:
        """Create the process queue and its pull task, pulling from ``offset``; ``locked_at``
        is when the granted lock request was sent (orderly clustering only)."""

    async def stop_queue(self, mq: MessageQueue) -> None:
        """Mark it dropped, stop its pull task, persist and forget its offset."""

    def queues_changed(self, topic: str, count: int) -> None:
        """``topic`` will hold ``count`` queues (per-topic flow limits follow)."""


class QueueLocker(Protocol):
    """Takes broker queue locks for an orderly consumer."""

    async def lock(self, mqs: Sequence[MessageQueue]) -> dict[MessageQueue, float]:
        """Lock ``mqs`` on their brokers; the queues granted, each with the (monotonic) time
        its request was sent. Failures are logged and count as refusals."""


class Rebalancer:
    """Gathers allocation inputs and applies plans (one round at a time; the caller
    serialises rounds)."""

    def __init__(
        self,
        *,
        client: ClientInstance,
        group: str,
        host: QueueHost,
        offsets: OffsetStore,
        strategy: AllocationStrategy,
        broadcasting: bool,
        consume_from: Literal["last", "first"] | datetime,
        locker: QueueLocker | None = None,
        on_duplicate_id: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._client = client
        self._locker = locker
        #: called when this client's id appears more than once in the group (two instances
        #: forced to one id); it gives this member a unique id and registers it
        self._on_duplicate_id = on_duplicate_id
        self._group = group
        self._host = host
        self._offsets = offsets
        self._strategy = strategy
        self._broadcasting = broadcasting
        self._consume_from = consume_from
        #: a rebalance was applied before (the first one is the start's)
        self._applied = False

    async def run_once(self, topics: Sequence[str]) -> RebalancePlan:
        """One round over ``topics`` (the subscribed wire topics); returns the applied plan.

        Raises:
            Nothing expected: per-topic failures are logged and the topic is skipped.
        """
        plan = await self.plan(topics)
        await self.apply(plan)
        return plan

    async def plan(self, topics: Sequence[str]) -> RebalancePlan:
        """Gather this round's inputs and plan it, without applying anything (a pull consumer
        tells its application what it is about to lose before `apply`).

        Raises:
            Nothing expected: per-topic failures are logged and the topic is skipped.
        """
        allocated: dict[str, list[MessageQueue]] = {}
        for topic in topics:
            route = self._client.route(topic)
            mq_all = route.subscribe_queues(topic) if route is not None else []
            if not mq_all:
                log.debug("rebalance: no route for %s yet", topic)
                continue
            if self._broadcasting:
                allocated[topic] = allocate_topic(
                    mq_all=mq_all,
                    cid_all=(),
                    client_id=self._client.client_id,
                    strategy=self._strategy,
                    broadcasting=True,
                )
                continue
            try:
                cids = await self._consumer_ids(topic)
                if self._on_duplicate_id is not None and cids.count(self._client.client_id) > 1:
                    # Two members under one id would both take its share, and leave the share
                    # of the id's second place to nobody (Java's allocation keeps duplicates).
                    await self._on_duplicate_id()
                    cids = await self._consumer_ids(topic)
            except (TransportError, BrokerError) as exc:
                log.info("rebalance of %s skipped: consumer list unavailable (%s)", topic, exc)
                continue
            if self._client.client_id not in cids:
                log.info("rebalance of %s: this client is not registered yet", topic)
            try:
                allocated[topic] = allocate_topic(
                    mq_all=mq_all,
                    cid_all=cids,
                    client_id=self._client.client_id,
                    strategy=self._strategy,
                )
            except Exception as exc:
                # RebalanceImpl.rebalanceByTopic: a throwing strategy is logged and the topic
                # keeps its queues; the next round asks it again.
                strategy = self._strategy
                log.error(
                    "rebalance of %s: allocation strategy %s failed, keeping the queues held: %r",
                    topic,
                    getattr(strategy, "__qualname__", None) or type(strategy).__qualname__,
                    exc,
                )
        return plan_rebalance(self._host.held(), allocated, topics)

    async def _consumer_ids(self, topic: str) -> list[str]:
        # findConsumerIdList asks one broker hosting the topic, the master preferred.
        route = self._client.route(topic)
        names = sorted({bd.broker_name for bd in route.broker_datas}) if route else []
        client, group = self._client, self._group
        last: Exception | None = None
        for name in names:
            try:
                return await client.call_broker(
                    name, topic, lambda addr: client.get_consumer_list(addr, group)
                )
            except (TransportError, BrokerError) as exc:
                last = exc
        if last is not None:
            raise last
        raise broker_error(14, f"no broker address for topic {topic}")

    async def apply(self, plan: RebalancePlan) -> None:
        """Drop, then add; an add whose start offset cannot be found is retried next round."""
        host = self._host
        for mq in plan.drop:
            await host.stop_queue(mq)
            log.debug("rebalance: dropped %s", mq)
        # Limits first: a pull task started below must not fill up to the old share.
        planned = Counter(mq.topic for mq in host.held())
        planned.update(mq.topic for mq in plan.add)
        changed = {mq.topic for mq in (*plan.drop, *plan.add)}
        for topic in changed:
            host.queues_changed(topic, planned[topic])
        failed: Counter[str] = Counter()
        locks: dict[MessageQueue, float] = {}
        if self._locker is not None and plan.add:
            locks = await self._locker.lock(plan.add)
        for mq in plan.add:
            locked_at = locks.get(mq)
            if self._locker is not None and locked_at is None:
                log.info("rebalance: %s not added: its lock is held by another member", mq)
                failed[mq.topic] += 1
                continue
            try:
                offset = await self.start_offset(mq)
            except (TransportError, BrokerError) as exc:
                log.warning("rebalance: cannot find the start offset of %s: %s", mq, exc)
                failed[mq.topic] += 1
                continue
            if locked_at is None:
                host.start_queue(mq, offset)
            else:
                host.start_queue(mq, offset, locked_at=locked_at)
            log.debug("rebalance: added %s at offset %d", mq, offset)
        for topic, n in failed.items():
            host.queues_changed(topic, planned[topic] - n)
        if plan.add or plan.drop:
            # One line per change of the held set; the first one is the start's own line.
            log.log(
                logging.INFO if self._applied else logging.DEBUG,
                "rebalance of %s: %d queue(s) added, %d dropped; holds %s",
                self._group,
                len(plan.add) - sum(failed.values()),
                len(plan.drop),
                describe_queues(host.held()),
            )
        self._applied = True

    async def start_offset(self, mq: MessageQueue) -> int:
        """The stored offset, else the consume-from policy (docs/protocol.md §6.5).

        Raises:
            TransportError, BrokerError: the offset could not be determined.
        """
        stored = await self._offsets.read_stored(mq)
        if stored is not None and stored >= 0:
            return stored
        policy = start_policy(self._consume_from, mq.topic)
        if policy == "zero":
            return 0
        # max and search offset: the master, else a slave (it has the same queues)
        client = self._client
        if policy == "max":
            return await client.call_broker(
                mq.broker_name, mq.topic, lambda addr: client.get_max_offset(addr, mq)
            )
        assert isinstance(self._consume_from, datetime)
        at_ms = int(self._consume_from.timestamp() * 1000)
        return await client.call_broker(
            mq.broker_name, mq.topic, lambda addr: client.search_offset(addr, mq, at_ms)
        )
