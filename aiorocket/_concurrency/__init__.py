"""Small concurrency kit: fixed-rate periodic runners with an early wake, jittered backoff and
bounded, shielded cleanup. Every loop here runs inside a task group its caller owns."""

from aiorocket._concurrency.backoff import Backoff
from aiorocket._concurrency.cleanup import bounded_cleanup
from aiorocket._concurrency.periodic import Periodic

__all__ = ["Backoff", "Periodic", "bounded_cleanup"]
