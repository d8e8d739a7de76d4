"""The lifecycle shared by request-only clients (``QueueReader``, ``Admin``): one
`ClientInstance`, created on start and closed on close,
with no broker requests to serve and no periodic work of their own."""

from __future__ import annotations

import logging
from typing import ClassVar

from aiorocket._client.instance import ClientInstance
from aiorocket._concurrency import Service, ServiceOwner
from aiorocket.errors import ClientClosedError
from aiorocket.settings import ClientSettings

__all__ = ["ClientOwner"]

log = logging.getLogger("aiorocket.client")


class ClientOwner(ServiceOwner):
    """Start/close, ``async with`` and `_require` for a class holding one client."""

    #: what the user calls the object, in error messages ("the queue reader is closed")
    _what: ClassVar[str] = "client"

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._client: ClientInstance | None = None
        # No broker requests are served; whatever the connection pool spawns all the same
        # runs in the lifecycle's task group and is awaited on close.
        self._lifecycle = Service(
            self._what,
            startup=self._start_up,
            shutdown=self._close_client,
            abort=self._abort,
            logger=log,
        )

    async def start(self) -> None:
        """Create the client (connections open on first use). Prefer ``async with``.

        Raises:
            ClientClosedError: it was closed before.
        """
        if self._lifecycle.closing:
            raise ClientClosedError(f"the {self._what} is closed")
        if self._client is None:
            self._client = ClientInstance(self.settings)
            await self._lifecycle.start()

    async def close(self) -> None:
        """Close every connection; later calls raise
        [`ClientClosedError`][aiorocket.errors.ClientClosedError]."""
        await self._lifecycle.close()
        self._client = None

    async def _start_up(self) -> None:
        assert self._client is not None
        self._client.start(self._lifecycle.task_group.create_task)

    async def _close_client(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def _abort(self, started: bool) -> None:
        await self._close_client()

    def _require(self) -> ClientInstance:
        if self._client is None or self._lifecycle.closing:
            raise ClientClosedError(
                f"the {self._what} is closed" if self._lifecycle.closing else "not started"
            )
        return self._client
