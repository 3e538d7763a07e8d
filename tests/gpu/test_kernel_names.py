"""Kernel specialisations under names of their own (mpievo.kernels.cuda.names), so that
Numba's disk cache keeps one entry per specialisation.

Under the simulator there is no disk cache: these tests check the names (what the
cache files entries under), that they do not depend on the process, the factories'
memo, that each specialisation computes its own result, and that a GPU compile asks
for the cache. A second process loading the first one's kernels is measured on a GPU
(``mpievo bench gpu``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mpievo.kernels.cuda import reduce as kc
from mpievo.kernels.cuda import names as cuda_names


def _py_func(kernel):
    """The Python function a compiled kernel wraps (GPU dispatcher or simulator kernel)."""
    return getattr(kernel, "py_func", None) or kernel.__wrapped__


def _template_of(name: str) -> str:
    return name.rsplit("__", 1)[0]


def test_two_specialisations_of_one_template_get_distinct_names_and_the_memo_returns_each():
    total, largest = kc.reduce_kernel("sum", "<f4"), kc.reduce_kernel("max", "<f4")
    assert kc.reduce_kernel("sum", "<f4") is total   # the factory's memo
    a, b = _py_func(total), _py_func(largest)
    assert a.__code__ is b.__code__                  # one template ...
    assert _template_of(a.__qualname__) == _template_of(b.__qualname__) == "_binary_template"
    assert a.__qualname__ != b.__qualname__          # ... two cache entries


def test_each_specialisation_returns_its_own_result():
    from numba import cuda

    x = np.array([1.0, -2.0, 3.5, 0.25], np.float32)
    y = np.array([2.0, -3.0, 1.0, 0.5], np.float32)
    for op, want in (("sum", x + y), ("max", np.maximum(x, y))):
        out = cuda.device_array(4, np.float32)
        kc.device_reduce(out, cuda.to_device(x), cuda.to_device(y), op)
        np.testing.assert_array_equal(out.copy_to_host(), want)


def test_problem_reductions_share_a_template_but_not_a_name():
    from mpievo.kernels.cuda import problems as cuda_problems

    names = {problem: tuple(_py_func(k).__qualname__ for k in cuda_problems._kernels(problem, "plain"))
             for problem in ("sphere", "rastrigin")}
    assert [_template_of(n) for n in names["sphere"]] == [_template_of(n) for n in names["rastrigin"]]
    assert names["sphere"][0] != names["rastrigin"][0]   # partials: different terms


def _template(x):
    return SCALE * x  # noqa: F821 (bound below)


def test_a_name_follows_the_bound_values_and_their_code():
    same = kc.bind_globals(_template, SCALE=np.float32(2)).__qualname__
    assert kc.bind_globals(_template, SCALE=np.float32(2)).__qualname__ == same
    assert kc.bind_globals(_template, SCALE=np.float32(3)).__qualname__ != same
    assert kc.bind_globals(_template, SCALE=np.float64(2)).__qualname__ != same   # type counts
    first = kc.bind_globals(_template, SCALE=lambda v: v)
    other = kc.bind_globals(_template, SCALE=lambda v: v + 1)
    assert first.__qualname__ != other.__qualname__                           # bound code counts


def test_an_unnameable_binding_is_refused():
    with pytest.raises(TypeError, match="expected a module, function.*got builtins.dict"):
        kc.bind_globals(_template, SCALE={"a": 1})


_NAME_IN_A_FRESH_PROCESS = """
from mpievo.kernels.cuda import reduce as kc, problems as cuda_problems
k = kc.reduce_kernel("max", "<f4")
p = cuda_problems._kernels("rastrigin", "shifted")[0]
print((getattr(k, "py_func", None) or k.__wrapped__).__qualname__)
print((getattr(p, "py_func", None) or p.__wrapped__).__qualname__)
"""


def test_names_are_the_same_in_another_process():
    """What makes a second process find the first one's cache entries."""
    from mpievo.kernels.cuda import problems as cuda_problems

    here = [_py_func(kc.reduce_kernel("max", "<f4")).__qualname__,
            _py_func(cuda_problems._kernels("rastrigin", "shifted")[0]).__qualname__]
    env = dict(os.environ, PYTHONHASHSEED="123")
    run = subprocess.run([sys.executable, "-c", _NAME_IN_A_FRESH_PROCESS], env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == here


def test_a_gpu_compile_asks_numba_for_the_disk_cache(monkeypatch):
    """On a GPU every kernel is compiled with ``cache=True`` and its options (recorded
    here instead of compiling: the simulator has no cache)."""
    from numba import cuda

    calls = []

    def fake_jit(*args, **options):
        if args:
            raise AssertionError(f"expected cuda.jit(**options)(fn) on a GPU, got positional {args}")
        return lambda fn: calls.append((options, fn)) or fn

    monkeypatch.setattr(kc, "simulator_enabled", lambda: False)
    monkeypatch.setattr(cuda, "jit", fake_jit)
    fn = kc.compile_kernel(_template, options={"max_registers": 64}, SCALE=np.float32(2))
    (options, compiled), = calls
    assert options == {"cache": True, "max_registers": 64}
    assert compiled is fn and fn.__qualname__.startswith("_template__")
    assert fn.__globals__["cuda"] is cuda   # bound by default
