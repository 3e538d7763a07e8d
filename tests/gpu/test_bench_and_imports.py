"""The GPU benchmark script (functional run under the simulator) and lazy CUDA imports.

Both start fresh interpreters, so they run once, from a single-rank pytest run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "examples" / "bench_gpu.py"


@pytest.fixture(autouse=True)
def _single_rank_only():
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() > 1:
        pytest.skip("starts fresh interpreters: runs once, in the single-rank stage")


def _clean_env(**extra) -> dict:
    # a child of an mpiexec'd process must not think it belongs to that MPI job
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PRTE_", "PMI_", "HYDRA_", "MPI_LOCALRANKID"))}
    env.update(extra)
    return env


def _run(args, **env):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=_clean_env(**env),
                          capture_output=True, text=True, timeout=120)


def test_bench_refuses_to_report_simulator_timings_as_gpu_numbers():
    done = _run([str(BENCH)], NUMBA_ENABLE_CUDASIM="1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not GPU timings" in done.stderr and "GB/s" not in done.stdout


def test_bench_simulated_run_labels_every_number(tmp_path):
    out = tmp_path / "bench.json"
    done = _run(["-W", "ignore", str(BENCH), "--simulate", "--force-direct", "--json", str(out)],
                NUMBA_ENABLE_CUDASIM="1")
    assert done.returncode == 0, done.stdout + done.stderr
    measured = [line for line in done.stdout.splitlines() if "GB/s" in line or "speed-up" in line]
    assert len(measured) == 7  # three kernel dtypes; all-reduce and compression at two sizes
    assert all("SIMULATED" in line for line in measured)
    results = json.loads(out.read_text())
    assert results["simulated"] is True and results["gpu_timings"] is False
    assert {row["dtype"] for row in results["kernel"]} == {"float32", "float16", "bfloat16"}
    assert {"staged_s", "direct_s", "host_s"} <= set(results["allreduce"][0])
    assert {"fp16_speedup", "bf16_speedup"} <= set(results["compression"][0])


def test_importing_the_device_modules_never_touches_cuda():
    code = ("import importlib, pkgutil, sys\n"
            "import mpievo.comm, mpievo.kernels\n"
            "for package in (mpievo.comm, mpievo.kernels):\n"
            "    for info in pkgutil.iter_modules(package.__path__):\n"
            "        importlib.import_module(f'{package.__name__}.{info.name}')\n"
            "bad = [m for m in sys.modules if m.startswith(('numba.cuda', 'cuda.', 'cupy'))"
            " or m in ('cuda', 'mpievo.evo', 'mpievo.parallel', 'mpievo.io', 'mpievo.cli')]\n"
            "print(bad)\n")
    done = _run(["-c", code], NUMBA_ENABLE_CUDASIM="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
