"""``mpievo bench gpu``, engine sections: a device island and device breeding.

4. ``island``: one GA island on the built-in sphere with its archive, breeding and
   evaluation on the GPU (``engine.device = "cuda"``) against the same island on the
   host, same settings, same run; per dim, evaluations/s = children evaluated in the
   timed generations / their seconds (a generation breeds, evaluates and selects;
   the first is a warm-up and not timed), and the device's milliseconds per
   generation. Targets: the device island >= 20x the host island from 1e5 genes,
   >= 1x below. The host island runs on ``host_threads`` Numba/BLAS threads
   (1, as ``mpievo run`` gives each rank by default).
5. ``breeding``: :func:`mpievo.kernels.cuda.counter_operators.vary` (interpolation
   crossover and Gaussian mutation, clipped to the box) with every gene mutated
   (dense), in the exact and the fast device math (``engine.device_math``), and at
   the default sparse rate of 10 genes per genome: GB/s of child genome written
   against a device-to-device copy of the same bytes (size / time). Targets: dense
   >= 0.3x the copy exact, >= 0.5x fast; sparse >= 0.5x.

Checks: each island's best never gets worse and stays finite, and it evaluates what it
should; exact children equal the host kernel's (:func:`mpievo.kernels.counter_operators.vary`,
same arguments) up to a few float32 ulps (device libm may differ in the last bits), and
lie in the box; fast children lie in the box, and their normals -- recovered from the
child, its unmutated value (the host kernel without mutation) and the step -- have mean
0 and standard deviation 1. When the device engine is absent, a section reads
``{"skipped": reason}``.
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np

from .checks import WrongResultError, no_sync, synced_seconds
from ..parallel.threads import limit_blas_threads

ISLAND_BATCH = ISLAND_CAPACITY = 16      # float32 at 1e7 genes: 1.3 GB of archive and children
BREED_BATCH = BREED_CAPACITY = 16
#: device island over host island, at least, from TARGET_ISLAND_DIM genes (below: at least
#: TARGET_SMALL_ISLAND_RATIO, the device no slower than the host)
TARGET_ISLAND_RATIO, TARGET_ISLAND_DIM, TARGET_SMALL_ISLAND_RATIO = 20.0, 100_000, 1.0
#: child bytes per second over the device copy's, at least (dense exact: 0.3, see _breed_target)
TARGET_BREED_RATIO, TARGET_EXACT_DENSE_RATIO = 0.5, 0.3
#: timed generations per island, at least (and at least ``island_seconds`` of them)
MIN_GENERATIONS = 3
SPARSE_GENES = 10                        # the default mutation rate: 10 genes per genome
LOWER, UPPER, STEP = -5.12, 5.12, 1e-3
#: children may differ from the host kernel's by this much (relative to the box width)
#: and in this fraction of genes (a last-bit difference of a logarithm moves a sparse gap)
BREED_TOLERANCE, BREED_MISMATCH_FRACTION = 1e-6, 1e-6
#: fast children: normals' mean within this many standard errors of 0 (and their sd of 1),
#: and never closer than FAST_MOMENT_FLOOR (clipping near the box trims a few tails)
FAST_MOMENT_ERRORS, FAST_MOMENT_FLOOR = 6.0, 0.01
#: ``--check`` sizes
CHECK_DIMS = (24,)
CHECK_BREED_DIM = 41                     # odd: the last gene has no partner
CHECK_GENERATIONS = 2


def _skipped(section: str, err: ImportError) -> dict:
    return {"skipped": f"the device {section} is not available here ({type(err).__name__}: {err})"}


# ------------------------------------------------------------------ island
def island_section(options) -> dict:
    """Device island vs host island per dim in ``options.dims``: ``{"rows": [...]}``."""
    try:
        return {"rows": _island_rows(options)}
    except ImportError as err:  # the device engine imports its kernels as it first needs them
        return _skipped("island", err)


def _island_rows(options) -> list[dict]:
    from ..evo.engine_config import EngineConfig
    from ..evo.island import Island
    from ..evo.problems import make_problem

    rows = []
    with contextlib.ExitStack() as stack:
        limit_blas_threads(options.host_threads, stack)
        for dim in options.dims:
            row = {"dim": dim, "batch": ISLAND_BATCH, "capacity": ISLAND_CAPACITY, "dtype": "float32",
                   "problem": "sphere", "host_threads": options.host_threads}
            for device in ("cuda", "cpu"):
                config = EngineConfig(device=device, capacity=ISLAND_CAPACITY, batch_size=ISLAND_BATCH,
                                      population=ISLAND_CAPACITY)
                island = Island(0, make_problem("sphere", dim), config, seed=0)
                side = _time_island(island, device == "cuda", options)
                row.update({f"{device}_{k}": v for k, v in side.items()})
            if not options.check:
                row["ratio"] = row["cuda_evals_per_s"] / row["cpu_evals_per_s"]
                row["target"] = TARGET_ISLAND_RATIO if dim >= TARGET_ISLAND_DIM else TARGET_SMALL_ISLAND_RATIO
                row["met"] = row["ratio"] >= row["target"]
            rows.append(row)
    return rows


def _time_island(island, on_device: bool, options) -> dict:
    """Initialise, warm up one generation, then step (timed unless checking) and check."""
    from numba import cuda

    sync = cuda.synchronize if on_device else no_sync
    if island.archive.on_device != on_device:
        raise WrongResultError(f"island dim {island.problem.dim}: expected its archive on the "
                               f"{'device' if on_device else 'host'}, got the other")
    island.initialize()
    start_best = island.best()[1]
    island.step(1)
    sync()
    before, generations, start = island.evaluations, 0, time.perf_counter()
    while True:
        generations += 1
        island.step(1 + generations)
        sync()
        seconds = time.perf_counter() - start
        if options.check and generations == CHECK_GENERATIONS:
            break
        if not options.check and generations >= MIN_GENERATIONS and seconds >= options.island_seconds:
            break
    evaluations, best = island.evaluations - before, island.best()[1]
    case = f"island {'cuda' if on_device else 'cpu'} dim {island.problem.dim}"
    if evaluations != ISLAND_BATCH * generations:
        raise WrongResultError(f"{case}: expected {ISLAND_BATCH * generations} evaluations, got {evaluations}")
    if not (math.isfinite(best) and best <= start_best):
        raise WrongResultError(f"{case}: expected a finite best <= the initial {start_best}, got {best}")
    side = {"generations": generations, "evaluations": evaluations, "initial_best": start_best,
            "best": best}
    if not options.check:
        side.update(seconds=seconds, evals_per_s=evaluations / seconds)
    return side


# ------------------------------------------------------------------ breeding
def breeding_section(options) -> dict:
    """Device ``vary`` (dense and sparse) vs device copy at ``options.breed_dim`` genes."""
    try:
        from mpievo.kernels.cuda import counter_operators as cuda_counter_operators
    except ImportError as err:
        return _skipped("breeding kernels", err)
    dim = options.breed_dim
    inputs = _breeding_inputs(dim)
    sparse_rate = min(1.0, SPARSE_GENES / dim)
    vary = cuda_counter_operators.vary
    return {"rows": [_breed_case(vary, inputs, 1.0, True, "exact", options),
                     _breed_case(vary, inputs, 1.0, True, "fast", options),
                     _breed_case(vary, inputs, sparse_rate, False, "exact", options)]}


def _breed_target(dense: bool, math_mode: str) -> float:
    return TARGET_EXACT_DENSE_RATIO if dense and math_mode == "exact" else TARGET_BREED_RATIO


def _breeding_inputs(dim: int) -> dict:
    """Host parents, box, pairs, weights and steps, and their device copies."""
    from numba import cuda

    from ..evo.operators import box_arrays

    rng = np.random.default_rng(0)
    lower, upper = box_arrays(np.full(dim, LOWER), np.full(dim, UPPER), np.float32)
    host = {"genomes": rng.uniform(LOWER, UPPER, (BREED_CAPACITY, dim)).astype(np.float32),
            "idx_a": rng.integers(0, BREED_CAPACITY, BREED_BATCH),
            "idx_b": rng.integers(0, BREED_CAPACITY, BREED_BATCH),
            "omega": rng.uniform(size=BREED_BATCH).astype(np.float32),
            "steps": np.full(BREED_BATCH, STEP, np.float32),
            "scale": upper - lower, "lower": lower, "upper": upper}
    return {"host": host, "device": {k: cuda.to_device(v) for k, v in host.items()}}


def _vary_args(arrays: dict, x, mode, threshold, inv_log_q, dense, key, base) -> tuple:
    a = arrays
    return (a["genomes"], a["idx_a"], a["idx_b"], a["omega"], True, x, a["steps"], a["scale"],
            a["lower"], a["upper"], mode, threshold, inv_log_q, dense, key, base)


def _breed_case(device_vary, inputs: dict, rate: float, dense: bool, math_mode: str, options) -> dict:
    from numba import cuda

    from mpievo.kernels import counter_operators
    from mpievo.kernels.operators import BOUND_CLIP

    dim = options.breed_dim
    threshold = counter_operators.rate_threshold(rate)
    inv_log_q = 1.0 / math.log1p(-rate) if 0.0 < rate < 1.0 else 0.0
    key, base = tuple(np.uint64(k) for k in (9, 1, 2, 3)), np.uint64(0)
    x = cuda.device_array((BREED_BATCH, dim), np.float32)
    args = _vary_args(inputs["device"], x, BOUND_CLIP, threshold, inv_log_q, dense, key, base)
    counts = {}

    def breed():
        counts["device"] = device_vary(*args, math=math_mode)

    row = {"dim": dim, "batch": BREED_BATCH, "capacity": BREED_CAPACITY, "dtype": "float32",
           "mode": "dense" if dense else "sparse", "math": math_mode, "rate": rate, "bytes": x.nbytes}
    if options.check:
        breed()
    else:
        copy = cuda.device_array_like(x)
        row["breed_s"] = synced_seconds(breed, options.repeats)
        row["copy_s"] = synced_seconds(lambda: copy.copy_to_device(x), options.repeats)
        row["breed_GBps"], row["copy_GBps"] = x.nbytes / row["breed_s"] / 1e9, x.nbytes / row["copy_s"] / 1e9
        row["ratio"] = row["breed_GBps"] / row["copy_GBps"]
        row["target"] = _breed_target(dense, math_mode)
        row["met"] = row["ratio"] >= row["target"]
    check = _check_children if math_mode == "exact" else _check_fast_children
    row.update(check(x.copy_to_host(), np.asarray(counts["device"]), inputs["host"],
                     (BOUND_CLIP, np.uint64(threshold), inv_log_q, dense, key, base), row))
    return row


def _check_children(got: np.ndarray, got_counts: np.ndarray, host: dict, params: tuple, row: dict) -> dict:
    """Compare with the host kernel; returns the comparison's numbers for the row."""
    from mpievo.kernels import counter_operators

    case = f"breeding {row['mode']} dim {row['dim']}"
    want = np.empty_like(got)
    want_counts = np.empty(got.shape[0], np.int64)
    counter_operators.vary(*_vary_args(host, want, *params), want_counts)
    lower, upper = host["lower"], host["upper"]
    if not (np.all(np.isfinite(got)) and np.all(got >= lower) and np.all(got <= upper)):
        raise WrongResultError(f"{case}: expected finite children inside the box, got others")
    close = np.isclose(got, want, rtol=BREED_TOLERANCE, atol=BREED_TOLERANCE * float(np.max(host["scale"])))
    mismatched = int(got.size - np.count_nonzero(close))
    allowed = int(BREED_MISMATCH_FRACTION * got.size)
    if mismatched > allowed:
        raise WrongResultError(f"{case}: expected at most {allowed} genes differing from the host "
                               f"kernel's, got {mismatched} of {got.size}")
    if row["mode"] == "dense" and not np.all(got_counts == row["dim"]):
        raise WrongResultError(f"{case}: expected every gene mutated ({row['dim']} per row), "
                               f"got counts {got_counts.tolist()}")
    return {"mutated": int(got_counts.sum()), "host_mutated": int(want_counts.sum()),
            "genes_differing_from_host": mismatched,
            "max_abs_diff_from_host": float(np.max(np.abs(got - want), initial=0.0))}


def _check_fast_children(got: np.ndarray, got_counts: np.ndarray, host: dict, params: tuple,
                         row: dict) -> dict:
    """Fast children: in the box, every gene counted, and normals of mean 0 and sd 1."""
    from mpievo.kernels import counter_operators

    case = f"breeding {row['mode']} fast dim {row['dim']}"
    lower, upper = host["lower"], host["upper"]
    if not (np.all(np.isfinite(got)) and np.all(got >= lower) and np.all(got <= upper)):
        raise WrongResultError(f"{case}: expected finite children inside the box, got others")
    if not np.all(got_counts == row["dim"]):
        raise WrongResultError(f"{case}: expected every gene mutated ({row['dim']} per row), "
                               f"got counts {got_counts.tolist()}")
    start = np.empty_like(got)   # the interpolation alone: the host kernel without mutation
    counter_operators.vary(*_vary_args(host, start, params[0], np.uint64(0), *params[2:]),
                           np.empty(got.shape[0], np.int64))
    inside = (got > lower) & (got < upper)   # clipped genes do not show their normal
    z = (got.astype(np.float64) - start)[inside] / (STEP * host["scale"].astype(np.float64)[
        np.nonzero(inside)[1]])
    tolerance = max(FAST_MOMENT_ERRORS / math.sqrt(max(z.size, 1)), FAST_MOMENT_FLOOR)
    mean, sd = float(z.mean()), float(z.std())
    if not (z.size and abs(mean) <= tolerance and abs(sd - 1.0) <= tolerance):
        raise WrongResultError(f"{case}: expected normals of mean 0 and sd 1 (within {tolerance:.2g}), "
                               f"got mean {mean:.4g} and sd {sd:.4g} over {z.size} genes")
    return {"mutated": int(got_counts.sum()), "normals_mean": mean, "normals_sd": sd,
            "normals_checked": int(z.size)}


# ------------------------------------------------------------------ report
def island_lines(results: dict) -> list[str]:
    """Report lines of the island section (``--check``: "checked" lines, no timings)."""
    island = results["island"]
    if "skipped" in island:
        return [f"island: skipped: {island['skipped']}"]
    lines = []
    for row in island["rows"]:
        head = f"island sphere dim {row['dim']:,} (batch {row['batch']}, float32)"
        if results["check"]:
            lines.append(f"checked {head}: device and host islands improve, evaluations counted")
            continue
        target = f"target >= {row['target']:g}x: {'met' if row['met'] else 'MISSED'}"
        per_generation_ms = 1e3 * row["cuda_seconds"] / row["cuda_generations"]
        lines.append(f"{head}: device {row['cuda_evals_per_s']:,.0f} evals/s "
                     f"({per_generation_ms:.3g} ms per generation), host "
                     f"{row['cpu_evals_per_s']:,.0f} evals/s on {row['host_threads']} thread(s), "
                     f"ratio {row['ratio']:.1f}x ({target})")
    return lines


def breeding_lines(results: dict) -> list[str]:
    """Report lines of the breeding section (``--check``: "checked" lines, no timings)."""
    breeding = results["breeding"]
    if "skipped" in breeding:
        return [f"breeding: skipped: {breeding['skipped']}"]
    lines = []
    for row in breeding["rows"]:
        head = (f"breeding {row['mode']} {row['math']} (rate {row['rate']:.3g}) {row['batch']} x "
                f"{row['dim']:,} float32")
        if row["math"] == "exact":
            verdict = "children match the host kernel's, inside the box"
            found = (f"{row['genes_differing_from_host']} genes differ from the host kernel's "
                     f"(max {row['max_abs_diff_from_host']:.2g})")
        else:
            verdict = "children inside the box, their normals of mean 0 and sd 1"
            found = f"normals mean {row['normals_mean']:.2g}, sd {row['normals_sd']:.4f}"
        if results["check"]:
            lines.append(f"checked {head}: {verdict}")
            continue
        lines.append(f"{head}: {row['breed_GBps']:.1f} GB/s of children, copy {row['copy_GBps']:.1f} GB/s, "
                     f"ratio {row['ratio']:.2f} (target >= {row['target']}: "
                     f"{'met' if row['met'] else 'MISSED'}); {found}")
    return lines
