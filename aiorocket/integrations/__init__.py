"""Integrations with other frameworks (FastAPI, Spark); each is an optional extra."""

__all__: list[str] = []
