"""``EmbeddedBroker``: a RocketMQ 4.x broker and name server on one port (docs/protocol.md §10.2).

One TCP port answers both the name-server codes (routes point at the port itself) and the
broker codes. Layout of the data directory:

```text
commitlog/, consumequeue/, checkpoint, lock    the message store (``store.py``)
config/topics.json                              topics created at run time
config/consumerOffset.json                      committed consumer offsets
config/delayOffset.json                         progress of each delay level
config/timerProgress.json                       low-water offset of the timer messages
config/subscriptionGroup.json, kvConfig.json    admin settings (``admin.py``)
config/consumerOrderInfo.json                   ordered-POP batches (``pop_order.py``)
config/messageRequestMode.json                  PULL/POP mode per topic and group
```

Background work, all owned by the broker and stopped when it closes: one delivery task per
delay level, the timer-message delivery task, a housekeeping task (expired channels and locks
every ``channel_scan_interval``), and a task writing offsets and delay and timer progress
every ``offsets_flush_interval``. A task failing on an unexpected error (a bug) crashes the
broker: it is logged, the broker closes, and
[`wait_closed`][aiorocket.embedded.EmbeddedBroker.wait_closed] re-raises it.

Every response carries ``remoting_version`` (5.0.0 by default: the broker serves timer
messages; clients tell a 4.x broker apart by it, docs/protocol.md §0.3, §12.4).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Coroutine, Hashable
from pathlib import Path
from typing import Any, TypeVar

from aiorocket._concurrency import Service, ServiceOwner
from aiorocket._names import now_ms
from aiorocket._protocol import acl
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import MessageRecord
from aiorocket._remoting import Connection, Dispatcher, Server
from aiorocket.embedded.admin import AdminProcessors
from aiorocket.embedded.clock import Clock
from aiorocket.embedded.config import BrokerConfig
from aiorocket.embedded.config_admin import ConfigAdmin
from aiorocket.embedded.context import BrokerContext, install
from aiorocket.embedded.delays import indexed_tags_code
from aiorocket.embedded.faults import BrokerFaults, InjectedFailure
from aiorocket.embedded.groups import ClientGroups
from aiorocket.embedded.lite import LiteProcessor, LiteService
from aiorocket.embedded.lite_expiry import run_lite_expiry, run_subscription_expiry
from aiorocket.embedded.locks import QueueLocks
from aiorocket.embedded.long_polling import PullWaiters
from aiorocket.embedded.namesrv import NAMESRV_CODES, NameServer
from aiorocket.embedded.offsets import ConsumerOffsets
from aiorocket.embedded.pop import pop_processors
from aiorocket.embedded.pop_service import PopService
from aiorocket.embedded.processors import BrokerProcessors
from aiorocket.embedded.pull import PullProcessor
from aiorocket.embedded.recall import RecallProcessor
from aiorocket.embedded.reply import ReplyProcessor
from aiorocket.embedded.schedule import ScheduleService
from aiorocket.embedded.send import SendProcessor
from aiorocket.embedded.stats import BrokerStats
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.subscriptions import KVConfig, SubscriptionGroups
from aiorocket.embedded.timers import TimerService
from aiorocket.embedded.topics import TopicTable
from aiorocket.embedded.transaction import TransactionService
from aiorocket.embedded.writer import MessageWriter
from aiorocket.errors import ClientClosedError, ConfigurationError, ConnectionClosedError
from aiorocket.tls import server_context

__all__ = ["EmbeddedBroker"]

log = logging.getLogger("aiorocket.embedded")

_T = TypeVar("_T")

#: the class a Java broker names in the remark of an ACL refusal (clients key on it)
_ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"


def _server_tls(config: BrokerConfig) -> ssl.SSLContext:
    assert config.tls_cert is not None
    return server_context(config.tls_cert, config.tls_key, client_cafile=config.tls_client_ca)


def _primary_ipv4() -> str:
    # The address of the interface that routes outward; a UDP connect sends no packet.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            ip = str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"
    return ip if ip not in ("0.0.0.0", "") else "127.0.0.1"


class EmbeddedBroker(ServiceOwner):
    """An embedded broker + name server, as an async context manager.

    ```python
    async with EmbeddedBroker() as broker:
        ...  # clients use broker.address as name server (and find the broker by route)
    ```

    Args:
        host: the IPv4 address to listen on; ``"0.0.0.0"`` listens everywhere and
            advertises the primary address (routes never carry 0.0.0.0).
        port: the port; 0 picks a free one (see
            [`address`][aiorocket.embedded.EmbeddedBroker.address]).
        data_dir: where messages, topics and offsets live; ``None`` uses a new temporary
            directory that is removed when the broker closes.
        config: every setting and timing constant.
        clock: the broker's time: store times, and when delayed and timer messages come due,
            POP invisible times end, transaction checks run and idle lite topics expire.
            ``None`` uses the real clock; a test passes a
            [`ManualClock`][aiorocket.embedded.ManualClock] and moves it on with
            [`advance`][aiorocket.embedded.ManualClock.advance] instead of sleeping. What
            a client's own timers pace (held pulls and POPs, heartbeats, lock leases)
            stays on real time.

    Raises:
        ConfigurationError: ``host`` is not an IPv4 address (the C++ client and ali-ons read
            only 4-byte hosts, docs/protocol.md §4.7), or ``port`` is out of range.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | Path | None = None,
        config: BrokerConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        if host == "localhost":
            host = "127.0.0.1"
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ConfigurationError(f"host must be an IPv4 address, not {host!r}") from None
        if not 0 <= port <= 65535:
            raise ConfigurationError(f"port {port} is outside 0..65535")
        self._host = host
        self._port = port
        self._config = config if config is not None else BrokerConfig()
        self._clock = clock if clock is not None else Clock()
        self._data_dir_arg = Path(data_dir) if data_dir is not None else None
        self._data_dir: Path | None = None
        self._own_dir = False
        self._advertised: tuple[str, int] = ("127.0.0.1", 0)
        self._bound: tuple[str, int] = (host, 0)
        self._faults: BrokerFaults | None = None
        self._server: Server | None = None
        self._store: MessageStore | None = None
        self._offsets: ConsumerOffsets | None = None
        self._schedule: ScheduleService | None = None
        self._timers: TimerService | None = None
        self._pop: PopService | None = None
        self._lite: LiteService | None = None
        self._topics: TopicTable | None = None
        self._groups: ClientGroups | None = None
        self._locks: QueueLocks | None = None
        self._waiters = PullWaiters()
        self._stats: BrokerStats | None = None
        self._transactions: TransactionService | None = None
        self._dispatcher = Dispatcher()
        self._lifecycle = Service(
            "aiorocket-broker",
            startup=self._startup,
            shutdown=self._teardown,  # its error is raised by close(), no crash
            abort=self._abort,
            logger=log,
        )

    # -- public ------------------------------------------------------------------------------

    @property
    def _running(self) -> bool:
        # Serving: bound (late in the start-up: the address is known) and not closing.
        return self._server is not None and not self._lifecycle.closing

    @property
    def address(self) -> str:
        """``"ip:port"`` of the broker and name server, as routes advertise it.

        Raises:
            ClientClosedError: the broker is not running.
        """
        if not self._running:
            raise ClientClosedError("the broker is not running")
        return f"{self._advertised[0]}:{self._advertised[1]}"

    @property
    def port(self) -> int:
        """The bound port (0 before the broker starts)."""
        return self._bound[1]

    @property
    def listen_address(self) -> str:
        """``"host:port"`` the broker listens on; differs from
        [`address`][aiorocket.embedded.EmbeddedBroker.address] when ``advertised_host`` or
        ``advertised_port`` is set (a proxy or NAT in between).

        Raises:
            ClientClosedError: the broker is not running.
        """
        if not self._running:
            raise ClientClosedError("the broker is not running")
        host = self._bound[0]
        return f"{'127.0.0.1' if host == '0.0.0.0' else host}:{self._bound[1]}"

    @property
    def config(self) -> BrokerConfig:
        """The settings the broker runs with."""
        return self._config

    @property
    def clock(self) -> Clock:
        """The clock the broker runs on (the real one unless one was passed in)."""
        return self._clock

    @property
    def data_dir(self) -> Path:
        """The data directory.

        Raises:
            ClientClosedError: the broker has not started.
        """
        if self._data_dir is None:
            raise ClientClosedError("the broker has not started")
        return self._data_dir

    @property
    def store(self) -> MessageStore:
        """The message store (for inspection and tests).

        Raises:
            ClientClosedError: the broker is not running.
        """
        return self._require(self._store)

    @property
    def topics(self) -> TopicTable:
        """The topic table (for inspection and tests).

        Raises:
            ClientClosedError: the broker is not running.
        """
        return self._require(self._topics)

    @property
    def transactions(self) -> TransactionService:
        """Half messages, END_TRANSACTION and the check-back (for inspection and tests).

        Raises:
            ClientClosedError: the broker is not running.
        """
        return self._require(self._transactions if self._running else None)

    @property
    def timers(self) -> TimerService:
        """The timer-message service (for inspection and tests).

        Raises:
            ClientClosedError: the broker is not running.
        """
        return self._require(self._timers if self._running else None)

    @property
    def lite(self) -> LiteService:
        """Lite subscriptions and batches (for inspection and tests; docs/protocol.md §12.8).

        Raises:
            ClientClosedError: the broker is not running, or answers as 4.x (no lite topics).
        """
        return self._require(self._lite if self._running else None)

    @property
    def held_pulls(self) -> int:
        """How many pulls are being held right now."""
        return len(self._waiters)

    @property
    def pop_in_flight(self) -> int:
        """How many POP checkpoints (popped batches) wait for their acks or their revive
        (for inspection and tests); 0 before the broker started."""
        return 0 if self._pop is None else len(self._pop.context.inflight)

    @property
    def pop_revived(self) -> int:
        """How many popped messages went unacked past their invisible time and were put in
        their retry topics again, since the broker started (for inspection and tests)."""
        return 0 if self._pop is None else self._pop.context.revive.revived

    # -- fault hooks (for tests; aiorocket.testing) -------------------------------------------

    def _require_faults(self) -> BrokerFaults:
        return self._require(self._faults if self._running else None)

    @staticmethod
    def _require(part: _T | None) -> _T:
        if part is None:
            raise ClientClosedError("the broker is not running")
        return part

    def fail_next(
        self, request_code: int, response_code: int, times: int = 1, *, remark: str = ""
    ) -> None:
        """Answer the next ``times`` requests with ``request_code`` with ``response_code``
        instead of processing them (e.g. ``fail_next(RequestCode.SEND_MESSAGE_V2,
        ResponseCode.SYSTEM_BUSY, 3)``: what a broker whose page cache is busy answers).

        Raises:
            ConfigurationError: ``times`` < 1, or ``response_code`` is SUCCESS.
            ClientClosedError: the broker is not running.
        """
        self._require_faults().fail_next(request_code, response_code, times, remark=remark)

    @property
    def injected_failures(self) -> list[InjectedFailure]:
        """The requests [`fail_next`][aiorocket.embedded.EmbeddedBroker.fail_next] answered so far,
        oldest first."""
        return list(self._faults.injected) if self._faults is not None else []

    async def notify_rebalance(self, group: str) -> int:
        """Send NOTIFY_CONSUMER_IDS_CHANGED to every member of ``group``, which rebalances at
        once; returns how many members were told.

        Raises:
            ClientClosedError: the broker is not running.
        """
        return await self._require_faults().notify_rebalance(group)

    async def redeliver(
        self, topic: str, queue: int, from_offset: int, *, group: str | None = None
    ) -> list[str]:
        """Deliver the messages of queue ``queue`` of ``topic`` again from ``from_offset``:
        the committed offset of ``group`` (default: every group consuming the topic) moves
        back and online members get RESET_CONSUMER_CLIENT_OFFSET for that queue, as after
        ``mqadmin resetOffsetByTime``. Returns the groups concerned.

        Raises:
            ConfigurationError: unknown topic or queue, or a negative offset.
            ClientClosedError: the broker is not running.
        """
        return await self._require_faults().redeliver(topic, queue, from_offset, group=group)

    def drop_below(self, topic: str, queue: int, offset: int) -> int:
        """Make the messages of queue ``queue`` of ``topic`` below ``offset`` unreadable, as
        when retention deletes old segments: pulls below it are answered OFFSET_MOVED. Returns
        the queue's new minimum offset. Lasts until the broker restarts.

        Raises:
            ConfigurationError: the queue holds no message.
            ClientClosedError: the broker is not running.
        """
        return self._require_faults().drop_below(topic, queue, offset)

    async def start(self) -> None:
        """Recover the data directory, listen, and start the background tasks.

        Raises:
            ConfigurationError: already started, or the data directory is in use by another
                broker.
            OSError: the port cannot be bound or the data directory cannot be used.
            ValueError: a state file in the data directory is malformed.
        """
        if self._lifecycle.started:
            raise ConfigurationError("an EmbeddedBroker can be started only once")
        if self._data_dir_arg is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="aiorocket-broker-"))
            self._own_dir = True
        else:
            self._data_dir = self._data_dir_arg
            self._data_dir.mkdir(parents=True, exist_ok=True)
        await self._lifecycle.start()

    async def _startup(self) -> None:
        # In the service's supervisor task, which also runs the teardown: the server and the
        # store are entered and left in one task.
        assert self._data_dir is not None
        await self._open(self._config, self._data_dir)

    async def _open(self, config: BrokerConfig, root: Path) -> None:
        # Order matters: state is loaded (and the timer wheel rebuilt) before the server
        # accepts requests; the services' tasks start once it listens.
        ctx, schedule, timers = await self._load_state(config, root)
        pop, lite, transactions = self._install_processors(ctx, root / "config")
        server = await self._serve(config)
        await schedule.start()
        await timers.start()
        await pop.start()
        # A crash of one of the parts (a bug in its task) crashes the broker, visibly.
        for part in (ctx.store, server, schedule, timers, pop.context.revive):
            self._lifecycle.watch(part)
        if lite is not None:
            lite.start()
            self._spawn(run_lite_expiry(ctx, lite), "aiorocket-broker-lite-expiry")
            self._spawn(run_subscription_expiry(ctx, lite), "aiorocket-broker-lite-subscribers")
        self._spawn(self._housekeeping(), "aiorocket-broker-housekeeping")
        self._spawn(self._persist_loop(), "aiorocket-broker-persist")
        self._spawn(transactions.run(), "aiorocket-broker-transactions")
        log.info("embedded broker listening on %s (data in %s)", self.address, root)

    async def _load_state(
        self, config: BrokerConfig, root: Path
    ) -> tuple[BrokerContext, ScheduleService, TimerService]:
        """The store and the config tables, read from ``root``; the context every
        processor shares."""
        store = MessageStore(
            root,
            flush=config.flush,
            flush_interval=config.flush_interval,
            retention_hours=config.retention_hours,
            segment_size=config.segment_size,
            tags_code_of=self._tags_code_of,
            clock=self._clock.now_ms,
        )
        await store.open()
        self._store = store
        conf_dir = root / "config"
        conf_dir.mkdir(exist_ok=True)
        topics = TopicTable(conf_dir / "topics.json", config=config)
        topics.load()
        self._topics = topics
        offsets = ConsumerOffsets(conf_dir / "consumerOffset.json")
        offsets.load()
        self._offsets = offsets
        self._groups = groups = ClientGroups(
            notify=self._notify, notify_enabled=config.notify_consumer_ids_changed
        )
        self._locks = locks = QueueLocks(lease=config.lock_lease)

        writer = MessageWriter(
            store, self._waiters, config, self._wake_schedule, self._parked, clock=self._clock
        )
        schedule = ScheduleService(
            writer,
            topics,
            levels=config.delay_levels,
            path=conf_dir / "delayOffset.json",
            durable=config.flush == "sync",
            store_address=self._store_address,
        )
        schedule.load()
        self._schedule = schedule
        timers = TimerService(
            writer,
            topics,
            config=config,
            path=conf_dir / "timerProgress.json",
            durable=config.flush == "sync",
            store_address=self._store_address,
        )
        timers.load()
        # Before the server accepts sends: parks from then on reach the service directly.
        timers.rebuild()
        self._timers = timers
        self._stats = stats = BrokerStats(
            now=time.monotonic(),
            now_ms=now_ms(),
            stored=lambda: (store.statistics().messages_put, store.statistics().bytes_put),
        )
        subscriptions = SubscriptionGroups(conf_dir / "subscriptionGroup.json", now_ms=now_ms())
        subscriptions.load()
        kv = KVConfig(conf_dir / "kvConfig.json")
        kv.load()
        ctx = BrokerContext(
            config=config,
            data_dir=root,
            store=store,
            writer=writer,
            topics=topics,
            groups=groups,
            offsets=offsets,
            locks=locks,
            waiters=self._waiters,
            subscriptions=subscriptions,
            kv=kv,
            stats=stats,
            address=lambda: self.address,
            store_address=self._store_address,
            spawn=self._spawn,
            timers=timers,
            clock=self._clock,
        )
        return ctx, schedule, timers

    def _install_processors(
        self, ctx: BrokerContext, conf_dir: Path
    ) -> tuple[PopService, LiteService | None, TransactionService]:
        """Every request processor, on the dispatcher; the services among them that run
        tasks (POP, lite topics, transaction checks)."""
        self._faults = BrokerFaults(ctx)
        self._transactions = transactions = TransactionService(ctx)
        # POP state (docs/protocol.md §12.3): the revive log is replayed before serving.
        self._pop = pop = PopService(ctx, conf_dir)
        pop.load()
        # Lite topics (§12.8), served when the broker answers as 5.x, as POP is.
        lite = LiteService(ctx) if ctx.config.timers_enabled else None
        self._lite = lite
        lite_processor = None if lite is None else LiteProcessor(ctx, lite)
        install(
            self._dispatcher,
            (
                SendProcessor(ctx),
                ReplyProcessor(ctx),
                transactions,
                PullProcessor(ctx),
                BrokerProcessors(ctx),
                AdminProcessors(ctx),
                ConfigAdmin(ctx),
                NameServer(ctx),
                RecallProcessor(ctx),
                *pop_processors(ctx, pop.context, lite_processor),
                *(() if lite_processor is None else (lite_processor,)),
            ),
        )
        return pop, lite, transactions

    async def _serve(self, config: BrokerConfig) -> Server:
        """Listen; the bound and the advertised address."""
        tls_mode = config.effective_tls_mode
        server = Server(
            self._handle,
            host=self._host,
            port=self._port,
            on_disconnect=self._closed,
            ssl_context=_server_tls(config) if tls_mode != "disabled" else None,
            tls_mode=tls_mode,
            tls_handshake_timeout=config.tls_handshake_timeout,
            # A pull that finds messages answers without waiting: no task for it (it only
            # waits, in a task then, when it is held).
            eager_codes=frozenset({int(RequestCode.PULL_MESSAGE)}),
            response_version=config.remoting_version,
        )
        await server.__aenter__()
        self._server = server
        bound_host, bound_port = server.address
        if config.advertised_host is not None:
            adv = config.advertised_host
        elif bound_host == "0.0.0.0":
            adv = _primary_ipv4()
        else:
            adv = bound_host
        self._bound = (bound_host, bound_port)
        self._advertised = (adv, config.advertised_port or bound_port)
        return server

    async def close(self) -> None:
        """Stop serving, write offsets and delay and timer progress, flush and close the store.

        Idempotent. Held pulls are dropped with their connections.

        Raises:
            OSError: the final flush failed.
        """
        if self._lifecycle.started:
            await self._lifecycle.close()

    async def _abort(self, started: bool) -> None:
        # A failed start-up (its error goes to start()'s caller) or a crash (logged).
        try:
            await self._teardown()
        except Exception:
            log.exception("closing the broker after a failure failed")

    async def _teardown(self) -> None:
        # The background tasks stop first, before what they use closes.
        tasks = list(self._lifecycle.tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._schedule is not None:
            await self._schedule.close()
        if self._timers is not None:
            await self._timers.close()
        if self._pop is not None:
            await self._pop.close()
        if self._lite is not None:
            self._lite.close()
        server, self._server = self._server, None
        if server is not None:
            await server.__aexit__(None, None, None)
        try:
            if self._store is not None and self._store.is_open:
                if self._pop is not None:
                    await self._pop.flush()  # the revive offset goes with the offsets
                if self._offsets is not None:
                    await self._offsets.flush()
                if self._schedule is not None:
                    await self._schedule.flush()
                if self._timers is not None:
                    await self._timers.flush()
        finally:
            store, self._store = self._store, None
            if store is not None:
                await store.close()
            if self._own_dir and self._data_dir is not None:
                shutil.rmtree(self._data_dir, ignore_errors=True)
                self._own_dir = False

    # -- plumbing ----------------------------------------------------------------------------

    def _store_address(self) -> tuple[str, int]:
        return self._advertised

    def _tags_code_of(self, record: MessageRecord) -> int:
        # How the store re-indexes a record after a crash: the same codes the send path
        # writes (the delivery time for parked messages, with this broker's delay table).
        config = self._config
        return indexed_tags_code(record, config.delay_levels, config.timer_precision_ms)

    def _wake_schedule(self, level_queue: int) -> None:
        if self._schedule is not None:
            self._schedule.wake(level_queue)

    def _parked(self, queue_offset: int, due_ms: int, stored_ms: int) -> None:
        if self._timers is not None:
            self._timers.parked(queue_offset, due_ms, stored_ms)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        # A task of the broker's service: what it expects to fail it catches and logs itself
        # (as Java's scheduled tasks do); anything else is a bug and crashes the broker. Once
        # the broker stops, there is nothing left to run it for.
        try:
            self._lifecycle.spawn(coro, name=name)
        except ClientClosedError:
            coro.close()

    async def _handle(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        config = self._config
        if config.acl_enabled and cmd.code not in NAMESRV_CODES:
            refusal = self._check_acl(cmd)
            if refusal is not None:
                return refusal
        faults = self._faults
        if faults is not None and faults.armed:
            injected = faults.intercept(cmd)
            if injected is not None:
                return injected
        return await self._dispatcher(conn, cmd)

    def _check_acl(self, cmd: RemotingCommand) -> RemotingCommand | None:
        # PlainAccessValidator (docs/protocol.md §8): the account must exist and the signature must
        # cover every ext field and the body; failures are SYSTEM_ERROR whose remark is the
        # AclException's toString(), as the Java broker's exceptionSimpleDesc begins.
        ext = cmd.ext_fields
        access_key = ext.get(acl.ACCESS_KEY)
        if not access_key or access_key != self._config.access_key:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"{_ACL_EXCEPTION}: No acl config for {access_key or '(none)'}",
            )
        assert self._config.secret_key is not None
        if not acl.verify(ext, cmd.body, secret_key=self._config.secret_key):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"{_ACL_EXCEPTION}: Check signature failed for accessKey={access_key}",
            )
        return None

    def _closed(self, conn: Connection) -> None:
        if self._groups is not None:
            self._groups.channel_closed(conn)

    def _notify(self, group: str, channels: list[Hashable]) -> None:
        # Broker2Client.notifyConsumerIdsChanged: a oneway request (flag 2) to every channel.
        if not self._running:
            return
        for channel in channels:
            if isinstance(channel, Connection) and not channel.is_closed:
                self._spawn(self._send_notify(channel, group), "aiorocket-notify")

    @staticmethod
    async def _send_notify(conn: Connection, group: str) -> None:
        cmd = RemotingCommand.request(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
        )
        with contextlib.suppress(ConnectionClosedError):
            await conn.send_oneway(cmd)

    async def _housekeeping(self) -> None:
        config = self._config
        while True:
            await asyncio.sleep(config.channel_scan_interval)
            # In memory only: nothing here is expected to fail (a failure is a bug).
            now = time.monotonic()
            assert self._groups is not None
            assert self._locks is not None
            for channel in self._groups.expire(now=now, max_idle=config.channel_expiry):
                if isinstance(channel, Connection):
                    log.info("closing expired channel %s", channel.peer)
                    channel.close()
            self._locks.expire(now=now)

    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.offsets_flush_interval)
            if self._stats is not None:
                # rate samples (clusterList's TPS) whether or not anything is read meanwhile
                self._stats.tick(now=time.monotonic(), now_ms=now_ms())
            try:
                if self._pop is not None:
                    await self._pop.flush()
                if self._offsets is not None:
                    await self._offsets.flush()
                if self._schedule is not None:
                    await self._schedule.flush()
                if self._timers is not None:
                    await self._timers.flush()
            except OSError:
                # A full or failing disk: logged, tried again next round (as Java's
                # persist tasks do); anything else is a bug and crashes the broker.
                log.exception("writing consumer offsets, delay or timer progress failed")
