"""Shared pieces of the test suite: polling, brokers, child processes, protocol records."""
