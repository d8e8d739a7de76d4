"""The error an integration raises when the optional extra it needs is not installed."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(module: str, needs: str, extra: str) -> ImportError:
    """The ImportError of ``module`` telling which packages it ``needs`` and the extra of
    aiorocket that installs them (raise it ``from`` the original ImportError)."""
    return ImportError(f'{module} needs {needs}: pip install "aiorocketmq[{extra}]"')
