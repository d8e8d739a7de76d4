"""Small concurrency kit, for what anyio does not offer: a fixed-rate periodic runner with an
early wake, a jittered backoff, and `Service`, the one lifecycle of everything that runs
background tasks (a supervisor task owning a task group). Shielded, bounded cleanup is
``anyio.move_on_after(timeout, shield=True)`` (`bounded`)."""

from aiorocket._concurrency.backoff import Backoff
from aiorocket._concurrency.periodic import Periodic
from aiorocket._concurrency.service import (
    AsyncResource,
    Service,
    ServiceOwner,
    bounded,
    describe_crash,
)

__all__ = [
    "AsyncResource",
    "Backoff",
    "Periodic",
    "Service",
    "ServiceOwner",
    "bounded",
    "describe_crash",
]
