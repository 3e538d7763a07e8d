"""Where the compiled kernels are cached (mpievo.kernels.numba_cache) and the warm-up."""

import os
import subprocess
import sys
from pathlib import Path

from mpievo.evo.engine_config import EngineConfig
from mpievo.evo.warmup import warm_up, warms_up
from mpievo.kernels import numba_cache


def test_a_writable_package_keeps_numba_s_default(tmp_path):
    environ = {}
    assert numba_cache.configure(tmp_path, environ) is None and environ == {}


def test_a_read_only_package_caches_under_the_user_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    chosen = numba_cache.configure(tmp_path / "pkg", environ)
    assert chosen == environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mpievo" / "numba")
    environ = {"NUMBA_CACHE_DIR": "/elsewhere"}     # the user's choice wins
    assert numba_cache.configure(tmp_path / "pkg", environ) == "/elsewhere"
    assert numba_cache.default_dir({}) == Path.home() / ".cache" / "mpievo" / "numba"


_READ_ONLY = """
import os, sys
real = os.access
kernels = os.path.join(sys.argv[1], "")
os.access = lambda path, mode: False if str(path).startswith(kernels) else real(path, mode)
import numpy as np
from mpievo.kernels import operators
os.access = real
print(os.environ.get("NUMBA_CACHE_DIR"))
print(operators.kth_smallest(np.array([3.0, 1.0, 2.0]), 1))
"""


def test_kernels_of_a_read_only_install_are_cached_where_configure_says(tmp_path):
    import mpievo.kernels

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", _READ_ONLY, os.path.dirname(mpievo.kernels.__file__)],
                          env=env, capture_output=True, text=True, check=True)
    chosen, value = done.stdout.split()
    assert chosen == str(tmp_path / "mpievo" / "numba") and value == "2.0"
    cached = [p.name for p in Path(chosen).rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert any(name.startswith("operators.kth_smallest") for name in cached), cached


_WARM = """
from mpievo.evo.engine_config import EngineConfig
from mpievo.evo.warmup import warm_up_all
from mpievo.kernels import de_step, ga_step, operators
warm_up_all([EngineConfig(dtype="float64"), EngineConfig(dtype="float64"), EngineConfig(algorithm="de"),
             EngineConfig(algorithm="shade", dtype="float64", shade_max_evaluations=900)], 10)
for kernel in (ga_step.generation_dense, ga_step.adapt_step, operators.survivors, operators.copy_rows):
    print(kernel.__name__, "float64" in str(kernel.signatures))
for kernel in (de_step.jde_trials, de_step.jde_select):
    print(kernel.__name__, "float32" in str(kernel.signatures))
for kernel in (de_step.shade_trials, de_step.shade_select, de_step.memory_update):
    print(kernel.__name__, "float64" in str(kernel.signatures))
"""


def test_warm_up_compiles_the_kernels_of_ga_jde_and_shade_islands():
    done = subprocess.run([sys.executable, "-c", _WARM], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["generation_dense", "True", "adapt_step", "True", "survivors", "True",
                                   "copy_rows", "True", "jde_trials", "True", "jde_select", "True",
                                   "shade_trials", "True", "shade_select", "True", "memory_update", "True"]
    assert warms_up(EngineConfig()) and warms_up(EngineConfig(algorithm="shade"))
    assert not warms_up(EngineConfig(algorithm="cmaes"))
    assert warm_up(EngineConfig(algorithm="cmaes"), 10) == 0.0
