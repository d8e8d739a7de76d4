"""The sans-IO RocketMQ remoting codec: no asyncio, sockets or clocks in here."""

__all__: list[str] = []
