"""Per-island settings written as arithmetic on the island index ``i``.

A TOML config may give a hyper-parameter as a string such as ``"0.3 + 0.1*i"`` or
``"2**i"``. The string is parsed with :mod:`ast` and only numbers, the name ``i``,
``+ - * / // % **``, unary signs, parentheses and the calls ``min``, ``max`` and
``abs`` are accepted; nothing is passed to ``eval``, so a config cannot run code.
"""

from __future__ import annotations

import ast
import operator
import re

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_CALLS = {"min": min, "max": max, "abs": abs}
_MAX_EXPONENT = 64   # keeps "9**9**9" from eating the machine
#: integer results beyond this many bits are refused before they are computed: an
#: exponent cap alone lets "((9**64)**64)**64" grow a number of millions of digits
_MAX_INT_BITS = 1024
_MAX_LENGTH = 200
_MENTIONS_I = re.compile(r"(?<![A-Za-z0-9_.])i(?![A-Za-z0-9_])")


class IslandExpression:
    """A parsed expression of ``i``; call it with an island index.

    Args:
        text: the expression, e.g. ``"0.3 + 0.1*i"``.

    Raises:
        ValueError: syntax error or a construct outside the allowed arithmetic.
    """

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise ValueError(f"expected an expression string, got {type(text).__name__}")
        if len(text) > _MAX_LENGTH:
            raise ValueError(f"expected an expression of at most {_MAX_LENGTH} characters, "
                             f"got {len(text)}")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as err:
            raise ValueError(f"expected an arithmetic expression of i, got {text!r} ({err.msg})") from None
        _check(tree.body, text)
        self.text = text
        self._tree = tree.body

    def __call__(self, i: int):
        return _evaluate(self._tree, int(i), self.text)

    def __repr__(self) -> str:
        return f"IslandExpression({self.text!r})"

    # equal texts are the same setting (EngineConfig equality, round trips through dicts)
    def __eq__(self, other) -> bool:
        return isinstance(other, IslandExpression) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def is_island_expression(value) -> bool:
    """True for a string meant as an expression of ``i``: one that mentions ``i`` as a
    word ("0.3 + 0.1*i", also a mistyped "0.3 + i*", which then fails to parse with a
    clear message); names such as "tournament" are not."""
    return isinstance(value, str) and _MENTIONS_I.search(value) is not None


def _reject(node: ast.AST, text: str) -> None:
    snippet = ast.get_source_segment(text.strip(), node) or type(node).__name__
    raise ValueError(f"expected only numbers, i, + - * / // % ** and min/max/abs in {text!r}, "
                     f"got {snippet!r}")


def _check(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            _reject(node, text)
    elif isinstance(node, ast.Name):
        if node.id != "i":
            _reject(node, text)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            _reject(node, text)
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            _reject(node, text)
        _check(node.operand, text)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _CALLS or node.keywords or not node.args:
            _reject(node, text)
        for arg in node.args:
            _check(arg, text)
    else:
        _reject(node, text)


def _evaluate(node: ast.AST, i: int, text: str):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return i
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_evaluate(node.operand, i, text))
    if isinstance(node, ast.Call):
        return _CALLS[node.func.id](*(_evaluate(a, i, text) for a in node.args))
    left, right = _evaluate(node.left, i, text), _evaluate(node.right, i, text)
    if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
        raise ValueError(f"expected exponents of at most {_MAX_EXPONENT} in {text!r}, got {right}")
    if _result_bits(node.op, left, right) > _MAX_INT_BITS:
        raise ValueError(f"expected integers of at most {_MAX_INT_BITS} bits in {text!r}, got a larger "
                         f"intermediate result for i={i}")
    try:
        return _BINARY[type(node.op)](left, right)
    except (ZeroDivisionError, OverflowError) as err:
        raise ValueError(f"expected {text!r} to be computable for i={i}, got {err}") from None


def _result_bits(op: ast.operator, left, right) -> int:
    """An upper bound on the bit length of an integer ``left op right`` (0 for floats,
    which overflow on their own), known before the result is computed."""
    if not (isinstance(left, int) and isinstance(right, int)):
        return 0
    if isinstance(op, ast.Pow):
        return left.bit_length() * max(right, 0)
    if isinstance(op, ast.Mult):
        return left.bit_length() + right.bit_length()
    return max(left.bit_length(), right.bit_length()) + 1
