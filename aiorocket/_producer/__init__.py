"""The producer."""

__all__: list[str] = []
