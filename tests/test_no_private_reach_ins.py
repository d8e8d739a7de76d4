"""No module of aiorocket reads another object's private attributes (docs/architecture.md:
collaborators get what they need passed in). ``x._foo`` is allowed only where ``x`` is
``self``, ``cls``, ``super()`` or a class of the same module; ``self._x._y`` is a reach-in.

`_ALLOWED` lists the exceptions that exist on purpose, per module and attribute, each
group with its reason; a new reach-in fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aiorocket

_ROOT = Path(aiorocket.__file__).parent

#: the message models keep their decoded record and POP receipt private from users (only
#: their accessors are public); the modules that build, copy and consume messages read them
_MESSAGE_INTERNALS = frozenset(
    {"_r", "_topic", "_broker_name", "_reconsume_times", "_with_reconsume_times"}
)
_POPPED_INTERNALS = frozenset({"_handle", "_owner", "_popped_topic", "_lite_topic"})
#: ``OrderlyContext._for_key``: the per-key context the consume service makes (no user does)
_ORDERLY_CONTEXT = frozenset({"_for_key", "_by_key"})

_ALLOWED: dict[str, frozenset[str]] = {
    "_client/pull.py": _MESSAGE_INTERNALS,
    "_consumer/consume_concurrently.py": _MESSAGE_INTERNALS
    # the consume queue's wake-up, inlined on the hot path (pop_nowait's own code)
    | {"_woken", "_wake_one"},
    "_consumer/consume_orderly.py": _MESSAGE_INTERNALS | _ORDERLY_CONTEXT,
    "_consumer/broker_requests.py": _ORDERLY_CONTEXT,
    "_consumer/key_order.py": _MESSAGE_INTERNALS,
    "_consumer/popping.py": _MESSAGE_INTERNALS | _POPPED_INTERNALS,
    "_consumer/pop_feed.py": _POPPED_INTERNALS,
    "_consumer/process_queue.py": _MESSAGE_INTERNALS,
    "integrations/spark/rows.py": _MESSAGE_INTERNALS,
    "models.py": _MESSAGE_INTERNALS | _ORDERLY_CONTEXT,
    # the previous publish info of the same topic hands its round-robin position on
    "_producer/publish.py": frozenset({"_next"}),
    # the schema decorator sets its codecs on the classes it builds
    "_protocol/schema.py": frozenset(
        {"_wire_fields", "_decoder", "_encoder", "_short_decoder", "_short_encoder"}
    ),
    # two in-memory transports of one class, wired to each other as peers
    "_remoting/transport.py": frozenset({"_peer", "_protocol", "_closing", "_lost"}),
    # the test proxy's links read the shaping settings of the proxy that owns them
    "testing/proxy.py": frozenset({"_bandwidth", "_links", "_flowing", "_delay"}),
    # the standard library's: namedtuple's public _make, os._exit, argparse's action type
    "embedded/store.py": frozenset({"_make"}),
    "cli/_run.py": frozenset({"_exit"}),
    "cli/__init__.py": frozenset({"_SubParsersAction"}),
}


def _reach_ins(source: str, module: str) -> list[str]:
    """The reach-ins of ``source``, read as the package's ``module`` (its path decides what
    `_ALLOWED` lets through)."""
    tree = ast.parse(source, module)
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    allowed = _ALLOWED.get(module, frozenset())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in classes):
            continue
        if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
            continue
        if name in allowed:
            continue
        found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_objects_private_attributes() -> None:
    found = [
        hit
        for path in sorted(_ROOT.rglob("*.py"))
        for hit in _reach_ins(path.read_text(encoding="utf-8"), path.relative_to(_ROOT).as_posix())
    ]
    assert found == []


def test_the_check_finds_chained_and_foreign_reach_ins_only() -> None:
    # (what the redesign removed: a collaborator reading its member's private fields)
    source = (
        "class T:\n"
        "    def f(self, other):\n"
        "        return self._m._offsets, other._x, self._ok, T._CONST, super()._g()\n"
    )
    found = _reach_ins(source, "_consumer/probe.py")
    assert [hit.split(": ", 1)[1] for hit in found] == ["self._m._offsets", "other._x"]
    # An allowance is per module: the message internals are not everyone's.
    assert _reach_ins("def f(m):\n    return m._r\n", "_consumer/probe.py") != []
    assert _reach_ins("def f(m):\n    return m._r\n", "_consumer/process_queue.py") == []
