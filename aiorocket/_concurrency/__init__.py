"""Small concurrency kit, for what anyio does not offer: a fixed-rate periodic runner with an
early wake and a jittered backoff. Every loop here runs inside a task group its caller owns;
shielded, bounded cleanup is ``anyio.move_on_after(timeout, shield=True)``."""

from aiorocket._concurrency.backoff import Backoff
from aiorocket._concurrency.periodic import Periodic

__all__ = ["Backoff", "Periodic"]
