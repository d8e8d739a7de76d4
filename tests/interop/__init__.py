"""Interop tests against the Apache RocketMQ C++ client, which always runs in a subprocess."""
