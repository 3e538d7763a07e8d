"""``mpievo bench gpu``, section 6 ``startup``: a second process reaches its first device
generation without compiling.

Two fresh Python processes, one after the other, run the same small device island
(sphere, :data:`STARTUP_DIM` genes, initialisation and one generation) with an empty
Numba cache directory of their own (``NUMBA_CACHE_DIR``): the first (cold) compiles
every kernel it launches (host Numba kernels included) and writes it to the cache,
the second (warm) should load them all. Each reports its seconds from its first line
to the end of its first generation and its CUDA kernels compiled and loaded (the Numba
dispatchers' cache misses and hits). Target: the warm process compiles none.
``--check`` runs one process at :data:`CHECK_STARTUP_DIM` genes on the usual cache
(the simulator has no kernel cache) and checks that it completes its generation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from .checks import WrongResultError

STARTUP_DIM = 1_000
CHECK_STARTUP_DIM = 8       # the simulator runs every thread in Python
STARTUP_TIMEOUT_S = 600

_CHILD = r"""
import time
start = time.perf_counter()
import gc, json
from numba import cuda
from mpievo.evo import EngineConfig, Island, make_problem
from mpievo.kernels.cuda.reduce import simulator_enabled
config = EngineConfig(device="cuda", capacity=16, batch_size=16, population=16)
island = Island(0, make_problem("sphere", {dim}), config, seed=0)
island.initialize()
island.step(1)
cuda.synchronize()
seconds = time.perf_counter() - start
compiled = loaded = None
if not simulator_enabled():
    from numba.cuda.dispatcher import CUDADispatcher
    compiled = loaded = 0
    for obj in gc.get_objects():
        if isinstance(obj, CUDADispatcher):
            compiled += sum(obj.stats.cache_misses.values())
            loaded += sum(obj.stats.cache_hits.values())
print(json.dumps(dict(seconds=seconds, generation=island.generation, evaluations=island.evaluations,
                      compiled=compiled, loaded=loaded)))
"""


def _run_child(cache_dir: str | None, dim: int) -> dict:
    env = dict(os.environ) if cache_dir is None else dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    done = subprocess.run([sys.executable, "-c", _CHILD.format(dim=dim)], env=env,
                          capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)
    if done.returncode != 0:
        raise WrongResultError(f"startup: expected the island process to exit 0, got {done.returncode}: "
                               f"{done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["generation"] != 1 or result["evaluations"] != 32:
        raise WrongResultError(f"startup: expected generation 1 after 32 evaluations, got generation "
                               f"{result['generation']} after {result['evaluations']}")
    return result


def startup_section(options) -> dict:
    """Cold and warm first device generations; ``--check``: one process, on the usual
    cache (an empty one would recompile every host kernel too, minutes on a small CPU)."""
    if options.check:
        row = {"dim": CHECK_STARTUP_DIM, "cold": _run_child(None, CHECK_STARTUP_DIM)}
        row["cold"].pop("seconds")
        return row
    with tempfile.TemporaryDirectory(prefix="mpievo-kernel-cache-") as cache_dir:
        row = {"dim": STARTUP_DIM, "cold": _run_child(cache_dir, STARTUP_DIM)}
        row["cache_files"] = sum(len(files) for _, _, files in os.walk(cache_dir))
        row["warm"] = _run_child(cache_dir, STARTUP_DIM)
    for side in ("cold", "warm"):   # timings under their own names (the report's)
        row[side]["first_generation_s"] = row[side].pop("seconds")
    row["met"] = row["warm"]["compiled"] == 0
    return row


def startup_lines(results: dict) -> list[str]:
    """Report lines of the startup section (``--check``: a "checked" line, no timings)."""
    row = results["startup"]
    head = f"startup: a fresh process, device island sphere dim {row['dim']:,}, initialised and stepped once"
    if results["check"]:
        return [f"checked {head}: it completes"]
    cold, warm = row["cold"], row["warm"]
    return [f"{head}: cold {cold['first_generation_s']:.2f} s ({cold['compiled']} kernels compiled, "
            f"{row['cache_files']} cache files written), warm {warm['first_generation_s']:.2f} s "
            f"({warm['compiled']} compiled, {warm['loaded']} loaded from the cache) (target: none "
            f"compiled warm: {'met' if row['met'] else 'MISSED'})"]
