"""Safe per-island expressions of i."""

import pytest

from mpievo.evo.expressions import IslandExpression, is_island_expression


@pytest.mark.parametrize("text, values", [
    ("0.3 + 0.1*i", [0.3, 0.4, 0.5]),
    ("2**i", [1, 2, 4]),
    ("-(i % 2) + 10 // 3", [3, 2, 3]),
    ("max(16, 64 - 8*i)", [64, 56, 48]),
    ("abs(1 - i) / 2", [0.5, 0.0, 0.5]),
])
def test_expressions_evaluate(text, values):
    expr = IslandExpression(text)
    assert [expr(i) for i in range(3)] == pytest.approx(values)


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "i.real", "open('x')", "[i]", "i if i else 1",
    "j + 1", "'a' * i", "lambda: i", "i < 2", "min(i, key=abs)", "True + i",
])
def test_expressions_refuse_code(text):
    with pytest.raises(ValueError, match="expected"):
        IslandExpression(text)


def test_expression_limits():
    with pytest.raises(ValueError, match="exponents of at most 64"):
        IslandExpression("9**9**9")(0)
    with pytest.raises(ValueError, match="computable for i=0"):
        IslandExpression("1 / i")(0)
    with pytest.raises(ValueError, match="syntax|arithmetic"):
        IslandExpression("0.3 +")


def test_is_island_expression():
    assert is_island_expression("0.1 * i")
    assert not is_island_expression("tournament")
    assert not is_island_expression("mypkg.mod:fn")
    assert not is_island_expression(0.5)


def test_mistyped_expression_is_still_an_expression():
    assert is_island_expression("0.1 + i*")
    assert not is_island_expression("mod.sub:fn")
    assert not is_island_expression("x.i")


def test_equal_texts_are_equal_settings():
    assert IslandExpression("0.1*i") == IslandExpression("0.1*i") != IslandExpression("0.2*i")
    assert len({IslandExpression("2**i"), IslandExpression("2**i")}) == 1
