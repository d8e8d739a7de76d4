"""SQL92 message selectors: RocketMQ 4.9's ``org.apache.rocketmq.filter`` in Python.

A consumer subscribing with ``MessageSelector.bySql`` sends its expression as ``subString``
with expression type ``SQL92``; a broker with ``enablePropertyFilter`` compiles it once and
evaluates it against the user properties of every message it scans (``TAGS`` is one of
them). This module is both halves: `compile_sql92` refuses what Java's
``SelectorParser`` refuses (with the position of the fault), and `Sql92Filter.matches`
gives the broker's verdict for one message.

The semantics are Java's, quirks included, because a consumer must get the same messages
from this broker as from a Java one (checked against the real filter module in
tests/interop/apache/test_java_sql92.py):

* the grammar is the ActiveMQ selector grammar minus LIKE, arithmetic, hex and octal:
  ``NOT`` binds tighter than comparisons (``NOT a = 1`` is ``(NOT a) = 1``); ``IN`` lists
  hold string literals only; ``>``, ``>=``, ``<``, ``<=`` and ``BETWEEN`` refuse string,
  boolean and NULL literals and boolean sub-expressions; ``= NULL`` is refused (use
  ``IS NULL``); a bare property is a boolean cast (always false for a string value);
* values are Java's: integer literals are ``Integer`` when they fit 32 bits, else ``Long``;
  decimal literals are ``Double`` and must be positive and finite (``0.0`` is refused, as
  ``ConstantExpression.createFloat`` does); ``-x`` of a non-number is NULL;
* property values are strings; compared with a number the string is parsed as that number's
  Java type (``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``), compared with a
  boolean as ``Boolean.valueOf``; two strings under ``>``/``<`` are both parsed as doubles.
  A string that does not parse makes the evaluation *fail*, and a failed evaluation refuses
  the message whatever the rest of the expression says (the broker logs and skips it);
* a missing property is NULL: comparisons with NULL are unknown (NULL), ``AND``/``OR``/
  ``NOT`` use three-valued logic, and only TRUE delivers. ``'x' = a`` with ``a`` missing is
  FALSE, not NULL (so ``'x' <> a`` is TRUE), as in ``ComparisonExpression.doCreateEqual``.

Compiled expressions are closures; evaluating one costs a few Python calls per node.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from aiorocket.errors import InvalidSelectorError

__all__ = [
    "EXPRESSION_TYPE_SQL92",
    "EXPRESSION_TYPE_TAG",
    "Sql92EvaluationError",
    "Sql92Filter",
    "compile_sql92",
]

#: ``ExpressionType.SQL92``
EXPRESSION_TYPE_SQL92: Final = "SQL92"
#: ``ExpressionType.TAG``
EXPRESSION_TYPE_TAG: Final = "TAG"

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_DOUBLE_MIN_VALUE: Final = 5e-324  # Java's Double.MIN_VALUE: the smallest positive double


class _Long(int):
    """A Java ``Long`` (a plain ``int`` stands for a Java ``Integer``)."""

    __slots__ = ()


#: a Java value: Integer (int), Long (_Long), Double (float), String, Boolean, or null
Value: TypeAlias = "int | float | str | bool | None"
Props: TypeAlias = Mapping[str, str]
_Ev: TypeAlias = Callable[[Props], Value]


class Sql92EvaluationError(Exception):
    """Evaluating an expression threw in Java (a number that does not parse, a boolean
    compared with a string): the broker refuses the message."""


_FAIL = Sql92EvaluationError()


# -- Java conversions ------------------------------------------------------------------------

_JAVA_INT = re.compile(r"[+-]?\d+")  # Character.digit accepts any Unicode decimal digit
_JAVA_DOUBLE = re.compile(
    r"([+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?))[fFdD]?"
    r"|([+-]?)0[xX]([0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP]([+-]?[0-9]+)[fFdD]?"
)
_WS_TRIM = "".join(map(chr, range(0x21)))  # String.trim(): every char <= U+0020


def _java_int(s: str, lo: int, hi: int) -> int:
    # Integer.valueOf / Long.valueOf; NumberFormatException becomes a failed evaluation.
    if _JAVA_INT.fullmatch(s) is None:
        raise _FAIL
    try:
        v = int(s)
    except ValueError:
        raise _FAIL from None
    if not lo <= v <= hi:
        raise _FAIL
    return v


def _java_double(s: str) -> float:
    # Double.valueOf: trimmed, optional f/d suffix, NaN, Infinity and hex floats accepted.
    m = _JAVA_DOUBLE.fullmatch(s.strip(_WS_TRIM))
    if m is None:
        raise _FAIL
    if m.group(1) is not None:
        return float(m.group(1))
    return float.fromhex(f"{m.group(2)}0x{m.group(3)}p{m.group(4)}")


def _java_bool(s: str) -> bool:
    # Boolean.valueOf: "true" ignoring case, anything else false.
    return len(s) == 4 and s.lower() == "true"


def _double_compare(a: float, b: float) -> int:
    # Double.compareTo: NaN above everything and equal to itself, -0.0 below 0.0.
    if a < b:
        return -1
    if a > b:
        return 1
    an, bn = a != a, b != b
    if an or bn:
        return int(an) - int(bn)
    if a == 0.0:
        sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
        return (sa > sb) - (sa < sb)
    return 0


def _compare(lv: object, rv: object) -> int:
    """``ComparisonExpression.__compare`` with string conversion on (as ``SelectorParser``
    always sets it): converts the operands up to a common type, or answers -1."""
    tl, tr = type(lv), type(rv)
    if tl is not tr:
        if tl is bool:
            if tr is str:
                raise _FAIL  # (String) cast of a Boolean: ClassCastException
            return -1
        if tl is int:
            if tr is float:
                lv = float(lv)  # type: ignore[arg-type]
            elif tr is str:
                rv = _java_int(rv, _INT_MIN, _INT_MAX)  # type: ignore[arg-type]
            elif tr is not _Long:
                return -1
        elif tl is _Long:
            if tr is float:
                lv = float(lv)  # type: ignore[arg-type]
            elif tr is str:
                rv = _java_int(rv, _LONG_MIN, _LONG_MAX)  # type: ignore[arg-type]
            elif tr is not int:
                return -1
        elif tl is float:
            if tr is int or tr is _Long:
                rv = float(rv)  # type: ignore[arg-type]
            elif tr is str:
                rv = _java_double(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif tl is str:
            if tr is bool:
                lv = _java_bool(lv)  # type: ignore[arg-type]
            elif tr is int:
                lv = _java_int(lv, _INT_MIN, _INT_MAX)  # type: ignore[arg-type]
            elif tr is _Long:
                lv = _java_int(lv, _LONG_MIN, _LONG_MAX)  # type: ignore[arg-type]
            elif tr is float:
                lv = _java_double(lv)  # type: ignore[arg-type]
            else:
                return -1
        else:
            return -1
    if type(lv) is float:
        return _double_compare(lv, rv)  # type: ignore[arg-type]
    return (lv > rv) - (lv < rv)  # type: ignore[operator,no-any-return]


def _negate(v: Value) -> Value:
    t = type(v)
    if t is int:
        n = -v  # type: ignore[operator]
        return n if n <= _INT_MAX else _INT_MIN  # -Integer.MIN_VALUE overflows to itself
    if t is _Long:
        n = -v  # type: ignore[operator]
        return _Long(n if n <= _LONG_MAX else _LONG_MIN)
    if t is float:
        return -v  # type: ignore[operator]
    return None


# -- tokens ----------------------------------------------------------------------------------

_KEYWORDS: Final = frozenset(("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"))

_TOKEN = re.compile(
    "|".join(
        (
            r"(?P<ws>[ \t\n\r\f]+)",
            r"(?P<lc>--[^\n\r]*(?:\r\n|\n|\r))",
            r"(?P<bc>/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)",
            r"(?P<FLOAT>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
            r"|[0-9]+[eE][+-]?[0-9]+)",
            r"(?P<DEC>0|[1-9][0-9]*[lL]?)",
            r"(?P<STR>'(?:''|[^'])*')",
            r"(?P<ID>[a-zA-Z_$][a-zA-Z0-9_$]*)",
            r"(?P<OP><>|<=|>=|[=<>(),+-])",
        )
    )
)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # FLOAT, DEC, STR, ID, a keyword, an operator, or EOF
    text: str
    pos: int


class _Lexer:
    """Tokens on demand: JavaCC lexes only as far as the parser looks, so text after the
    point where the expression ends is never examined (and may even be malformed)."""

    __slots__ = ("expr", "pos", "toks")

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.pos = 0
        self.toks: list[_Tok] = []

    def token(self, index: int) -> _Tok:
        toks = self.toks
        expr = self.expr
        n = len(expr)
        while len(toks) <= index:
            pos = self.pos
            if pos >= n:
                toks.append(_Tok("EOF", "", n))
                continue
            m = _TOKEN.match(expr, pos)
            if m is None:
                raise InvalidSelectorError(f"lexical error at {expr[pos]!r}", expr, pos)
            self.pos = m.end()
            kind = m.lastgroup or ""
            if kind in ("ws", "lc", "bc"):
                continue
            text = m.group()
            if kind == "ID" and text.upper() in _KEYWORDS:
                kind = text.upper()
            elif kind == "OP":
                kind = text
            toks.append(_Tok(kind, text, pos))
        return toks[index]


# -- parse tree ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Node:
    """A compiled sub-expression and what Java's construction-time checks look at."""

    ev: _Ev
    pos: int
    is_const: bool = False  # a ConstantExpression (a literal, maybe parenthesised)
    value: Value = None  # its value
    is_bool: bool = False  # a BooleanExpression
    prop: str | None = None  # a PropertyExpression's name


def _const(value: Value, pos: int, is_bool: bool = False) -> _Node:
    return _Node(lambda _p: value, pos, is_const=True, value=value, is_bool=is_bool)


def _bool_node(ev: _Ev, pos: int) -> _Node:
    return _Node(ev, pos, is_bool=True)


def _equal(left: _Node, right: _Node, pos: int) -> _Node:
    lf, rf = left.ev, right.ev

    def ev(p: Props) -> Value:
        lv, rv = lf(p), rf(p)  # both sides first, as doCreateEqual does
        if lv is None:
            return True if rv is None else None
        if rv is None:
            return False
        return _compare(lv, rv) == 0

    return _bool_node(ev, pos)


def _not(node: _Node, pos: int) -> _Node:
    f = node.ev

    def ev(p: Props) -> Value:
        v = f(p)
        return None if v is None else not v

    return _bool_node(ev, pos)


def _relational(left: _Node, right: _Node, test: Callable[[int], bool], pos: int) -> _Node:
    lf, rf = left.ev, right.ev

    def ev(p: Props) -> Value:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            # "It's illegal to compare string by '>='...": first try both as doubles.
            return test(_double_compare(_java_double(lv), _java_double(rv)))
        return test(_compare(lv, rv))

    return _bool_node(ev, pos)


def _and(left: _Node, right: _Node, pos: int) -> _Node:
    lf, rf = left.ev, right.ev

    def ev(p: Props) -> Value:
        lv = lf(p)
        if lv is False:
            return False
        rv = rf(p)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    return _bool_node(ev, pos)


def _or(left: _Node, right: _Node, pos: int) -> _Node:
    lf, rf = left.ev, right.ev

    def ev(p: Props) -> Value:
        lv = lf(p)
        if lv is True:
            return True
        rv = rf(p)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    return _bool_node(ev, pos)


def _gt(c: int) -> bool:
    return c > 0


def _ge(c: int) -> bool:
    return c >= 0


def _lt(c: int) -> bool:
    return c < 0


def _le(c: int) -> bool:
    return c <= 0


_RELATIONS: Final = {">": _gt, ">=": _ge, "<": _lt, "<=": _le}


class _Parser:
    """Recursive descent over ``SelectorParser.jj`` (RocketMQ 4.9, without CONTAINS)."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.lexer = _Lexer(expr)
        self.i = 0

    def peek(self, ahead: int = 0) -> _Tok:
        return self.lexer.token(self.i + ahead)

    def take(self, kind: str) -> _Tok:
        tok = self.peek()
        if tok.kind != kind:
            self.fail(tok, f"expected {kind}")
        self.i += 1
        return tok

    def fail(self, tok: _Tok, what: str) -> None:
        found = "end of expression" if tok.kind == "EOF" else repr(tok.text)
        raise InvalidSelectorError(f"{what}, found {found}", self.expr, tok.pos)

    def error(self, node: _Node | int, what: str) -> InvalidSelectorError:
        pos = node if isinstance(node, int) else node.pos
        return InvalidSelectorError(what, self.expr, pos)

    def as_boolean(self, node: _Node) -> _Node:
        # asBooleanExpression: a property becomes a boolean cast, other non-booleans fail.
        if node.is_bool:
            return node
        if node.prop is not None:
            f = node.ev

            def ev(p: Props) -> Value:
                v = f(p)
                return None if v is None else v is True

            return _bool_node(ev, node.pos)
        raise self.error(node, "expression will not result in a boolean value")

    def parse(self) -> tuple[_Node, int]:
        """The expression and where the text it ignores starts (its length when none)."""
        # JmsSelector has no <EOF>: the expression ends where no rule can go on, and what
        # follows is ignored, as by Java ("a = 1 )" is "a = 1"). The parser has already
        # looked at the next token (JavaCC's lookahead), so finding it lexes nothing new.
        node = self.as_boolean(self.or_expr())
        return node, self.peek().pos

    def or_expr(self) -> _Node:
        left = self.and_expr()
        while self.peek().kind == "OR":
            pos = self.take("OR").pos
            right = self.and_expr()
            left = _or(self.as_boolean(left), self.as_boolean(right), pos)
        return left

    def and_expr(self) -> _Node:
        left = self.equality()
        while self.peek().kind == "AND":
            pos = self.take("AND").pos
            right = self.equality()
            left = _and(self.as_boolean(left), self.as_boolean(right), pos)
        return left

    def check_equal_operand(self, node: _Node) -> None:
        if node.is_const and node.value is None:
            raise self.error(node, "NULL cannot be compared with '=' or '<>' (use IS NULL)")

    def equality(self) -> _Node:
        left = self.comparison()
        while True:
            tok = self.peek()
            if tok.kind in ("=", "<>"):
                self.i += 1
                right = self.comparison()
                self.check_equal_operand(left)
                self.check_equal_operand(right)
                if left.is_const and right.is_const and left.is_bool and not right.is_bool:
                    raise self.error(tok.pos, "a boolean literal cannot be compared with this")
                left = _equal(left, right, left.pos)
                if tok.kind == "<>":
                    left = _not(left, tok.pos)
            elif tok.kind == "IS" and self.peek(1).kind == "NULL":
                self.i += 2
                left = self.is_null(left, tok.pos)
            elif tok.kind == "IS":
                self.i += 1
                self.take("NOT")
                self.take("NULL")
                left = _not(self.is_null(left, tok.pos), tok.pos)
            else:
                return left

    @staticmethod
    def is_null(node: _Node, pos: int) -> _Node:
        f = node.ev
        return _bool_node(lambda p: f(p) is None, pos)

    def check_less_than_operand(self, node: _Node) -> None:
        # Only numbers (and what may evaluate to one) can be ordered.
        if node.is_const:
            if type(node.value) in (int, _Long, float):
                return
            raise self.error(node, "only numbers can be compared by '>', '>=', '<', '<='")
        if node.is_bool:
            raise self.error(node, "a boolean expression cannot be compared")

    def relational(self, left: _Node, right: _Node, op: str, pos: int) -> _Node:
        self.check_less_than_operand(left)
        self.check_less_than_operand(right)
        return _relational(left, right, _RELATIONS[op], pos)

    def comparison(self) -> _Node:
        left = self.unary()
        while True:
            tok = self.peek()
            kind = tok.kind
            negated = kind == "NOT"
            if negated:
                # NOT here must start NOT BETWEEN or NOT IN: JavaCC enters the loop on NOT.
                self.i += 1
                kind = self.peek().kind
                if kind not in ("BETWEEN", "IN"):
                    self.fail(self.peek(), "expected BETWEEN or IN after NOT")
            if kind in _RELATIONS:
                self.i += 1
                left = self.relational(left, self.unary(), kind, tok.pos)
            elif kind == "BETWEEN":
                self.i += 1
                low = self.unary()
                self.take("AND")
                high = self.unary()
                if negated:
                    left = _or(
                        self.relational(left, low, "<", tok.pos),
                        self.relational(left, high, ">", tok.pos),
                        tok.pos,
                    )
                else:
                    self.check_between(low, high)
                    left = _and(
                        self.relational(left, low, ">=", tok.pos),
                        self.relational(left, high, "<=", tok.pos),
                        tok.pos,
                    )
            elif kind == "IN":
                self.i += 1
                self.take("(")
                items = [self.string()]
                while self.peek().kind == ",":
                    self.i += 1
                    items.append(self.string())
                self.take(")")
                if left.prop is None:
                    raise self.error(left, "IN needs a property on its left")
                left = self.in_list(left, frozenset(items), negated, tok.pos)
            else:
                return left

    def check_between(self, low: _Node, high: _Node) -> None:
        # createBetween: literal bounds must be non-null and in order.
        if not (low.is_const and high.is_const):
            return
        if low.value is None or high.value is None:
            raise self.error(low, "BETWEEN bounds cannot be NULL")
        try:
            ordered = _compare(high.value, low.value) >= 0
        except Sql92EvaluationError:
            ordered = False
        if not ordered:
            raise self.error(low, "the lower BETWEEN bound must not exceed the upper one")

    @staticmethod
    def in_list(node: _Node, items: frozenset[str], negated: bool, pos: int) -> _Node:
        f = node.ev

        def ev(p: Props) -> Value:
            v = f(p)
            if type(v) is not str:
                return None
            return (v in items) is not negated

        return _bool_node(ev, pos)

    def string(self) -> str:
        return self.take("STR").text[1:-1].replace("''", "'")

    def unary(self) -> _Node:
        tok = self.peek()
        if tok.kind == "+":
            self.i += 1
            return self.unary()
        if tok.kind == "-":
            self.i += 1
            f = self.unary().ev
            return _Node(lambda p: _negate(f(p)), tok.pos)
        if tok.kind == "NOT":
            self.i += 1
            return _not(self.as_boolean(self.unary()), tok.pos)
        return self.primary()

    def primary(self) -> _Node:
        tok = self.peek()
        kind = tok.kind
        if kind == "(":
            self.i += 1
            node = self.or_expr()
            self.take(")")
            return node
        self.i += 1
        if kind == "ID":
            name = tok.text
            return _Node(lambda p: p.get(name), tok.pos, prop=name)
        if kind == "STR":
            return _const(tok.text[1:-1].replace("''", "'"), tok.pos)
        if kind == "DEC":
            text = tok.text.rstrip("lL")
            v = int(text)
            if v > _LONG_MAX:
                raise self.error(tok.pos, "integer literal out of the range of a long")
            return _const(v if v <= _INT_MAX else _Long(v), tok.pos)
        if kind == "FLOAT":
            d = float(tok.text)
            if d == math.inf or d < _DOUBLE_MIN_VALUE:
                # ConstantExpression.createFloat: between Double.MIN_VALUE and MAX_VALUE
                raise self.error(tok.pos, "decimal literal out of range (0 excluded)")
            return _const(d, tok.pos)
        if kind in ("TRUE", "FALSE", "NULL"):
            return _const({"TRUE": True, "FALSE": False}.get(kind), tok.pos, is_bool=True)
        self.i -= 1
        self.fail(tok, "expected a literal, a property or '('")
        raise AssertionError  # unreachable: fail raises


# -- public ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Sql92Filter:
    """A compiled SQL92 selector; build with `compile_sql92`."""

    #: the expression as given (what travels as ``subString``)
    expression: str
    _ev: _Ev
    #: where the text the parser ignores starts (``len(expression)`` when there is none)
    end: int = -1

    @property
    def ignored(self) -> str:
        """The text after the expression that the parser ignores, as Java's does (``""``
        when the whole text is the expression)."""
        if self.end < 0:
            return ""
        return self.expression[self.end :].strip()

    def evaluate(self, properties: Props) -> bool | None:
        """The expression's value for a message with these properties: True, False or
        None (unknown).

        Raises:
            Sql92EvaluationError: Java's evaluation throws for these properties.
        """
        v = self._ev(properties)
        return v if v is None else v is True

    def matches(self, properties: Props) -> bool:
        """Whether a broker delivers a message with these properties: only when the
        expression is TRUE (unknown and failed evaluations refuse it). Never raises."""
        try:
            return self._ev(properties) is True
        except Sql92EvaluationError:
            return False


@functools.lru_cache(maxsize=256)
def compile_sql92(expression: str) -> Sql92Filter:
    """Compile an SQL92 selector such as ``"region = 'eu' AND amount > 100"``.

    Compiled filters are cached by expression (Java's ``SelectorParser`` caches too).

    Raises:
        InvalidSelectorError: RocketMQ's parser would refuse the expression; the error gives
            the position of the fault.
    """
    node, end = _Parser(expression).parse()
    return Sql92Filter(expression, node.ev, end)
