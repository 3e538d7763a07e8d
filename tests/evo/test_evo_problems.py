"""Problems: built-in optima, shift/rotation, user functions and their errors."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from mpievo.evo import BUILTIN_PROBLEMS, EngineConfig, Island, Problem, builtin_problem, make_problem, stream
from mpievo.evo.builtin_functions import random_rotation


# Rotated schwefel has no known optimum (documented), so it is left out.
OPTIMUM_CASES = [(name, shift, rotate) for name in sorted(BUILTIN_PROBLEMS)
                 for shift, rotate in [(False, False), (True, False), (True, True), (False, True)]
                 if not (name == "schwefel" and rotate)]


@pytest.mark.parametrize("name, shift, rotate", OPTIMUM_CASES)
def test_optimum_value_at_the_optimum(name, shift, rotate):
    problem = builtin_problem(name, 7, shift=shift, rotate=rotate, seed=4)
    optimum = problem.func.optimum
    assert np.all(optimum >= problem.lower) and np.all(optimum <= problem.upper)
    values = problem(np.vstack([optimum, optimum + 0.5]))
    tol = 1e-3 if name == "schwefel" else 1e-9  # schwefel's constant is rounded
    assert values[0] == pytest.approx(0.0, abs=tol)
    assert values[1] > values[0]


def test_shift_moves_the_optimum_deterministically():
    a = builtin_problem("rastrigin", 5, shift=True, seed=1).func.optimum
    b = builtin_problem("rastrigin", 5, shift=True, seed=1).func.optimum
    c = builtin_problem("rastrigin", 5, shift=True, seed=2).func.optimum
    assert np.array_equal(a, b) and not np.array_equal(a, c) and np.any(a != 0)


def test_rotation_is_orthogonal_and_preserves_the_sphere():
    q = random_rotation(6, np.random.default_rng(0))
    assert np.allclose(q @ q.T, np.eye(6))
    x = np.random.default_rng(1).uniform(-5, 5, (10, 6))
    rotated = builtin_problem("sphere", 6, rotate=True, seed=3)
    plain = builtin_problem("sphere", 6)
    assert np.allclose(rotated(x), plain(x))
    assert not np.allclose(builtin_problem("ellipsoid", 6, rotate=True, seed=3)(x), builtin_problem("ellipsoid", 6)(x))


def test_fast_sphere_path_matches_float64():
    x = np.random.default_rng(0).uniform(-5, 5, (9, 1000)).astype(np.float32)
    got = make_problem("sphere", 1000)(x)
    assert got.dtype == np.float64
    assert np.allclose(got, np.sum(x.astype(np.float64) ** 2, axis=1), rtol=1e-12)


def test_maximisation_is_negated_inside():
    problem = Problem(lambda X: X.sum(axis=1), 3, 0.0, 1.0, maximize=True)
    x = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.5]])
    assert list(problem(x)) == [3.0, 0.5]
    assert list(problem.evaluate(x)) == [-3.0, -0.5]
    assert problem.to_user(-3.0) == 3.0


@pytest.mark.parametrize("func, exc, text", [
    (lambda X: X.sum(axis=1, keepdims=True), ValueError,
     r"expected fitness of shape \(4,\) from 'bad', got ndarray of shape \(4, 1\)"),
    (lambda X: X.sum(), ValueError, r"expected fitness of shape \(4,\) from 'bad', got float64 of shape \(\)"),
    (lambda X: None, ValueError, r"got NoneType of shape \(\)"),
    (lambda X: X.sum(axis=1) > 0, TypeError, "expected real-valued fitness .* got dtype bool"),
    (lambda X: X.sum(axis=1) + 1j, TypeError, "got dtype complex128"),
    (lambda X: ["a"] * len(X), TypeError, "got dtype <U1"),
])
def test_bad_user_outputs_are_clear_errors(func, exc, text):
    problem = Problem(func, 2, -1, 1, name="bad")
    with pytest.raises(exc, match=text):
        problem(np.zeros((4, 2)))


def test_ints_and_lists_are_accepted_and_row_functions_work():
    assert Problem(lambda X: [1, 2], 2, -1, 1)(np.zeros((2, 2))).dtype == np.float64
    rowwise = Problem(lambda x: float(x @ x), 2, -1, 1, batched=False)
    assert list(rowwise(np.array([[1.0, 0.0], [1.0, 1.0]]))) == [1.0, 2.0]


def test_genome_shape_and_bound_errors():
    problem = make_problem("sphere", 3)
    with pytest.raises(ValueError, match=r"expected genomes of shape \(n, 3\), got \(3,\)"):
        problem(np.zeros(3))
    with pytest.raises(ValueError, match=r"expected lower < upper for every gene, got gene 1"):
        Problem(lambda X: X[:, 0], 2, [0, 1], [1, 1])
    with pytest.raises(ValueError, match=r"expected upper to be a scalar or of shape \(2,\), got shape \(3,\)"):
        Problem(lambda X: X[:, 0], 2, 0, [1, 1, 1])
    with pytest.raises(ValueError, match="expected a built-in problem among"):
        make_problem("spheer", 3)
    with pytest.raises(ValueError, match="expected dim, lower and upper for user problem"):
        make_problem(lambda X: X[:, 0], 3)


def test_module_function_loading(tmp_path, monkeypatch):
    (tmp_path / "userfit.py").write_text(textwrap.dedent("""
        import numpy as np
        def score(X):
            return -np.abs(X).sum(axis=1)
        class Holder:
            @staticmethod
            def cube(X):
                return (X ** 3).sum(axis=1)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "userfit", raising=False)
    problem = make_problem("userfit:score", 4, lower=-1, upper=1, maximize=True)
    assert problem.name == "userfit:score" and problem.maximize
    assert list(problem.evaluate(np.ones((2, 4)))) == [4.0, 4.0]
    assert make_problem("userfit:Holder.cube", 2, lower=-1, upper=1)(np.ones((1, 2)))[0] == 2.0
    with pytest.raises(ValueError, match="cannot import module 'nosuchmodule_xyz'"):
        make_problem("nosuchmodule_xyz:f", 2, lower=0, upper=1)
    with pytest.raises(ValueError, match="has no 'missing'"):
        make_problem("userfit:missing", 2, lower=0, upper=1)
    with pytest.raises(ValueError, match="expected 'module:attribute', got 'a:b:c'"):
        make_problem("a:b:c", 2, lower=0, upper=1)


def _seeded_problem(calls):
    """A 3-gene problem whose islands start from two known genomes plus noise."""
    known = np.array([[0.5, -0.5, 0.25], [2.0, 0.0, -0.75]])  # 2.0 lies outside the box

    def initial(rng, n):
        calls.append((n, stream(7, 1, 0, "init").random() == rng.random()))
        return known[np.arange(n) % 2] + 0.01 * rng.standard_normal((n, 3))

    return Problem(lambda X: np.sum(X * X, axis=1), 3, -1.0, 1.0, initial=initial)


def test_initial_hook_seeds_generation_zero_from_the_islands_init_stream():
    calls = []
    island = Island(1, _seeded_problem(calls), EngineConfig(capacity=8, population=6), seed=7)
    island.initialize()
    assert calls == [(6, True)]             # the population in use, drawn from stream(7, 1, 0, "init")
    genomes = island.archive.genomes
    assert genomes.dtype == np.float32 and island.evaluations == 6
    assert np.all(genomes <= 1.0) and np.sum(genomes[:, 0] == np.float32(1.0)) == 3   # clipped into the box
    assert np.all(np.abs(np.sort(genomes[:, 2]) - np.repeat([-0.75, 0.25], 3)) < 0.05)
    again = Island(1, _seeded_problem([]), EngineConfig(capacity=8, population=6), seed=7)
    again.initialize()
    assert np.array_equal(again.archive.genomes, genomes)


def test_without_a_hook_islands_start_uniform_in_the_box():
    problem = Problem(lambda X: X[:, 0], 2, [-1.0, 10.0], [1.0, 20.0])
    got = problem.initial_genomes(stream(0, 0, 0, "init"), 500, np.float64)
    assert got.shape == (500, 2) and problem.initial is None
    assert np.array_equal(got, stream(0, 0, 0, "init").uniform(problem.lower, problem.upper, (500, 2)))


@pytest.mark.parametrize("initial, exc, text", [
    (lambda rng, n: np.zeros((n, 2)), ValueError,
     r"expected initial genomes of shape \(4, 3\) from 'p', got shape \(4, 2\)"),
    (lambda rng, n: np.full((n, 3), np.nan), ValueError,
     "expected finite initial genomes from 'p', got 12 non-finite"),
    (lambda rng, n: np.full((n, 3), "x"), TypeError,
     "expected real-valued initial genomes from 'p', got dtype <U1"),
    ("module:function", TypeError, "expected a callable initial.rng, n. or None, got str"),
])
def test_bad_initial_hooks_are_clear_errors(initial, exc, text):
    with pytest.raises(exc, match=text):
        Problem(lambda X: X[:, 0], 3, -1, 1, name="p", initial=initial).initial_genomes(
            np.random.default_rng(0), 4, np.float32)


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_initial_hooks_may_return_half_precision_rows(half):
    import ml_dtypes

    dtype = np.dtype(getattr(ml_dtypes, half, half))
    rows = np.linspace(-1, 1, 12).reshape(4, 3).astype(dtype)     # bfloat16 is numpy kind "V"
    problem = Problem(lambda X: X[:, 0], 3, -1, 1, name="p", initial=lambda rng, n: rows)
    got = problem.initial_genomes(np.random.default_rng(0), 4, dtype)
    assert got.dtype == dtype and got.tobytes() == rows.tobytes()
