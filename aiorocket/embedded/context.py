"""What the request processors of the embedded broker work with, and how they are installed.

Every processor is built from one `BrokerContext` (the broker's tables, store and
settings) and marks each handler with the request codes it answers (`handles`); the
broker installs them all with `install`. Also here: the small answers several processors give.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiorocket._protocol.codes import ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting import Dispatcher, RequestHandler
from aiorocket.embedded.clock import Clock
from aiorocket.embedded.config import BrokerConfig
from aiorocket.embedded.groups import ClientGroups
from aiorocket.embedded.locks import QueueLocks
from aiorocket.embedded.long_polling import PullWaiters
from aiorocket.embedded.offsets import ConsumerOffsets
from aiorocket.embedded.stats import BrokerStats
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.subscriptions import KVConfig, SubscriptionGroups
from aiorocket.embedded.timers import TimerService
from aiorocket.embedded.topics import TopicTable
from aiorocket.embedded.writer import MessageWriter

__all__ = [
    "BrokerContext",
    "Processor",
    "Route",
    "handles",
    "illegal_name",
    "install",
    "peer_address",
]

#: a request code and the handler that answers it
Route = tuple[int, RequestHandler]

_H = TypeVar("_H", bound=Callable[..., Any])
_CODES = "_request_codes"


def handles(*codes: int) -> Callable[[_H], _H]:
    """Mark a method of a `Processor` as the handler of the request ``codes``."""

    def mark(handler: _H) -> _H:
        setattr(handler, _CODES, codes)
        return handler

    return mark


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerContext:
    """The collaborators of one running broker, shared by its request processors.

    Attributes:
        config: the broker's settings.
        data_dir: the data directory.
        store: the message store.
        writer: the write path into the store (plain, delayed, half messages).
        topics: the topic table.
        groups: client registrations (channels, subscriptions).
        offsets: committed consumer offsets.
        locks: the orderly-consumption lock table.
        waiters: held pulls, woken by the write path.
        subscriptions: configured subscription groups.
        kv: the name server's KV table.
        stats: message counters and rates.
        address: returns the advertised ``"ip:port"`` (known once the broker listens).
        store_address: returns the advertised ``(ip, port)``, the store host of records.
        spawn: runs a coroutine as a task the broker owns (named by the second argument).
        timers: the timer-message service (its runtime figures).
        clock: the broker's time (store times, due times, invisible times, checks).
    """

    config: BrokerConfig
    data_dir: Path
    store: MessageStore
    writer: MessageWriter
    topics: TopicTable
    groups: ClientGroups
    offsets: ConsumerOffsets
    locks: QueueLocks
    waiters: PullWaiters
    subscriptions: SubscriptionGroups
    kv: KVConfig
    stats: BrokerStats
    address: Callable[[], str]
    store_address: Callable[[], tuple[str, int]]
    spawn: Callable[[Coroutine[Any, Any, None], str], None]
    timers: TimerService
    clock: Clock


class Processor:
    """Base of the request processors: a set of handlers built from a `BrokerContext`,
    keeping the collaborators most of them use as attributes.

    Args:
        ctx: the broker's collaborators.
    """

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx
        self._config = ctx.config
        self._store = ctx.store
        self._topics = ctx.topics
        self._groups = ctx.groups
        self._offsets = ctx.offsets
        self._clock = ctx.clock

    @classmethod
    def codes(cls) -> frozenset[int]:
        """The request codes this processor answers."""
        return frozenset(code for _name, code in cls._marked())

    @classmethod
    def _marked(cls) -> Iterator[tuple[str, int]]:
        for name in dir(cls):
            for code in getattr(getattr(cls, name, None), _CODES, ()):
                yield name, code

    def routes(self) -> Iterator[Route]:
        """Each request code this processor answers, with its handler (the methods marked
        with `handles`)."""
        for name, code in self._marked():
            yield code, getattr(self, name)


def install(dispatcher: Dispatcher, processors: Iterable[Processor]) -> None:
    """Register every route of every processor with ``dispatcher``."""
    for processor in processors:
        for code, handler in processor.routes():
            dispatcher.register(code, handler)


def illegal_name(cmd: RemotingCommand, what: str, name: str) -> RemotingCommand:
    """The SYSTEM_ERROR answer to a topic or group name that breaks the name rule."""
    return cmd.make_response(
        ResponseCode.SYSTEM_ERROR,
        remark=f"the {what}[{name}] is illegal, allowing only ^[%|a-zA-Z0-9_-]{{1,127}}$",
    )


def peer_address(channel: Hashable) -> str:
    """``"ip:port"`` of a client channel's peer (``""`` if unknown), as admin bodies and logs
    show it. Never raises."""
    peer = getattr(channel, "peer", None)
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return ""
