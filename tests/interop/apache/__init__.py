"""Interop tests against the real Apache RocketMQ 4.9.8 (broker, name server, Java client)."""
