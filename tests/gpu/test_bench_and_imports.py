"""``mpievo bench gpu`` (its --check run, its refusals) and lazy CUDA imports.

The command runs in fresh interpreters on the backend of this run (the CUDA simulator
or the GPU), so these tests run once, from a single-rank pytest run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpievo.bench.checks import WrongResultError, expect_equal

ROOT = Path(__file__).resolve().parents[2]
MPIEVO = [sys.executable, "-W", "ignore", "-m", "mpievo.cli.main"]
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
TIMING_WORDS = ("GB/s", " ms", "evals/s", "speed-up", "ratio")


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


def _run(args, *, drop=(), timeout=240, **env):
    # timeouts below pytest's: a hung child is killed here, not orphaned by pytest-timeout
    environ = {k: v for k, v in _clean_env(**env).items() if k not in drop}
    return subprocess.run(args, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=timeout)


def test_bench_refuses_to_time_the_simulator():
    done = _run([*MPIEVO, "bench", "gpu"], timeout=120, NUMBA_ENABLE_CUDASIM="1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "gives no GPU timings" in done.stderr and "--check" in done.stderr
    assert done.stdout == ""


def test_bench_refuses_without_a_gpu():
    # no simulator and no visible device: the same answer on a GPU node
    done = _run([*MPIEVO, "bench", "gpu"], drop=("NUMBA_ENABLE_CUDASIM",), timeout=120,
                CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "expected a CUDA GPU, got none" in done.stderr and done.stdout == ""


def _timing_keys(value, path="") -> list[str]:
    """Keys anywhere in a result that hold a measured time or rate."""
    if isinstance(value, list):
        return [k for i, item in enumerate(value) for k in _timing_keys(item, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return []
    found = [f"{path}.{k}" for k in value
             if k.endswith(("_s", "GBps", "per_s", "speedup")) or k in ("ratio", "met")]
    return found + [k for key, item in value.items() for k in _timing_keys(item, f"{path}.{key}")]


def test_bench_check_runs_every_section_and_times_nothing(tmp_path):
    out = tmp_path / "bench.json"
    # the simulator's "device" memory is host memory, which any MPI takes: the direct path runs
    # there; on a GPU it runs where MPI is CUDA-aware and is reported as not run elsewhere
    extra = ["--force-direct"] if SIMULATOR else []
    done = _run([*MPIEVO, "bench", "gpu", "--check", *extra, "--json", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("mpievo bench gpu: ") and lines[-1] == f"wrote {out}"
    body = lines[1:-1]
    assert not [line for line in body if any(word in line for word in TIMING_WORDS)], body
    assert all(line.startswith("checked ") or line.startswith("allreduce direct: not run (")
               for line in body), body
    results = json.loads(out.read_text())
    assert results["check"] is True and results["gpu_timings"] is False
    assert (results["device"] == "CUDA simulator") == SIMULATOR
    assert not _timing_keys(results), _timing_keys(results)
    assert [row["dtype"] for row in results["kernel"]] == ["float32", "bfloat16"]
    assert len(results["allreduce"]) == len(results["compression"]) == 2
    direct = "direct_skipped" not in results
    assert all(("direct" in row["paths"]) == direct and {"staged", "host"} <= set(row["paths"])
               for row in results["allreduce"])
    assert [row["dim"] for row in results["island"]["rows"]] == [24]
    assert [(row["mode"], row["math"]) for row in results["breeding"]["rows"]] == [
        ("dense", "exact"), ("dense", "fast"), ("sparse", "exact")]
    for dense in results["breeding"]["rows"][:2]:
        assert dense["mutated"] == dense["dim"] * dense["batch"]
    assert results["breeding"]["rows"][1]["normals_checked"] > 0
    assert results["startup"]["cold"]["generation"] == 1
    assert sum("checked" in line for line in body) == 2 + 2 + 2 + 1 + 3 + 1


def test_bench_rejects_bad_sizes():
    done = _run([*MPIEVO, "bench", "gpu", "--dims", "1e3,0"], timeout=60)
    assert done.returncode == 2
    assert "bench.gpu.dims[1]: expected an int >= 1, got 0" in done.stderr


def test_a_wrong_result_is_named():
    want = np.arange(6, dtype=np.float32)
    expect_equal(want.copy(), want, "same")
    got = want.copy()
    got[4] = np.nextafter(got[4], np.float32(9))
    with pytest.raises(WrongResultError, match=r"kernel sum: expected the numpy reference, got 1 "
                                                r"differing of 6 elements"):
        expect_equal(got, want, "kernel sum")


def test_importing_the_device_modules_never_touches_cuda():
    code = ("import importlib, pkgutil, sys\n"
            "import mpievo.comm, mpievo.kernels\n"
            "for package in (mpievo.comm, mpievo.kernels):\n"
            "    for info in pkgutil.iter_modules(package.__path__):\n"
            "        importlib.import_module(f'{package.__name__}.{info.name}')\n"
            "bad = [m for m in sys.modules if m.startswith(('numba.cuda', 'cuda.', 'cupy'))"
            " or m in ('cuda', 'mpievo.evo', 'mpievo.parallel', 'mpievo.io', 'mpievo.cli')]\n"
            "print(bad)\n")
    done = _run([sys.executable, "-c", code], NUMBA_ENABLE_CUDASIM="1", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_building_the_command_line_loads_neither_cuda_nor_mpi():
    # `mpievo launch` builds the parser before MPI exists; the bench modules load CUDA lazily
    code = ("import sys\n"
            "from mpievo.cli.main import build_parser\n"
            "build_parser().parse_args(['bench', 'gpu', '--check'])\n"
            "import mpievo.bench.gpu, mpievo.bench.gpu_engine\n"
            "print([m for m in sys.modules if m.startswith(('numba.cuda', 'cupy', 'mpi4py.MPI'))])\n")
    done = _run([sys.executable, "-c", code], NUMBA_ENABLE_CUDASIM="1", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_startup_section_reports_cold_and_warm_processes(monkeypatch):
    """The timed branch's bookkeeping and report (processes stubbed: timing needs a GPU)."""
    from types import SimpleNamespace

    from mpievo.bench import gpu_startup

    runs = iter([dict(seconds=9.5, generation=1, evaluations=32, compiled=14, loaded=0),
                 dict(seconds=2.25, generation=1, evaluations=32, compiled=0, loaded=14)])
    dirs = []

    def child(cache_dir, dim):
        dirs.append(cache_dir)
        return next(runs)

    monkeypatch.setattr(gpu_startup, "_run_child", child)
    row = gpu_startup.startup_section(SimpleNamespace(check=False))
    assert dirs[0] is not None and dirs == dirs[:1] * 2   # one fresh cache, shared by both
    assert row["cold"]["first_generation_s"] == 9.5 and row["warm"]["first_generation_s"] == 2.25
    assert row["met"] is True
    line, = gpu_startup.startup_lines({"check": False, "startup": row})
    assert "cold 9.50 s (14 kernels compiled" in line and "warm 2.25 s (0 compiled, 14 loaded" in line
    assert line.endswith("met)")
