"""One jDE island against pygmo's jDE (``sade``), algorithm for algorithm.

The same fitness callable, dtype, dim, population and evaluation count on both sides.

mpievo: one island with ``EngineConfig(algorithm="de", de_population=20, population=20,
dtype="float64", bounds="resample")`` (:class:`mpievo.evo.algorithms.de.JDE`). pygmo:
``sade(gen=budget // 20, variant=7, variant_adptv=1, ftol=0, xtol=0, memory=False)``
on a population of 20 -- variant 7 is DE/rand/1/bin and adaptation 1 jDE (its help's
tables; the C++ accepts adaptations 1 and 2 only, though the help's ``Raises`` line says
[0, 1]). Both are float64, minimise the 1000-D sphere in [-5.12, 5.12]^dim and
start from 20 uniform random genomes evaluated before the clock starts.

The same on both sides: DE/rand/1/bin on a synchronous generation (the trials are
built from the previous generation's population); each member's own F and CR, each
renewed with probability 0.1 per trial (tau_f = tau_cr = 0.1), F to U(0.1, 1) and CR
to U(0, 1); binomial crossover with one gene always taken from the mutant; a trial
replaces its target when not worse (``<=``) and then passes on its F and CR; genes
outside the box redrawn uniformly in it (pygmo's only rule; mpievo's ``resample``,
where its default is ``clip``).

What differs:

* initial F and CR: mpievo starts every member at F = 0.5, CR = 0.9 (Brest et al.'s
  values); pygmo draws them, F from U(0.1, 1) and CR from U(0, 1), at each ``evolve``
  (``memory=False``; one ``evolve`` per run here);
* partners: mpievo draws r1, r2, r3 distinct and different from the target (as in
  Brest et al.); pygmo draws them distinct among the whole population, the target
  included;
* mpievo's island also keeps its archive (64 members: the elite memory that
  migration and results read) and merges each generation's 20 trials into it; that
  is part of mpievo's time. Both report the best genome ever evaluated;
* random streams (mpievo's counter-based Philox against pygmo's Mersenne twister): the runs
  are not the same trajectories, only the same algorithm;
* pygmo evaluates each trial as soon as it is built (a Python call through pybind11);
  mpievo builds the generation's 20 trials, then evaluates them (one call per row, or
  one batched call).

pygmo's stop tests compare with ``<``: with ftol = xtol = 0 they never end a run
early, and both sides' evaluation counts are checked equal anyway.

Two mpievo runs, each timed against the same pygmo run, interleaved:

(a) ``per_row``: :func:`~mpievo.bench.engine_vs_pygmo.sphere_row` as a non-batched
    :class:`~mpievo.evo.problems.Problem` (called row by row), pygmo's problem calling
    the same function. The like-for-like comparison.
(b) ``batched``: :func:`~mpievo.bench.engine_vs_pygmo.sphere_batch` (one numpy call per
    generation of 20 rows); pygmo has no batch call, so its side stays (a).

Overhead per evaluation: mpievo's seconds per evaluation minus the fitness's own on a
batch of 20 float64 rows (one call per row, or one batched call).

Run: ``python -m mpievo.bench.de_vs_pygmo --dim 1000 --evaluations 20000 --repeats 3``.
"""

from __future__ import annotations

import math

from ..evo.engine_config import EngineConfig
from .engine_vs_pygmo import (PYGMO_POPULATION, against, command_line, fitness_cost, interleaved, mpievo_run,
                              pygmo_run, random_value, side_line, summarize)

POPULATION = PYGMO_POPULATION   # 20 on both sides
#: mpievo's side: jDE (DE/rand/1/bin), population 20, starting from 20 random genomes
CONFIG = EngineConfig(algorithm="de", de_population=POPULATION, population=POPULATION, dtype="float64",
                      bounds="resample")
#: pygmo's side: ``sade`` variant 7 (rand/1/bin), adaptation 1 (jDE), no early stop
SADE_OPTIONS = {"variant": 7, "variant_adptv": 1, "ftol": 0.0, "xtol": 0.0, "memory": False}
VARIANTS = ("per_row", "batched")


def budget(evaluations: int) -> int:
    """``evaluations`` rounded up to whole generations of both sides (20 trials each)."""
    step = math.lcm(CONFIG.de_population, POPULATION)
    return max(1, math.ceil(evaluations / step)) * step


def mpievo_de_run(variant: str, dim: int, evaluations: int, seed: int = 0) -> dict:
    """:func:`~mpievo.bench.engine_vs_pygmo.mpievo_run` with the jDE island of :data:`CONFIG`."""
    return mpievo_run(variant, dim, evaluations, seed, config=CONFIG)


def pygmo_jde_run(dim: int, evaluations: int, seed: int = 0) -> dict | None:
    """pygmo's jDE (:data:`SADE_OPTIONS`, population 20) on the per-row sphere; None without pygmo."""
    return pygmo_run(dim, evaluations, seed, **SADE_OPTIONS)


def compare(dim: int = 1000, evaluations: int = 20_000, repeats: int = 3, *,
            reference=pygmo_jde_run, seed: int = 0) -> dict:
    """Both mpievo variants and the reference, interleaved (see the module docstring).

    Args:
        dim: genes.
        evaluations: budget per run (rounded up by :func:`budget`).
        repeats: runs per side (medians; seeds ``seed .. seed + repeats - 1``).
        reference: ``reference(dim, evaluations, seed) -> dict | None`` like
            :func:`pygmo_jde_run` (the default); None results mean no reference.
        seed: first seed.

    Returns:
        dict with dim, dtype, population, evaluations, repeats, random_value, ``pygmo``
        (:func:`~mpievo.bench.engine_vs_pygmo.summarize` or None), ``variants`` (one
        summary per variant plus fitness_us, overhead_us, vs_pygmo, vs_pygmo_cpu -- ratios
        of medians -- the per-repeat ratios vs_pygmo_runs and vs_pygmo_cpu_runs, and
        like_for_like) and ``same_budget`` (every run of every side evaluated the budget).
    """
    n = budget(evaluations)
    start_value = random_value(dim)
    runs, reference_runs = interleaved(VARIANTS, mpievo_de_run, reference, dim, n, repeats, seed)
    pygmo = summarize(reference_runs, start_value) if reference_runs else None
    variants = {}
    for variant in VARIANTS:
        variants[variant] = side = summarize(runs[variant], start_value)
        side["fitness_us"] = 1e6 * fitness_cost(variant, dim, rows=POPULATION)
        side.update(against(side, pygmo))
        paired = list(zip(reference_runs, runs[variant])) if pygmo else []
        side["vs_pygmo_runs"] = [p["seconds"] / m["seconds"] for p, m in paired]
        side["vs_pygmo_cpu_runs"] = [p["cpu_seconds"] / m["cpu_seconds"] for p, m in paired]
        side["like_for_like"] = variant == "per_row"
    sides = [*variants.values(), *([pygmo] if pygmo else [])]
    return {"dim": dim, "dtype": CONFIG.dtype, "population": POPULATION, "evaluations": n,
            "repeats": repeats, "random_value": start_value, "pygmo": pygmo, "variants": variants,
            "same_budget": all(s["evaluations"] == n and s["same_count"] for s in sides)}


def format_lines(result: dict) -> list[str]:
    """Human-readable lines for a :func:`compare` result."""
    v, pygmo, p = result["variants"], result["pygmo"], result["population"]
    lines = [
        f"  sphere {result['dim']}-D, {result['dtype']} genomes, {result['evaluations']:,} evaluations per run "
        f"after the initial population, median of {result['repeats']} (random genome: "
        f"{result['random_value']:.5g})" + ("" if result["same_budget"] else "; EVALUATION COUNTS DIFFER"),
        f"    both: jDE, DE/rand/1/bin, population {p}, tau_f = tau_cr = 0.1, F in U(0.1, 1), CR in U(0, 1), "
        f"out-of-box genes redrawn; pygmo: sade variant 7, variant_adptv 1",
        side_line(pygmo, f"pygmo jDE (pop {p}), per-individual f(x)") if pygmo else
        "    pygmo jDE: not installed (pip install 'mpievo[bench]')",
        side_line(v["per_row"], f"(a) mpievo jDE (pop {p}), same per-individual f(x)"),
        side_line(v["batched"], "(b) mpievo jDE, batched numpy F(X) [pygmo has no batch call: vs its (a)]"),
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Command line: prints the comparison (and writes it as JSON with ``--json``)."""
    return command_line(argv, __doc__.split("\n")[0], compare, format_lines, 20_000)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
