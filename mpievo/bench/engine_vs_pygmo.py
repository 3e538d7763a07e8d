"""One island against pygmo, like for like: same fitness callable, dtype, dim and count.

Three mpievo runs, each timed against the same pygmo run:

(a) ``per_row``: the per-individual Python fitness :func:`sphere_row` (float64).
    mpievo gets it as a non-batched :class:`~mpievo.evo.problems.Problem` (called
    row by row), pygmo's ``sade`` as its problem's ``fitness``. This is the like-for-
    like comparison.
(b) ``batched``: :func:`sphere_batch`, the same function on an (n, dim) float64 batch
    (one numpy call per generation). pygmo has no batch call, so its side stays (a).
(c) ``numba_float32``: mpievo's built-in sphere (float32 genomes, a Numba kernel).
    NOT like for like (other dtype, other fitness code); reported for reference.

Semantics. mpievo: one island, default GA (archive of 64, 128 children bred and
evaluated per generation). pygmo: ``sade`` with a population of 20 (20 trial vectors
evaluated per generation). Both count evaluations after their initial population
(not timed), and the budget is rounded up to whole generations of both (a multiple
of 640), so both sides evaluate exactly as many genomes. Each side's best after the
budget is reported and checked against the value of a random genome.

Overhead per evaluation: mpievo's seconds per evaluation minus the fitness's own on
the same batch shape (128 rows of ``dim`` float64 genes, one call per row or one
batched call), and where it goes (:func:`overhead_split`).

Run: ``python -m mpievo.bench.engine_vs_pygmo --dim 1000 --evaluations 128000 --repeats 3``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np

from ..evo.engine_config import EngineConfig
from ..evo.island import Island
from ..evo.operators import box_arrays, breed
from ..evo.problems import Problem, make_problem
from ..evo.streams import StreamKeys

LOWER, UPPER = -5.12, 5.12
PYGMO_POPULATION = 20
DEFAULTS = EngineConfig()   # mpievo runs with default settings (archive, batch)
#: like for like, per-individual fitness: mpievo's evaluations/s over pygmo's, at least (issue 32)
TARGET_RATIO = 1.1
#: batched numpy fitness: mpievo's evaluations/s over pygmo's per-individual run, at least
TARGET_BATCHED_RATIO = 2.0
#: batched fitness, float64: mpievo's time per evaluation outside the fitness, at most (µs)
TARGET_OVERHEAD_US = 0.5
#: the built-in float32 sphere: the same, at most (µs)
TARGET_OVERHEAD_F32_US = 0.3
VARIANTS = ("per_row", "batched", "numba_float32")


def sphere_row(x) -> float:
    """The sphere of one genome (the per-individual fitness both sides call)."""
    return float(np.dot(x, x))


def sphere_batch(genomes: np.ndarray) -> np.ndarray:
    """The sphere of each row of an (n, dim) batch."""
    return np.einsum("ij,ij->i", genomes, genomes)


def random_value(dim: int) -> float:
    """Expected sphere value of a uniform random genome in the box (the start level)."""
    return dim * (LOWER * LOWER + LOWER * UPPER + UPPER * UPPER) / 3.0


def _problem(variant: str, dim: int) -> tuple[Problem, EngineConfig]:
    if variant == "per_row":
        return Problem(sphere_row, dim, LOWER, UPPER, batched=False), EngineConfig(dtype="float64")
    if variant == "batched":
        return Problem(sphere_batch, dim, LOWER, UPPER), EngineConfig(dtype="float64")
    if variant == "numba_float32":
        return make_problem("sphere", dim), EngineConfig(dtype="float32")
    raise ValueError(f"expected a variant among {VARIANTS}, got {variant!r}")


def budget(evaluations: int) -> int:
    """``evaluations`` rounded up to whole generations of both sides."""
    step = math.lcm(DEFAULTS.batch_size, PYGMO_POPULATION)
    return max(1, math.ceil(evaluations / step)) * step


def mpievo_run(variant: str, dim: int, evaluations: int, seed: int = 0, *,
               config: EngineConfig | None = None) -> dict:
    """Time ``evaluations`` evaluations of one island after its (untimed) initial population;
    ``config`` replaces the variant's (default GA) settings.

    Returns:
        dict with seconds, cpu_seconds, evaluations, best.
    """
    problem, default = _problem(variant, dim)
    config = default if config is None else config
    Island(0, problem, config, seed=seed + 1).run(2)  # load the kernels outside the timing
    island = Island(0, problem, config, seed=seed)
    island.initialize()
    start = island.evaluations
    t0, c0 = time.perf_counter(), time.process_time()
    generation = 0
    while island.evaluations - start < evaluations:
        generation += 1
        island.step(generation)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "evaluations": island.evaluations - start,
            "best": island.best()[1]}


class _PygmoProblem:
    """A pygmo user-defined problem around a per-individual fitness."""

    def __init__(self, fitness, dim: int):
        self.fitness_function = fitness
        self.dim = dim

    def fitness(self, x):
        return [self.fitness_function(x)]

    def get_bounds(self):
        return ([LOWER] * self.dim, [UPPER] * self.dim)


def pygmo_run(dim: int, evaluations: int, seed: int = 0, **sade_options) -> dict | None:
    """pygmo's ``sade`` (population 20; its defaults, or ``sade_options``) on :func:`sphere_row`;
    None without pygmo.

    Returns:
        dict as :func:`mpievo_run`, or None when pygmo (the ``bench`` extra) is absent.
    """
    try:
        import pygmo
    except ImportError:
        return None
    pop = pygmo.population(pygmo.problem(_PygmoProblem(sphere_row, dim)), PYGMO_POPULATION, seed=seed)
    algo = pygmo.algorithm(pygmo.sade(gen=evaluations // PYGMO_POPULATION, seed=seed, **sade_options))
    start = pop.problem.get_fevals()
    t0, c0 = time.perf_counter(), time.process_time()
    pop = algo.evolve(pop)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "evaluations": pop.problem.get_fevals() - start,
            "best": float(pop.champion_f[0])}


def _seconds_per_call(call, min_seconds: float = 0.1) -> float:
    call()
    calls, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < min_seconds or calls < 3:
        call()
        calls += 1
    return elapsed / calls


def fitness_cost(variant: str, dim: int, seed: int = 0, *, rows: int | None = None) -> float:
    """Seconds per evaluation of the fitness alone, on a batch of mpievo's shape (``rows``
    rows; default the GA's batch) and the variant's dtype: one call per row (``per_row``)
    or one batched call."""
    problem, config = _problem(variant, dim)
    batch = config.batch_size if rows is None else rows
    genomes = np.random.default_rng(seed).uniform(LOWER, UPPER, (batch, dim)).astype(config.dtype)
    if problem.batched:
        return _seconds_per_call(lambda: problem.func(genomes)) / batch
    return _seconds_per_call(lambda: list(map(problem.func, genomes))) / batch


class _TimedFitness:
    """A fitness callable that adds the wall time spent inside it to ``seconds``."""

    def __init__(self, func):
        self.func = func
        self.seconds = 0.0

    def __call__(self, genomes):
        t0 = time.perf_counter()
        values = self.func(genomes)
        self.seconds += time.perf_counter() - t0
        return values


def overhead_split(dim: int, evaluations: int, seed: int = 0) -> dict:
    """Where the batched run's time per evaluation goes, in µs.

    ``ask`` (breeding: random stream, parent selection, draws, crossover and
    mutation), of which ``breed_kernel`` (the GA's compiled step alone -- selection,
    draws, crossover and mutation -- on the same archive and batch); ``evaluate_wrapper`` (Problem.evaluate around
    the fitness: shape/dtype checks); ``tell`` (step-size rule, archive merge);
    ``fitness`` (inside the user's function).
    """
    timed = _TimedFitness(sphere_batch)
    island = Island(0, Problem(timed, dim, LOWER, UPPER), EngineConfig(dtype="float64"), seed=seed)
    island.initialize()
    timed.seconds = 0.0
    ask = evaluate = tell = 0.0
    start, generation = island.evaluations, 0
    while island.evaluations - start < evaluations:
        generation += 1
        t0 = time.perf_counter()
        genomes = island.ask(generation)
        t1 = time.perf_counter()
        fitness = island.problem.evaluate(genomes)
        t2 = time.perf_counter()
        island.tell(fitness)
        tell += time.perf_counter() - t2
        ask, evaluate = ask + t1 - t0, evaluate + t2 - t1
    done = island.evaluations - start
    us = 1e6 / done
    return {"ask": ask * us, "breed_kernel": _breed_seconds(island) * 1e6,
            "evaluate_wrapper": (evaluate - timed.seconds) * us, "tell": tell * us,
            "fitness": timed.seconds * us}


def _breed_seconds(island: Island) -> float:
    """Seconds per child of the GA's compiled step (:mod:`mpievo.kernels.ga_step`) on the
    island's archive and settings, or of :func:`~mpievo.evo.operators.breed` (draws +
    fused kernel) where the island has none."""
    ga, archive = island.algorithm, island.archive
    n = island.config.batch_size
    if ga._step is not None:
        keys = StreamKeys(1, 0, 1)
        return _seconds_per_call(lambda: ga._step.breed(keys, ga._children, None)) / n
    lower, upper = box_arrays(island.problem.lower, island.problem.upper, archive.dtype)
    rng = np.random.default_rng(0)
    parents = rng.integers(0, archive.size, 2 * n)
    out = np.empty((n, archive.dim), archive.dtype)
    return _seconds_per_call(lambda: breed(archive.genomes, parents[:n], parents[n:], rng, lower, upper,
                                           out, rate=ga.rate, steps=ga.sigma, scale=upper - lower)) / n


def summarize(runs: list[dict], start_value: float) -> dict:
    """Medians of repeated runs of one side; ``sane``: every best below half ``start_value``."""
    seconds = statistics.median(r["seconds"] for r in runs)
    cpu = statistics.median(r["cpu_seconds"] for r in runs)
    evaluations = runs[0]["evaluations"]
    best = [r["best"] for r in runs]
    return {"evaluations": evaluations, "same_count": all(r["evaluations"] == evaluations for r in runs),
            "seconds": seconds, "evals_per_s": evaluations / seconds,
            "evals_per_cpu_s": evaluations / cpu, "us_per_eval": 1e6 * seconds / evaluations,
            "best": best, "sane": max(best) < start_value / 2}


def interleaved(variants, run, reference, dim: int, n: int, repeats: int, seed: int) -> tuple[dict, list]:
    """``repeats`` rounds of every variant's ``run`` then the ``reference`` (its None results
    dropped), so that machine noise hits every side alike; (variant -> runs, reference runs)."""
    runs, references = {v: [] for v in variants}, []
    for r in range(repeats):
        for variant in variants:
            runs[variant].append(run(variant, dim, n, seed + r))
        references.append(reference(dim, n, seed + r))
    return runs, [ref for ref in references if ref is not None]


def against(side: dict, pygmo: dict | None) -> dict:
    """A side's overhead per evaluation (given its fitness_us) and speed over pygmo's (or None)."""
    return {"overhead_us": side["us_per_eval"] - side["fitness_us"],
            "vs_pygmo": side["evals_per_s"] / pygmo["evals_per_s"] if pygmo else None,
            "vs_pygmo_cpu": side["evals_per_cpu_s"] / pygmo["evals_per_cpu_s"] if pygmo else None}


def side_line(s: dict, label: str) -> str:
    """One side's line: speed, best (checked) and, where known, overhead and ratio to pygmo."""
    verdict = "ok" if s["sane"] else "NOT below half the random value"
    text = (f"    {label}: {s['evals_per_s']:,.0f} evals/s, {s['us_per_eval']:.2f} µs/eval, "
            f"best {max(s['best']):.4g} ({verdict})")
    if "overhead_us" in s:
        text += f"; overhead {s['overhead_us']:.2f} µs/eval (fitness alone {s['fitness_us']:.2f})"
    if s.get("vs_pygmo") is not None:
        text += f"; {s['vs_pygmo']:.2f}x pygmo ({s['vs_pygmo_cpu']:.2f}x per CPU s)"
    return text


def compare(dim: int = 1000, evaluations: int = 128_000, repeats: int = 3, *,
            reference=pygmo_run, seed: int = 0) -> dict:
    """The three mpievo variants and the reference, interleaved (see the module docstring).

    Args:
        dim: genes.
        evaluations: budget per run (rounded up by :func:`budget`).
        repeats: runs per side (medians; seeds ``seed .. seed + repeats - 1``).
        reference: ``reference(dim, evaluations, seed) -> dict | None`` like
            :func:`pygmo_run` (the default); None results mean no reference.
        seed: first seed.

    Returns:
        dict with ``pygmo`` (:func:`summarize` or None), ``variants`` (one
        :func:`summarize` per variant plus fitness_us, overhead_us, vs_pygmo,
        vs_pygmo_cpu, like_for_like), ``split_us`` (:func:`overhead_split`) and
        ``targets``.
    """
    n = budget(evaluations)
    start_value = random_value(dim)
    runs, reference_runs = interleaved(VARIANTS, mpievo_run, reference, dim, n, repeats, seed)
    pygmo = summarize(reference_runs, start_value) if reference_runs else None
    variants = {}
    for variant in VARIANTS:
        variants[variant] = side = summarize(runs[variant], start_value)
        side["fitness_us"] = 1e6 * fitness_cost(variant, dim)
        side.update(against(side, pygmo))
        side["like_for_like"] = variant == "per_row"
    result = {"dim": dim, "evaluations": n, "repeats": repeats, "random_value": start_value,
              "pygmo": pygmo, "variants": variants, "split_us": overhead_split(dim, n, seed)}
    result["targets"] = targets(result)
    return result


def targets(result: dict) -> dict:
    """The issue's targets, each with its number and ``met`` (None: not measurable)."""
    variants = result["variants"]

    def at_least(value, target):
        return {"value": value, "target": target, "met": None if value is None else value >= target}

    def at_most(value, target):
        return {"value": value, "target": target, "met": value <= target}

    return {
        "per_row_vs_pygmo": at_least(variants["per_row"]["vs_pygmo"], TARGET_RATIO),
        "batched_vs_pygmo": at_least(variants["batched"]["vs_pygmo"], TARGET_BATCHED_RATIO),
        "batched_overhead_us": at_most(variants["batched"]["overhead_us"], TARGET_OVERHEAD_US),
        "float32_overhead_us": at_most(variants["numba_float32"]["overhead_us"], TARGET_OVERHEAD_F32_US),
    }


def format_lines(result: dict) -> list[str]:
    """Human-readable lines for a :func:`compare` result."""
    def verdict(t, unit):
        met = {True: "met", False: "MISSED", None: "n/a (no pygmo)"}[t["met"]]
        value = "n/a" if t["value"] is None else f"{t['value']:.2f}{unit}"
        return f"{met} ({value})"

    v, t, split = result["variants"], result["targets"], result["split_us"]
    pygmo = result["pygmo"]
    return [
        f"  sphere {result['dim']}-D, float64 genomes, {result['evaluations']:,} evaluations per run after "
        f"the initial population, median of {result['repeats']} (random genome: {result['random_value']:.5g})",
        f"    mpievo: GA, archive {DEFAULTS.capacity}, {DEFAULTS.batch_size} children evaluated per generation; "
        f"pygmo: sade, population {PYGMO_POPULATION}, {PYGMO_POPULATION} trial vectors per generation",
        side_line(pygmo, f"pygmo sade (pop {PYGMO_POPULATION}), per-individual f(x)") if pygmo else
        "    pygmo sade: not installed (pip install 'mpievo[bench]')",
        side_line(v["per_row"], "(a) mpievo GA, same per-individual f(x)"),
        side_line(v["batched"], "(b) mpievo GA, batched numpy F(X) [pygmo has no batch call: vs its (a)]"),
        side_line(v["numba_float32"], "(c) NOT like for like: mpievo built-in float32 sphere (Numba kernel)"),
        f"    targets: per-individual >= {TARGET_RATIO:g}x pygmo: {verdict(t['per_row_vs_pygmo'], 'x')}; "
        f"batched >= {TARGET_BATCHED_RATIO:g}x pygmo: {verdict(t['batched_vs_pygmo'], 'x')}; "
        f"batched overhead <= {TARGET_OVERHEAD_US:g} µs/eval: {verdict(t['batched_overhead_us'], ' µs')}; "
        f"float32 overhead <= {TARGET_OVERHEAD_F32_US:g} µs/eval: {verdict(t['float32_overhead_us'], ' µs')}",
        f"    batched overhead split (µs/eval): breeding {split['ask']:.2f} (compiled step: selection, draws, "
        f"crossover/mutation alone {split['breed_kernel']:.2f}), evaluate wrapper {split['evaluate_wrapper']:.2f}, "
        f"archive merge and step size {split['tell']:.2f}; fitness {split['fitness']:.2f}",
    ]


def command_line(argv, description: str, compare, format_lines, evaluations: int) -> int:
    """A comparison's command line (``--dim``, ``--evaluations``, ``--repeats``,
    ``--json``): prints :func:`compare`'s lines and writes its result as JSON."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--evaluations", type=int, default=evaluations)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", dest="json_path", default=None, help="write the result here")
    args = parser.parse_args(argv)
    result = compare(args.dim, args.evaluations, args.repeats)
    print("\n".join(format_lines(result)))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line: prints the comparison (and writes it as JSON with ``--json``)."""
    return command_line(argv, __doc__.split("\n")[0], compare, format_lines, 128_000)



# --- breeding large genomes (issue 10) -------------------------------------------

def _memcpy_gbs(nbytes: int, repeats: int) -> float:
    """numpy's single-core copy bandwidth on ``nbytes`` (best of ``repeats``), GB/s."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    seconds = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    return nbytes / seconds / 1e9


def _timed(call) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def breeding_throughput(dim: int, batch: int = 8, dtype="float32", *, capacity: int = 8,
                        rate: float = 1.0, threads: int = 1, repeats: int = 3, seed: int = 0) -> dict:
    """GB/s of child genome that :func:`~mpievo.evo.operators.breed` writes per core.

    Breeds ``batch`` children of ``dim`` genes from an archive of ``capacity`` random
    genomes (interpolation, Gaussian mutation of each gene with probability ``rate``,
    clip) on ``threads`` Numba threads, best of ``repeats`` after an untimed call;
    from :data:`~mpievo.evo.operators.COUNTER_DIM` genes on this is the counter-based
    kernel. Against numpy's single-core memcpy bandwidth on the same bytes, measured
    in the same run.

    Returns:
        dict with dim, batch, dtype, rate, threads, seconds (per batch), ns_per_gene
        (per core), gbs_per_core, memcpy_gbs, vs_memcpy.
    """
    import numba

    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    archive = rng.uniform(LOWER, UPPER, (capacity, dim)).astype(dtype)
    out = np.empty((batch, dim), dtype)
    lower, upper = box_arrays(np.full(dim, LOWER), np.full(dim, UPPER), dtype)
    scale = upper - lower
    parents = rng.integers(0, capacity, 2 * batch)

    def call():
        breed(archive, parents[:batch], parents[batch:], rng, lower, upper, out, rate=rate, steps=1e-3,
              scale=scale)

    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        call()
        seconds = min(_timed(call) for _ in range(repeats))
    finally:
        numba.set_num_threads(previous)
    nbytes = out.nbytes
    memcpy = _memcpy_gbs(nbytes, repeats)
    per_core = nbytes / seconds / threads / 1e9
    return {"dim": dim, "batch": batch, "dtype": dtype.name, "rate": rate, "threads": threads,
            "seconds": seconds, "ns_per_gene": 1e9 * seconds * threads / out.size,
            "gbs_per_core": per_core, "memcpy_gbs": memcpy, "vs_memcpy": per_core / memcpy}


_PEAK_SCRIPT = """
import json, sys
import numpy as np
from mpievo.evo.engine_config import EngineConfig
from mpievo.evo.island import Island
from mpievo.evo.operators import COUNTER_DIM
from mpievo.evo.problems import make_problem

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

dim, capacity, batch, generations, dtype = json.loads(sys.argv[1])
config = EngineConfig(capacity=capacity, batch_size=batch, dtype=dtype)
Island(0, make_problem("sphere", max(COUNTER_DIM, 2)), config).run(2)  # compile outside the peak
problem = make_problem("sphere", dim)

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS

base = status("VmRSS")
reset_peak()
island = Island(0, problem, config, seed=1)
island.initialize()
init_peak = status("VmHWM")
reset_peak()
island.run(generations)
print(json.dumps({"base": base, "init_peak": init_peak, "generations_peak": status("VmHWM")}))
"""


def island_peak_memory(dim: int = 10_000_000, capacity: int = 8, batch: int = 8,
                       generations: int = 3, dtype="float32") -> dict:
    """Peak resident memory of one GA island on the built-in sphere, in a fresh Python
    process (Linux: /proc VmHWM): during its initialisation and during ``generations``
    generations after it.

    ``base`` is the process's resident memory just before the island (interpreter,
    compiled kernels, the problem's float64 box); ``data`` the archive plus the batch
    (``(capacity + batch) * dim`` genes). The issue's target: ``ratio = peak / (data +
    base) <= 1.25`` for the whole run (the larger of the two peaks).
    """
    import subprocess
    import sys

    args = json.dumps([dim, capacity, batch, generations, str(np.dtype(dtype))])
    done = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, args], capture_output=True, text=True,
                          check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    data = (capacity + batch) * dim * np.dtype(dtype).itemsize
    peaks = {"init_peak_bytes": result["init_peak"], "generations_peak_bytes": result["generations_peak"]}
    peak = max(peaks.values())
    return {"dim": dim, "capacity": capacity, "batch": batch, "generations": generations,
            "base_bytes": result["base"], "data_bytes": data, **peaks, "peak_bytes": peak,
            "ratio": peak / (data + result["base"]),
            "generations_ratio": result["generations_peak"] / (data + result["base"])}


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
