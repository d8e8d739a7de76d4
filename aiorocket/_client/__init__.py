"""The client layer: routes, broker addresses, heartbeats and typed RPCs (Java MQClientInstance)."""
