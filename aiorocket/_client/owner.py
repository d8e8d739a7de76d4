"""The lifecycle shared by request-only clients (``QueueReader``, ``Admin``): one
:class:`~aiorocket._client.instance.ClientInstance`, created on start and closed on close,
with no broker requests to serve and no periodic work of their own."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, ClassVar, Self

from aiorocket._client.instance import ClientInstance
from aiorocket.errors import ClientClosedError
from aiorocket.settings import ClientSettings

__all__ = ["ClientOwner"]


class ClientOwner:
    """Start/close, ``async with`` and :meth:`_require` for a class holding one client."""

    #: what the user calls the object, in error messages ("the queue reader is closed")
    _what: ClassVar[str] = "client"

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._client: ClientInstance | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def start(self) -> None:
        """Create the client (connections open on first use). Prefer ``async with``.

        Raises:
            ClientClosedError: it was closed before.
        """
        if self._closed:
            raise ClientClosedError(f"the {self._what} is closed")
        if self._client is None:
            self._client = ClientInstance(self.settings)
            self._client.start(self._spawn)

    async def close(self) -> None:
        """Close every connection; later calls raise :class:`ClientClosedError`."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        for task in list(self._tasks):
            task.cancel()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _spawn(self, coro: Coroutine[Any, Any, None], /) -> object:
        # No broker requests are served; the connection pool asks for a spawner all the same.
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _require(self) -> ClientInstance:
        if self._client is None:
            raise ClientClosedError(
                f"the {self._what} is closed" if self._closed else "not started"
            )
        return self._client
