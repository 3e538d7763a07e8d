"""Building problems and schemes from a validated config."""

import contextlib

import numpy as np
import pytest

from mpievo.config import validate
from mpievo.parallel import build_problem


def test_builtin_problem_from_config():
    job = validate({"problem": {"name": "sphere", "dim": 3, "maximize": True}}, 1)
    problem = build_problem(job.problem)
    assert problem.dim == 3 and problem.maximize
    assert problem.evaluate(np.ones((2, 3))).tolist() == [-3.0, -3.0]


def test_user_problem_with_a_time_limit_counts_late_evaluations_as_failed():
    job = validate({"problem": {"name": "parallel_helpers:sleepy_sphere", "dim": 2, "lower": -1, "upper": 1,
                                "time_limit": 0.2, "time_limit_method": "signal"}}, 1)
    with contextlib.ExitStack() as stack:
        problem = build_problem(job.problem, stack)
        values = problem.evaluate(np.array([[-0.5, 0.5], [0.5, 0.5]]))
    assert values[0] == pytest.approx(0.5) and values[1] == np.inf


def test_time_limit_on_a_builtin_keeps_its_box():
    job = validate({"problem": {"name": "rastrigin", "dim": 4, "time_limit": 5.0,
                                "time_limit_method": "signal"}}, 1)
    with contextlib.ExitStack() as stack:
        problem = build_problem(job.problem, stack)
        assert problem.lower.tolist() == [-5.12] * 4
        assert problem.evaluate(np.zeros((1, 4))).tolist() == [0.0]
