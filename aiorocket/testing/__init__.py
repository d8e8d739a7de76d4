"""A chaos kit for testing applications built on aiorocket.

* [`ChaosProxy`][aiorocket.testing.ChaosProxy] — a TCP proxy to put between clients and a broker
  (embedded or Java) that stalls, resets, truncates, delays or throttles the traffic on demand.
* Fault hooks of [`EmbeddedBroker`][aiorocket.embedded.EmbeddedBroker]: ``notify_rebalance(group)``,
  ``redeliver(topic, queue, from_offset)``, ``drop_below(topic, queue, offset)`` and
  ``fail_next(request_code, response_code, times)``.
* A pytest plugin (installed with the package, entry point ``aiorocket``; disable it with
  ``-p no:aiorocket``) with the fixtures ``embedded_broker``, ``embedded_broker_config`` and
  ``chaos_proxy`` (it needs pytest-asyncio). When a test uses both ``chaos_proxy`` and
  ``embedded_broker``, the broker advertises the proxy, so all client traffic goes through it.

```python
async def test_redelivered_orders_are_billed_once(embedded_broker):
    ...
    await embedded_broker.redeliver("orders", queue=0, from_offset=0)
```
"""

from aiorocket.testing.proxy import ChaosProxy, Direction

__all__ = ["ChaosProxy", "Direction"]
