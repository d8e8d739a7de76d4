"""A push consumer's listener with a signature the consume service cannot call is refused
when it is registered, naming the mistake and the signature to use (before, it was accepted
and every message failed and was retried)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.errors import ConfigurationError

NS = "127.0.0.1:9876"


def consumer(**kw: Any) -> rmq.PushConsumer:
    return rmq.PushConsumer(group="sigG", namesrv=NS, **kw)


async def one_message(msg: rmq.ReceivedMessage) -> None: ...


async def one_message_and_ctx(msg: rmq.ReceivedMessage, ctx: rmq.ConcurrentContext) -> None: ...


async def three(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext, x: int) -> None: ...


async def orderly_ctx(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None: ...


def not_async(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None: ...


@pytest.mark.parametrize(
    ("handler", "problem"),
    [
        (one_message, r"cannot be called with \(msgs, ctx\)"),
        (one_message_and_ctx, "a list of messages, not one"),
        (three, r"cannot be called with \(msgs, ctx\)"),
        (orderly_ctx, r"a concurrent \(orderly=False\) consumer"),
        (not_async, "must be an async def function"),
    ],
)
def test_wrong_listeners_are_refused_at_registration(handler: Any, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as info:
        consumer().listener(handler)
    assert "(msgs: list[ReceivedMessage], ctx: ConcurrentContext)" in str(info.value)


def test_an_orderly_consumer_refuses_the_concurrent_context() -> None:
    async def wrong(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None: ...

    with pytest.raises(ConfigurationError, match=r"an orderly consumer takes.*OrderlyContext"):
        consumer(orderly=True).listener(wrong)


def test_right_listeners_are_accepted() -> None:
    async def plain(msgs, ctx):  # type: ignore[no-untyped-def]
        return None

    async def extra_default(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext, x: int = 0
    ) -> None: ...

    class Callable:
        async def __call__(
            self, msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
        ) -> None: ...

    async def partial_base(
        tag: str, msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> None: ...

    for handler in (plain, extra_default, Callable(), functools.partial(partial_base, "t")):
        consumer().listener(handler)
    consumer(orderly=True).listener(orderly_ctx)
