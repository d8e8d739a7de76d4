"""One client instance per client id: name-server routes, broker addresses, RPCs.

This is Java's ``MQClientInstance`` + ``MQClientAPIImpl`` without threads: a connection pool
(one connection per address, shared by the producer and consumers of this instance), the route
and broker-address tables, and one typed coroutine per broker RPC that turns the response code
into a value or a [`BrokerError`][aiorocket.errors.BrokerError].
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from aiorocket._client.pull import PreparedPull, PullResponse, pull_response
from aiorocket._client.send import SendResponse, send_response
from aiorocket._names import is_system_resource
from aiorocket._protocol import acl
from aiorocket._protocol.bodies import (
    CheckClientRequestBody,
    ConsumerListBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    SubscriptionData,
    TopicList,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from aiorocket._protocol.codes import RequestCode, ResponseCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from aiorocket._remoting import (
    Connection,
    ConnectionPool,
    Connector,
    RequestHandler,
    Spawn,
    tcp_connector,
    tls_connector,
)
from aiorocket.errors import (
    BrokerError,
    ClientClosedError,
    ConnectError,
    ConnectionClosedError,
    RocketError,
    TransportError,
    broker_error,
)
from aiorocket.models import MessageQueue
from aiorocket.settings import ClientSettings, closest_name
from aiorocket.tls import client_context

__all__ = ["ClientInstance", "local_ipv4"]

log = logging.getLogger("aiorocket.client")

_instance_counter = itertools.count(1)

_T = TypeVar("_T")


def local_ipv4() -> str:
    """This host's IPv4 address as its own resolver sees it; 127.0.0.1 when there is none.

    Only used inside client ids and message ids (like Java's ``RemotingUtil.getLocalAddress``);
    nothing is sent to find it.
    """
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addr = str(info[4][0])
            if not addr.startswith("127."):
                return addr
    except OSError:
        pass
    return "127.0.0.1"


def _check(resp: RemotingCommand, *ok: int) -> RemotingCommand:
    if resp.code in ok or (not ok and resp.code == ResponseCode.SUCCESS):
        return resp
    raise broker_error(resp.code, resp.remark)


def _connector(s: ClientSettings) -> Connector:
    # One context per client: loading the system's CAs takes milliseconds, and the same
    # context serves name servers and brokers alike (Java's NettyRemotingClient does the same).
    if isinstance(s.tls, ssl.SSLContext):
        return tls_connector(s.tls, shutdown_timeout=s.connect_timeout)
    if s.tls:
        ctx = client_context(s.tls_ca, verify=s.tls_verify)
        return tls_connector(ctx, shutdown_timeout=s.connect_timeout)
    return tcp_connector


class ClientInstance:
    """Routes, broker addresses and typed RPCs over one shared connection pool.

    Nothing happens in the constructor; `start` creates the pool inside the owner's task
    group (``spawn``), where requests from brokers (NOTIFY_CONSUMER_IDS_CHANGED, …) are served
    by ``handler``.
    """

    def __init__(self, settings: ClientSettings, *, handler: RequestHandler | None = None) -> None:
        self.settings = settings
        self.ip = local_ipv4()
        instance = settings.instance_name or f"{os.getpid()}#{next(_instance_counter)}{id(self)}"
        self.client_id = f"{self.ip}@{instance}"
        self._handler = handler
        self._pool: ConnectionPool | None = None
        #: requests go out in the binary header dialect (settings.serialize_type)
        self._binary = False
        self._routes: dict[str, TopicRouteData] = {}
        self._broker_addrs: dict[str, dict[int, str]] = {}
        #: on-demand route fetches in flight, and when each topic's last one started
        self._refreshing: dict[str, asyncio.Future[TopicRouteData | None]] = {}
        self._refreshed_at: dict[str, float] = {}
        self._namesrv_index = 0
        self._closed = False
        #: the ``version`` of the last response from each address: the server's release
        #: (docs/protocol.md §0.3; Java keeps the heartbeat's in ``brokerVersionTable``)
        self._versions: dict[str, int] = {}
        #: whether a name-server address is a proxy's (`is_proxy`)
        self._proxies: dict[str, bool] = {}
        #: called with the broker names that appeared in a route for the first time
        self.on_new_brokers: Callable[[set[str]], None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, spawn: Spawn) -> None:
        """Create the connection pool; inbound requests run through ``spawn``."""
        hook: Callable[[RemotingCommand], None] | None = None
        s = self.settings
        if s.access_key and s.secret_key:
            access_key, secret_key = s.access_key, s.secret_key

            def hook(cmd: RemotingCommand) -> None:
                cmd.ext_fields = acl.signed_ext_fields(
                    cmd.ext_fields, cmd.body, access_key=access_key, secret_key=secret_key
                )

        self._pool = ConnectionPool(
            handler=self._handler,
            spawn=spawn if self._handler is not None else None,
            connect_timeout=s.connect_timeout,
            max_frame_size=s.max_frame_size,
            request_hook=hook,
            connector=_connector(s),
            serialize_type=SerializeType.ROCKETMQ if s.serialize_type == "rocketmq" else None,
        )
        self._binary = s.serialize_type == "rocketmq"

    async def close(self) -> None:
        """Close every connection; later calls raise
        [`ClientClosedError`][aiorocket.errors.ClientClosedError]."""
        self._closed = True
        if self._pool is not None:
            await self._pool.close()

    def connections(self) -> dict[str, Connection]:
        """The live connections by address (empty before start and after close)."""
        return {} if self._pool is None else self._pool.connections()

    # -- invocation ---------------------------------------------------------------------------

    def _require_pool(self) -> ConnectionPool:
        if self._closed or self._pool is None:
            raise ClientClosedError("the client is closed" if self._closed else "not started")
        return self._pool

    async def invoke(
        self, addr: str, cmd: RemotingCommand, *, timeout: float | None = None
    ) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and return the response (any code).

        Raises:
            TransportError: connect, closed connection or timeout.
            ClientClosedError: the client is closed.
        """
        conn = await self._require_pool().get(addr)
        resp = await conn.request(cmd, timeout=timeout or self.settings.request_timeout)
        self._versions[addr] = resp.version
        return resp

    async def is_proxy(self, addr: str) -> bool:
        """Whether ``addr`` is a RocketMQ 5 proxy's remoting port given as a name server.

        Routes through a proxy name the proxy for every broker, so a broker address equal to a
        name-server address is a proxy's, or the embedded broker's (one port for both); the
        proxy alone refuses GET_BROKER_CLUSTER_INFO, which every name server serves. Asked
        once per address.

        Raises:
            TransportError: the address could not be reached.
        """
        if addr not in self.settings.namesrv:
            return False
        known = self._proxies.get(addr)
        if known is None:
            cmd = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            resp = await self.invoke(addr, cmd)
            self._proxies[addr] = known = resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        return known

    def server_version(self, addr: str) -> int | None:
        """The ``MQVersion`` ordinal the server at ``addr`` last answered with (every response
        carries it; 409 for 4.9.8, 412 and up for 5.x), or ``None`` if it never answered."""
        return self._versions.get(addr)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send ``cmd`` to ``addr`` without waiting for a response.

        Raises:
            TransportError: the connection could not be used.
        """
        conn = await self._require_pool().get(addr)
        await conn.send_oneway(cmd)

    async def invoke_namesrv(self, cmd: RemotingCommand) -> RemotingCommand:
        """Send ``cmd`` to a name server, moving on to the next one on transport errors.

        Raises:
            TransportError: every name server failed (the last error).
        """
        addrs = self.settings.namesrv
        last: TransportError | None = None
        for i in range(len(addrs)):
            idx = (self._namesrv_index + i) % len(addrs)
            try:
                resp = await self.invoke(addrs[idx], cmd)
            except TransportError as exc:
                last = exc
                log.debug("name server %s failed: %s", addrs[idx], exc)
                continue
            self._namesrv_index = idx
            return resp
        assert last is not None
        raise last

    async def connect_namesrv(self) -> str:
        """Connect to a name server (from the one last used, each bounded by
        ``connect_timeout``) and return its address: a client's start checks its name servers
        are there, so a wrong or dead address fails the start rather than the first send.

        Raises:
            ConnectError: none could be connected; the message names every address tried.
        """
        addrs = self.settings.namesrv
        pool = self._require_pool()
        tried: list[str] = []
        last: ConnectError | None = None
        for i in range(len(addrs)):
            idx = (self._namesrv_index + i) % len(addrs)
            try:
                await pool.get(addrs[idx])
            except ConnectError as exc:
                # (the pool's message names the address and, for TLS, what to trust)
                tried.append(str(exc))
                last = exc
                continue
            self._namesrv_index = idx
            return addrs[idx]
        raise ConnectError(
            f"no name server reachable within {self.settings.connect_timeout:g} s: "
            f"{'; '.join(tried)}; check namesrv= (or AIOROCKET_NAMESRV) and that the name "
            "server runs"
        ) from (last.__cause__ if last is not None and last.__cause__ is not None else last)

    async def topic_names(self) -> list[str]:
        """Every topic the name server knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted.

        Raises:
            BrokerError, TransportError: the name server refused or could not be reached.
        """
        resp = _check(
            await self.invoke_namesrv(
                RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            )
        )
        return sorted(TopicList.from_json(resp.body).topic_list)

    async def missing_topic_hint(self, topic: str) -> str:
        """`` (did you mean 'a' or 'b'?)`` naming the existing topics closest to ``topic`` (a
        missing topic is most often a typo), or ``""``. Never raises: a failed look-up gives
        no hint."""
        try:
            names = await self.topic_names()
        except RocketError as exc:
            log.debug("topic list not read for a hint: %s", exc)
            return ""
        users = (n for n in names if not n.startswith("%") and not is_system_resource(n))
        return closest_name(topic, users, 3)

    # -- routes -------------------------------------------------------------------------------

    async def fetch_route(self, topic: str) -> TopicRouteData:
        """Ask the name server for ``topic``'s route and remember it.

        Raises:
            TopicNotExistError: the name server has no route (code 17).
            BrokerError: any other error code.
            TransportError: no name server answered.
        """
        # acceptStandardJsonOnly makes 4.9.4+ name servers quote integer keys (§5.1, §7.1).
        header = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
        resp = _check(
            await self.invoke_namesrv(
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header.to_ext())
            )
        )
        route = TopicRouteData.from_json(resp.body)
        self._remember(topic, route)
        return route

    def _remember(self, topic: str, route: TopicRouteData) -> None:
        self._routes[topic] = route
        new: set[str] = set()
        for bd in route.broker_datas:
            if bd.broker_name not in self._broker_addrs:
                new.add(bd.broker_name)
            self._broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
        # MQClientInstance.cleanOfflineBroker: a broker that no known route names any more (the
        # name server dropped it: stopped or dead) is forgotten, so heartbeats stop going to it
        # and, when it comes back, it is new again (heartbeats go to it at once).
        named = {bd.broker_name for r in self._routes.values() for bd in r.broker_datas}
        for gone in set(self._broker_addrs) - named:
            del self._broker_addrs[gone]
        if new and self.on_new_brokers is not None:
            self.on_new_brokers(new)

    def route(self, topic: str) -> TopicRouteData | None:
        """The last route fetched for ``topic``, if any."""
        return self._routes.get(topic)

    def master_address(self, broker_name: str) -> str | None:
        """The cached address of ``broker_name``'s master (broker id 0), if any (§7.4): for
        labels; requests look their address up with `find_broker` or `call_broker`."""
        return self._broker_addrs.get(broker_name, {}).get(0)

    def broker_names(self) -> list[str]:
        """Every broker name known from routes."""
        return list(self._broker_addrs)

    def all_broker_addresses(self, *, masters_only: bool = False) -> list[str]:
        """Every known broker address (or only masters)."""
        out: list[str] = []
        for addrs in self._broker_addrs.values():
            out.extend(a for bid, a in addrs.items() if not masters_only or bid == 0)
        return out

    async def refresh_route(self, topic: str) -> TopicRouteData | None:
        """Fetch ``topic``'s route now because a request found no master or could not reach
        the cached address; the route known afterwards.

        One fetch per topic is in flight at a time (later callers wait for it) and one starts
        at most every ``route_retry_interval`` seconds (callers in between get the cached
        route), so a burst of failing requests asks the name server once. Errors are logged,
        not raised: the caller goes on with what is known.
        """
        pending = self._refreshing.get(topic)
        if pending is None:
            now = time.monotonic()
            last = self._refreshed_at.get(topic)
            if last is not None and now - last < self.settings.route_retry_interval:
                return self._routes.get(topic)
            self._refreshed_at[topic] = now
            pending = asyncio.ensure_future(self._fetch_route_logged(topic))
            self._refreshing[topic] = pending
            pending.add_done_callback(lambda _: self._refreshing.pop(topic, None))
        # shielded: a caller cancelled while waiting leaves the fetch to the others
        return await asyncio.shield(pending)

    async def _fetch_route_logged(self, topic: str) -> TopicRouteData | None:
        try:
            return await self.fetch_route(topic)
        except (TransportError, BrokerError) as exc:
            log.warning("route of %s: refresh failed: %s", topic, exc)
            return self._routes.get(topic)

    async def find_broker(
        self, broker_name: str, topic: str, *, master: bool = False, broker_id: int = 0
    ) -> str:
        """The address to send a request for ``broker_name`` (a queue of ``topic``) to.

        ``master``: sends, queue locks and transactions need the master (broker id 0).
        Otherwise (pulls, offset queries and commits, max/min/search offset, message queries)
        ``broker_id`` (the broker's ``suggestWhichBrokerId``) or the master, and without
        either any broker of the group, as Java's ``findBrokerAddressInSubscribe`` after a
        route refresh (``RemoteBrokerOffsetStore``: master first, then ``onlyThisBroker``
        false). A missing address first refreshes the route (`refresh_route`); a dead one is
        `call_broker`'s.

        Raises:
            ServiceNotAvailableError: no such address, even after the refresh.
        """
        for attempt in range(2):
            addrs = self._broker_addrs.get(broker_name, {})
            addr = addrs.get(0) if master else addrs.get(broker_id) or addrs.get(0)
            if addr is not None:
                return addr
            if attempt == 0:
                await self.refresh_route(topic)
        if not master and addrs:
            return next(iter(addrs.values()))
        what = "master address" if master else "address"
        raise broker_error(
            ResponseCode.SERVICE_NOT_AVAILABLE, f"no {what} for broker {broker_name}"
        )

    async def call_broker(
        self,
        broker_name: str,
        topic: str,
        call: Callable[[str], Awaitable[_T]],
        *,
        master: bool = False,
        broker_id: int = 0,
        after_close: bool = True,
    ) -> _T:
        """``call`` with the address of ``broker_name`` (`find_broker`'s arguments); once
        more at the new address when the cached one is dead.

        A cached address stays until a route names another, so after a failover (the master
        restarted elsewhere and registered there) it is present but dead; Java learns the new
        one at its next route poll (30 s). Here a connection-level failure
        ([`ConnectError`][aiorocket.errors.ConnectError], and
        [`ConnectionClosedError`][aiorocket.errors.ConnectionClosedError] unless
        ``after_close`` is false: a request the broker may have run must not run twice)
        refreshes ``topic``'s route (`refresh_route`) and, when the address changed, calls
        again there.

        Raises:
            ServiceNotAvailableError: no address for ``broker_name``, even after a refresh.
            BrokerError, TransportError: what ``call`` raised.
        """
        addr = await self.find_broker(broker_name, topic, master=master, broker_id=broker_id)
        try:
            return await call(addr)
        except (ConnectError, ConnectionClosedError) as exc:
            if isinstance(exc, ConnectionClosedError) and not after_close:
                raise
            await self.refresh_route(topic)
            try:
                moved = await self.find_broker(
                    broker_name, topic, master=master, broker_id=broker_id
                )
            except BrokerError:
                raise exc from None  # gone from the route: the failure says more
            if moved == addr:
                raise
            log.info("broker %s moved from %s to %s (%s); retrying", broker_name, addr, moved, exc)
        return await call(moved)

    # -- broker RPCs --------------------------------------------------------------------------

    async def send_message(
        self,
        addr: str,
        header: SendMessageRequestHeader,
        body: bytes,
        *,
        timeout: float,
        oneway: bool = False,
        reply: bool = False,
    ) -> SendResponse | None:
        """SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) when ``header.batch``, or
        SEND_REPLY_MESSAGE_V2 (325) for a ``reply`` (docs/protocol.md §13).

        Returns ``None`` for a oneway send.

        Raises:
            BrokerError: the message was not stored (`send_response`).
            TransportError: the connection failed or timed out.
        """
        code = RequestCode.SEND_BATCH_MESSAGE if header.batch else RequestCode.SEND_MESSAGE_V2
        if reply:
            code = RequestCode.SEND_REPLY_MESSAGE_V2
        cmd = RemotingCommand.request(code, header.to_ext(v2=True), body)
        if oneway:
            await self.invoke_oneway(addr, cmd)
            return None
        return send_response(await self.invoke(addr, cmd, timeout=timeout))

    async def pull_message(
        self, addr: str, header: PullMessageRequestHeader, *, timeout: float
    ) -> PullResponse:
        """PULL_MESSAGE (11); codes 0, 19, 20 and 21 are results, others raise.

        Raises:
            BrokerError: any other code.
            TransportError: the connection failed or timed out.
        """
        return pull_response(
            await self.invoke(
                addr,
                RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext()),
                timeout=timeout,
            )
        )

    async def pull_prepared(
        self,
        addr: str,
        prepared: PreparedPull,
        queue_offset: int,
        sys_flag: int,
        commit_offset: int,
        *,
        timeout: float,
    ) -> PullResponse:
        """`pull_message` for a `PreparedPull` with these three fields.

        Raises:
            BrokerError: a code other than 0, 19, 20 and 21.
            TransportError: the connection failed or timed out.
        """
        pool = self._require_pool()
        conn = pool.get_nowait(addr) or await pool.get(addr)
        template = prepared.binary_template if self._binary else prepared.template
        return pull_response(
            await conn.request_template(
                template, (queue_offset, sys_flag, commit_offset), timeout=timeout
            )
        )

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue) -> int | None:
        """QUERY_CONSUMER_OFFSET (14): the stored offset, or ``None`` when the broker has none.

        As in Java, *any* non-zero response code means "no offset stored" (§3.2).

        Raises:
            TransportError: the broker could not be asked (offset unknown, not absent).
        """
        header = QueryConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, broker_name=mq.broker_name
        )
        resp = await self.invoke(
            addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext())
        )
        if resp.code != ResponseCode.SUCCESS:
            return None
        return QueryConsumerOffsetResponseHeader.from_ext(resp.ext_fields).offset

    async def update_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, offset: int, *, oneway: bool = True
    ) -> None:
        """UPDATE_CONSUMER_OFFSET (15), oneway by default as the Java push consumer sends it.

        Raises:
            TransportError, BrokerError: when sent synchronously and it fails.
        """
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            commit_offset=offset,
            broker_name=mq.broker_name,
        )
        cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext())
        if oneway:
            await self.invoke_oneway(addr, cmd)
        else:
            _check(await self.invoke(addr, cmd))

    async def get_max_offset(self, addr: str, mq: MessageQueue) -> int:
        """GET_MAX_OFFSET (30): one past the last message of the queue.

        Raises:
            BrokerError, TransportError.
        """
        header = GetMaxOffsetRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, broker_name=mq.broker_name
        )
        resp = _check(
            await self.invoke(
                addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.to_ext())
            )
        )
        return GetMaxOffsetResponseHeader.from_ext(resp.ext_fields).offset

    async def get_min_offset(self, addr: str, mq: MessageQueue) -> int:
        """GET_MIN_OFFSET (31): the smallest offset the queue still stores.

        Raises:
            BrokerError, TransportError.
        """
        header = GetMinOffsetRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, broker_name=mq.broker_name
        )
        resp = _check(
            await self.invoke(
                addr, RemotingCommand.request(RequestCode.GET_MIN_OFFSET, header.to_ext())
            )
        )
        return GetMinOffsetResponseHeader.from_ext(resp.ext_fields).offset

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (29).

        Raises:
            BrokerError, TransportError.
        """
        header = SearchOffsetRequestHeader(
            topic=mq.topic,
            queue_id=mq.queue_id,
            timestamp=timestamp_ms,
            broker_name=mq.broker_name,
        )
        resp = _check(
            await self.invoke(
                addr,
                RemotingCommand.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header.to_ext()),
            )
        )
        return SearchOffsetResponseHeader.from_ext(resp.ext_fields).offset

    async def heartbeat(self, addr: str, data: HeartbeatData) -> int:
        """HEART_BEAT (34); returns the broker's version from the response.

        Raises:
            BrokerError, TransportError.
        """
        resp = _check(
            await self.invoke(
                addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=data.to_json())
            )
        )
        return resp.version

    async def check_client_config(
        self, addr: str, group: str, subscription: SubscriptionData
    ) -> None:
        """CHECK_CLIENT_CONFIG (46): ask the broker whether it serves ``subscription`` (Java's
        ``MQClientAPIImpl.checkClientInBroker``, sent before a non-TAG subscriber starts).

        Raises:
            BrokerError: refused, e.g. BrokerSystemError (1) without ``enablePropertyFilter``
                or SubscriptionParseFailedError (23) for an expression it cannot compile.
            TransportError.
        """
        body = CheckClientRequestBody(self.client_id, group, subscription)
        _check(
            await self.invoke(
                addr,
                RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=body.to_json()),
            )
        )

    async def unregister_client(
        self, addr: str, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """UNREGISTER_CLIENT (35) for one group.

        Raises:
            BrokerError, TransportError.
        """
        header = UnregisterClientRequestHeader(
            client_id=self.client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        _check(
            await self.invoke(
                addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, header.to_ext())
            )
        )

    async def get_consumer_list(self, addr: str, group: str) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP (38): the client ids registered for ``group``.

        Raises:
            BrokerError: code 1 when the broker knows no consumer of the group.
            TransportError.
        """
        header = GetConsumerListByGroupRequestHeader(consumer_group=group)
        resp = _check(
            await self.invoke(
                addr,
                RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, header.to_ext()),
            )
        )
        return list(ConsumerListBody.from_json(resp.body).consumer_id_list)

    async def lock_batch(
        self, addr: str, group: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """LOCK_BATCH_MQ (41): the subset of ``mqs`` now locked by this client.

        Raises:
            BrokerError, TransportError.
        """
        body = LockBatchRequestBody(
            consumer_group=group, client_id=self.client_id, mq_set=tuple(mqs)
        )
        resp = _check(
            await self.invoke(
                addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body.to_json())
            )
        )
        return set(LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set)

    async def unlock_batch(
        self, addr: str, group: str, mqs: Iterable[MessageQueue], *, oneway: bool = False
    ) -> None:
        """UNLOCK_BATCH_MQ (42).

        Raises:
            BrokerError, TransportError.
        """
        body = UnlockBatchRequestBody(
            consumer_group=group, client_id=self.client_id, mq_set=tuple(mqs)
        )
        cmd = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body.to_json())
        if oneway:
            await self.invoke_oneway(addr, cmd)
        else:
            _check(await self.invoke(addr, cmd))

    async def end_transaction(
        self, addr: str, header: EndTransactionRequestHeader, *, remark: str | None = None
    ) -> None:
        """END_TRANSACTION (37), oneway as Java's ``endTransactionOneway``.

        Raises:
            TransportError: the connection could not be used.
        """
        cmd = RemotingCommand.request(
            RequestCode.END_TRANSACTION, header.to_ext(), oneway=True, remark=remark
        )
        await self.invoke_oneway(addr, cmd)

    async def send_back(
        self, addr: str, header: ConsumerSendMsgBackRequestHeader, *, timeout: float | None = None
    ) -> None:
        """CONSUMER_SEND_MSG_BACK (36).

        Raises:
            BrokerError, TransportError.
        """
        _check(
            await self.invoke(
                addr,
                RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext()),
                timeout=timeout,
            )
        )


def is_retriable(exc: BaseException) -> bool:
    """Whether a failed send may be tried again (broker retriable codes and transport errors)."""
    if isinstance(exc, BrokerError):
        return exc.retriable
    return isinstance(exc, TransportError) and not isinstance(exc, ClientClosedError)
