"""The public surface: ``aiorocket.__all__`` is exactly the public names, each documented."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import aiorocket


def test_all_lists_exactly_the_public_members() -> None:
    public = {
        name
        for name, value in vars(aiorocket).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(aiorocket.__all__) - {"__version__"} == public


def test_every_public_name_is_documented() -> None:
    for name in aiorocket.__all__:
        obj = getattr(aiorocket, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"aiorocket.{name} has no docstring"


def test_every_module_declares_all_and_documents_its_public_names() -> None:
    for info in pkgutil.walk_packages(aiorocket.__path__, "aiorocket."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:
            # Integrations of optional extras must say which extra to install.
            message = str(exc)
            if "pip install" in message:
                continue
            raise
        assert inspect.getdoc(module), f"{info.name} has no module docstring"
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{info.name} has no __all__"
        for name in exported:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == info.name:
                assert inspect.getdoc(obj), f"{info.name}.{name} has no docstring"
