"""``mpievo bench genomes --device cuda`` on the backend of this run (the CUDA simulator
in CI, a GPU on a GPU machine): the device fitness is the host's to rounding, and a
tiny grid runs with every island on the device, its checks passing and its bytes per
migrant those of the host grid (at 1 and 2 ranks)."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.kernels.cuda.reduce import simulator_enabled
from mpievo.bench import genomes as bench
from mpievo.bench.genomes import GenomesOptions, bench_genomes

DIMS = (1_000, 2_000)
#: the grid's sizes: small, since the simulator runs a Python thread per GPU thread
GRID_DIMS = (100, 200)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", DIMS)
def test_the_device_fitness_is_the_host_one(dim, dtype, rng):
    from numba import cuda

    problem = bench.merge_problem(dim, device=True)
    genomes = rng.uniform(bench.LOWER, bench.UPPER, (3, dim)).astype(dtype)
    on_device = problem.func(cuda.to_device(genomes))
    on_host = bench.MergeDistance(problem.bases)(genomes)
    assert isinstance(on_device, np.ndarray) and on_device.dtype == np.float64
    np.testing.assert_allclose(on_device, on_host, rtol=1e-12, atol=0.0)
    assert problem.device and len(set(on_host)) == 3


def _migrant_bytes(rows) -> dict:
    return {(r["genome"], r["dim"]): r["migrant_bytes"] for r in rows if "skipped" not in r}


@pytest.mark.mpi(min_size=1)
# about 100 s alone in the CUDA simulator (a Python thread per GPU thread), and over the
# stage's 180 s once when the machine was busier: a guard against hangs, not a target
@pytest.mark.timeout(600)
def test_a_device_grid_runs_on_the_device_with_the_host_bytes(world):
    from mpievo.comm import Communicator

    if simulator_enabled() and world.Get_size() > 2:
        pytest.skip("the simulator runs this at 1 and 2 ranks (a Python thread per GPU thread)")
    comm = Communicator(world)
    options = GenomesOptions(dims=GRID_DIMS, generations=1, repeats=1)
    rows = bench_genomes(comm, GenomesOptions(**{**options.__dict__, "device": "cuda"}), log=lambda line: None)
    host = _migrant_bytes(bench_genomes(comm, options, log=lambda line: None))
    by = {(r["genome"], r["dim"]): r for r in rows}
    # delta may be refused on the device (skipped with the reason); the others must run
    wrong = [f"{key}: skipped: {row['skipped']}" for key, row in by.items()
             if key[0] != "delta" and "skipped" in row]
    wrong += [f"{key}: {row['problems']}" for key, row in by.items() if row.get("problems")]
    if _migrant_bytes(rows) != {key: host[key] for key in _migrant_bytes(rows)}:
        wrong.append(f"bytes per migrant {_migrant_bytes(rows)} differ from the host's {host}")
    if comm.size > 1:
        wrong += [f"{key}: sent {r['traffic_bytes']}" for key, r in by.items()
                  if "skipped" not in r and r["traffic_bytes"] != r["migrant_bytes"] + 8]
    wrong += [f"{key}: no GPU estimate" for key, r in by.items() if "skipped" not in r
              and not r["gpu_need_bytes"] > 3 * 4 * key[1]]
    if not simulator_enabled():   # a GPU tells its memory: the cell used some of it
        wrong += [f"{key}: GPU use {r.get('gpu_cell_bytes')}" for key, r in by.items()
                  if "skipped" not in r and not r.get("gpu_peak_bytes", 0) > 0]
    same = comm.allgather_object(rows)
    flags = world.allgather(not wrong and all(s == same[0] for s in same))
    comm.free()
    assert all(flags), "; ".join(wrong)
