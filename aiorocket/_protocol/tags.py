"""Tag hashing and tag subscription expressions (docs/protocol.md §0.2, §6.3, §11.1).

The broker filters a consume queue by the Java hash of each message's tag; the client then
re-checks the tag string itself, because different tags can share a hash.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "MATCH_ALL",
    "TagFilter",
    "java_hash",
    "parse_tag_expression",
    "tags_code",
]

#: ``SubscriptionData.SUB_ALL``: the expression that matches every message.
MATCH_ALL = "*"

_MASK32 = 0xFFFFFFFF


def java_hash(s: str) -> int:
    """Return Java's ``String.hashCode()`` of ``s`` as a signed 32-bit int.

    The hash runs over UTF-16 code units, so a character outside the BMP counts as its two
    surrogates (Go's client hashes UTF-8 bytes instead and disagrees on non-ASCII tags,
    §11.1). Never raises.
    """
    if s.isascii():
        units: Iterable[int] = s.encode("ascii")
    else:
        # "surrogatepass" keeps a lone surrogate as the single code unit Java would see.
        raw = s.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    h = 0
    for unit in units:
        h = (31 * h + unit) & _MASK32
    return h - 0x100000000 if h & 0x80000000 else h


def tags_code(tag: str | None) -> int:
    """Return the consume-queue tag code of a message: the Java hash of its tag, 0 if none.

    Mirrors ``MessageExtBrokerInner.tagsString2tagsCode`` for the TAG filter type: an absent
    or empty tag gives 0. Never raises.
    """
    if not tag:
        return 0
    return java_hash(tag)


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed tag subscription (``SubscriptionData`` of expression type TAG).

    ``expression`` is what travels as ``subString``: ``"*"`` for match-all, otherwise the
    expression as given. ``tags`` and ``codes`` are empty for match-all. An expression made of
    separators only (``"||"``) is not match-all and matches nothing, as on a Java broker.
    """

    expression: str
    tags: frozenset[str]
    codes: frozenset[int]

    @property
    def match_all(self) -> bool:
        """Whether every message matches, tagged or not."""
        return self.expression == MATCH_ALL

    def matches_tag(self, tag: str | None) -> bool:
        """The client-side re-check of a pulled message's tag (``PullAPIWrapper``).

        Match-all accepts everything; otherwise the tag must be one of `tags`, so an
        untagged message never matches a tag subscription. Never raises.
        """
        if self.expression == MATCH_ALL:
            return True
        return tag is not None and tag in self.tags

    def matches_code(self, code: int) -> bool:
        """The broker-side consume-queue check (``DefaultMessageFilter``) on a tag code.

        Never raises.
        """
        return self.expression == MATCH_ALL or code in self.codes


_MATCH_ALL_FILTER = TagFilter(MATCH_ALL, frozenset(), frozenset())


def parse_tag_expression(expr: str | None) -> TagFilter:
    """Parse a tag expression such as ``"TagA || TagB"`` the way ``FilterAPI`` does.

    ``None``, ``""`` and ``"*"`` (surrounding blanks ignored) mean match-all. Otherwise the
    expression is split on ``"||"``, each part stripped and empty parts dropped; codes are
    the Java hashes of the tags. Never raises.
    """
    if expr is None:
        return _MATCH_ALL_FILTER
    stripped = expr.strip()
    if not stripped or stripped == MATCH_ALL:
        return _MATCH_ALL_FILTER
    tags = frozenset(t for t in (part.strip() for part in expr.split("||")) if t)
    return TagFilter(expr, tags, frozenset(java_hash(t) for t in tags))
