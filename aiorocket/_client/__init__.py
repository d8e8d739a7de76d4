"""The client layer: routes, broker addresses, heartbeats and typed RPCs (Java MQClientInstance)."""

__all__: list[str] = []
