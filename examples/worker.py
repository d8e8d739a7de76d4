"""A standalone worker: ``aiorocket run examples.worker:app``.

It counts the orders it sees and logs each one; the name server comes from
``AIOROCKET_NAMESRV`` (default 127.0.0.1:9876), like every ``AIOROCKET_*`` setting.
"""

from __future__ import annotations

import logging
import os

from aiorocket import App, ReceivedMessage

__all__ = ["app"]

log = logging.getLogger("examples.worker")

app = App()

_LOG = os.environ.get("WORKER_LOG")


@app.subscriber(
    os.environ.get("WORKER_TOPIC", "orders"), group=os.environ.get("WORKER_GROUP", "worker")
)
async def handle(body: bytes, msg: ReceivedMessage) -> None:
    """Record the message id (to ``WORKER_LOG`` when set) and log it."""
    if _LOG:
        # A small append per message; blocking is fine for an example's audit file.
        with open(_LOG, "a") as f:  # noqa: ASYNC230
            f.write(f"{msg.msg_id} {body.decode(errors='replace')}\n")
    log.debug("handled %s", msg.msg_id)
