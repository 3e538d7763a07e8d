"""``mpievo bench es``: mpievo's ES against EvoX's OpenES, and the bytes ES sends between ranks.

``quality`` -- like for like, one process each, on a shifted sphere of ``--dim`` genes
(``sum((x - s)^2)``, float32, every start ``x0`` uniform in [-5, 5] and ``s`` uniform in
[-4, 4], drawn from the seed; no box): the same population, sigma, learning rate, Adam
and evaluation budget, antithetic pairs on both sides. mpievo: one ``es`` island,
three rows: as EvoX's OpenES (``es_shaping = "none"``, the raw fitness, and
``es_adam_bias_correction = false``), with bias correction (mpievo's default, OpenAI's
ES code), and mpievo's default ``centered_ranks`` shaping. EvoX: ``OpenES(optimizer="adam",
mirrored_sampling=True)`` in a ``StdWorkflow``, run by ``--evox-python`` (a separate
environment: mpievo does not depend on EvoX). Printed per solver: the fitness of the
mean after each tenth of the budget (median over the seeds), evaluations/s (the
generations' wall time only; the mean's fitness is measured with the clock stopped) and
evaluations per CPU second of the process (``time.process_time``, one thread each: what
a loaded machine's time slicing does not change), with the seeds' ranges.

What differs: the noise (mpievo's counter-based Philox rebuilt from the key, EvoX's torch
``randn`` matrix); mpievo's island also keeps its archive of members.

``finetune`` -- the same comparison fine-tuning the GPT-2 base of
``examples/merge_transformers`` on one of its tasks: :mod:`mpievo.bench.es_finetune`.

``bytes`` -- :class:`mpievo.parallel.es_group.SeededES` runs one generation on 2 ranks
(``mpievo launch -n 2``) at each ``--bytes-dims`` size and prints the bytes the ranks
sent (``comm.traffic``, all ranks summed): the ``popsize`` float64 fitness values, the
same at 1e5 and 1e8 genes.

``lowrank`` -- a GPT-2 of about 10 M parameters built from a config (no download),
population 32, rank 4, one sequence of 32 tokens per member, on the CPU: the
population's losses from one batched forward pass
(:class:`mpievo.torch.lowrank.LowRankPopulation`) against materialising each member's
perturbation into the model, running it, and taking it out again, and plain batched
inference of the unperturbed model (the ceiling); evaluations/s of each (the fastest of
``--repeats``) and whether the first two give the same losses.

``scale`` -- SeededES on 1 and ``--ranks`` ranks with a fitness that sleeps ``--cost-ms``
(the evaluation dominates; sleeping, not burning, so that a shared machine's other
work does not decide it): evaluations/s of each and their ratio.

Example: ``mpievo bench es quality --evox-python /tmp/evox-venv/bin/python``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: the EvoX side, run by another interpreter; JSON in on stdin, JSON out on stdout
EVOX_SCRIPT = r"""
import json, sys, time
import torch
from evox.algorithms import OpenES
from evox.core import Problem
from evox.workflows import StdWorkflow
spec = json.load(sys.stdin)
torch.manual_seed(spec["seed"])
torch.set_num_threads(1)
shift = torch.tensor(spec["shift"], dtype=torch.float32)
def f(x):
    return ((x - shift) ** 2).sum(dim=-1)
class Sphere(Problem):
    def evaluate(self, pop):
        return f(pop)
algo = OpenES(spec["popsize"], torch.tensor(spec["x0"], dtype=torch.float32), spec["lr"], spec["sigma"],
              optimizer="adam", mirrored_sampling=True)
workflow = StdWorkflow(algo, Sphere())
generations, checkpoints = spec["generations"], spec["checkpoints"]
curve, elapsed, cpu = [], 0.0, 0.0
for g in range(1, generations + 1):
    start, start_cpu = time.perf_counter(), time.process_time()
    workflow.init_step() if g == 1 else workflow.step()
    elapsed += time.perf_counter() - start
    cpu += time.process_time() - start_cpu
    if g in checkpoints:
        curve.append(float(f(algo.center)))
print(json.dumps({"curve": curve, "seconds": elapsed, "cpu_seconds": cpu}))
"""


def problem_data(dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x0, shift) of a seed, float32."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-5, 5, dim).astype(np.float32), rng.uniform(-4, 4, dim).astype(np.float32)


def run_mpievo(dim, seed, popsize, sigma, lr, generations, checkpoints, shaping, bias_correction=True) -> dict:
    """One ``es`` island on the shifted sphere; the mean's fitness at ``checkpoints``."""
    from mpievo.evo import EngineConfig, Island, Problem

    x0, shift = problem_data(dim, seed)

    def sphere(genomes):
        d = np.asarray(genomes, np.float32) - shift
        return np.einsum("ij,ij->i", d, d)

    problem = Problem(sphere, dim, -1e4, 1e4, name="sphere", initial=lambda rng, n: np.tile(x0, (n, 1)))
    config = EngineConfig(algorithm="es", population=2, capacity=2, es_popsize=popsize, es_sigma=sigma,
                          es_learning_rate=lr, es_shaping=shaping, es_adam_bias_correction=bias_correction)
    island = Island(0, problem, config, seed=seed)
    island.initialize()
    curve, elapsed, cpu = [], 0.0, 0.0
    for g in range(1, generations + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        island.step(g)
        elapsed += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        if g in checkpoints:
            curve.append(float(sphere(island.algorithm.mean[None])[0]))
    return {"curve": curve, "seconds": elapsed, "cpu_seconds": cpu}


def run_evox(python: str, dim, seed, popsize, sigma, lr, generations, checkpoints) -> dict:
    """EvoX's OpenES on the same problem, in ``python`` (a subprocess)."""
    x0, shift = problem_data(dim, seed)
    spec = {"seed": seed, "x0": x0.tolist(), "shift": shift.tolist(), "popsize": popsize, "sigma": sigma,
            "lr": lr, "generations": generations, "checkpoints": sorted(checkpoints)}
    done = subprocess.run([python, "-c", EVOX_SCRIPT], input=json.dumps(spec), capture_output=True, text=True,
                          timeout=3600)
    if done.returncode:
        raise RuntimeError(f"EvoX side: expected exit 0, got {done.returncode}: {done.stderr[-2000:]}")
    return _last_json(done.stdout)


def _last_json(stdout: str) -> dict:
    """The last line of ``stdout`` that is a JSON object (a launcher may print after it)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"expected a JSON line from the worker, got {stdout[-500:]!r}")
    return json.loads(lines[-1])


def quality(options) -> list[dict]:
    """Every solver on every seed; prints the median curve and evaluations/s."""
    generations = options.budget // options.popsize
    checkpoints = {max(1, generations * k // 10) for k in range(1, 11)}
    solvers = {"mpievo es (as EvoX)": lambda s: run_mpievo(
        options.dim, s, options.popsize, options.sigma, options.lr, generations, checkpoints, "none", False),
        "mpievo es (raw fitness)": lambda s: run_mpievo(
        options.dim, s, options.popsize, options.sigma, options.lr, generations, checkpoints, "none"),
        "mpievo es (centred ranks)": lambda s: run_mpievo(
        options.dim, s, options.popsize, options.sigma, options.lr, generations, checkpoints, "centered_ranks")}
    if options.evox_python:
        solvers["evox OpenES"] = lambda s: run_evox(options.evox_python, options.dim, s, options.popsize,
                                                    options.sigma, options.lr, generations, checkpoints)
    run_mpievo(options.dim, 0, options.popsize, options.sigma, options.lr, 2, {2}, "none")   # compile first
    rows = []
    for seed in options.seeds:
        for name, solve in solvers.items():      # solvers take turns on each seed
            result = solve(seed)
            rows.append({"solver": name, "seed": seed, **result,
                         "evaluations_per_s": generations * options.popsize / result["seconds"],
                         "evaluations_per_cpu_s": generations * options.popsize / result["cpu_seconds"]})
    print(f"shifted sphere, dim {options.dim}, popsize {options.popsize}, sigma {options.sigma}, lr {options.lr}, "
          f"Adam, budget {generations * options.popsize} evaluations, seeds {list(options.seeds)} (medians)")
    marks = sorted(checkpoints)
    print(f"{'solver':34s} " + " ".join(f"{m * options.popsize:>9d}" for m in marks) + "   evals/s"
          + " per CPU s   (seeds' range: final fitness; evals/s; per CPU s)")
    for name in solvers:
        mine = [r for r in rows if r["solver"] == name]
        curve = [statistics.median(r["curve"][i] for r in mine) for i in range(len(marks))]
        speeds = [r["evaluations_per_s"] for r in mine]
        cpu = [r["evaluations_per_cpu_s"] for r in mine]
        finals = [r["curve"][-1] for r in mine]
        print(f"{name:34s} " + " ".join(f"{v:9.3g}" for v in curve) + f"   {statistics.median(speeds):7.0f}"
              f" {statistics.median(cpu):9.0f}   ({min(finals):.3g}-{max(finals):.3g}; {min(speeds):.0f}-"
              f"{max(speeds):.0f}; {min(cpu):.0f}-{max(cpu):.0f})")
    if "evox OpenES" in solvers:
        for name in solvers:
            if name != "evox OpenES":
                print(paired_line(rows, name, "evox OpenES"))
    return rows


def paired(rows: list[dict], solver: str, other: str) -> dict:
    """Final fitness of ``solver`` against ``other`` seed by seed (same problem, same
    settings): the geometric mean of the ratios with a 95 % interval (normal, on the logs),
    their median and range, and on how many seeds ``solver`` ended lower.

    Example::

        paired(rows, "mpievo es (as EvoX)", "evox OpenES")["ratio"]     # < 1: mpievo lower
    """
    final = {(r["solver"], r["seed"]): r["curve"][-1] for r in rows}
    seeds = sorted(s for (name, s) in final if name == solver and (other, s) in final)
    logs = [float(np.log(final[solver, s] / final[other, s])) for s in seeds]
    if not logs:
        raise ValueError(f"expected seeds run by both {solver!r} and {other!r}, got none")
    mean = statistics.fmean(logs)
    half = 1.96 * statistics.stdev(logs) / len(logs) ** 0.5 if len(logs) > 1 else float("inf")
    ratios = np.exp(logs)
    return {"seeds": len(logs), "ratio": float(np.exp(mean)), "low": float(np.exp(mean - half)),
            "high": float(np.exp(mean + half)), "median": float(np.median(ratios)), "min": float(ratios.min()),
            "max": float(ratios.max()), "lower": int(sum(x < 0 for x in logs))}


def paired_line(rows: list[dict], solver: str, other: str) -> str:
    """:func:`paired` as one printed line.

    Example::

        print(paired_line(rows, "mpievo es (as EvoX)", "evox OpenES"))
    """
    p = paired(rows, solver, other)
    return (f"{solver} / {other}, final fitness seed by seed ({p['seeds']} seeds): geometric mean "
            f"{p['ratio']:.2f} (95 % interval {p['low']:.2f}-{p['high']:.2f}), median {p['median']:.2f} "
            f"(range {p['min']:.2f}-{p['max']:.2f}); lower on {p['lower']} of {p['seeds']}")


# ------------------------------------------------------------------- bytes on the wire
def bytes_worker(dim: int, popsize: int) -> None:
    """Launched on several ranks: one SeededES generation; rank 0 prints the bytes sent."""
    from mpievo.comm import Communicator
    from mpievo.evo.algorithms.es import ES
    from mpievo.parallel.es_group import SeededES

    comm = Communicator()
    es = ES(popsize=popsize, sigma=1e-3, learning_rate=5e-4, optimizer="sgd", momentum=0.0, shaping="zscore")
    run = SeededES(comm, lambda row: float(row[0]), np.zeros(dim, np.float32), es, seed=0)
    start = time.perf_counter()
    run.step()
    seconds = time.perf_counter() - start
    sent = comm.allgather_object(int(comm.traffic.get("es", 0)))
    if comm.rank == 0:
        print(json.dumps({"dim": dim, "popsize": popsize, "ranks": comm.size, "bytes": sum(sent),
                          "seconds": seconds}))


def scale_worker(dim: int, popsize: int, cost_ms: float, generations: int) -> None:
    """Launched on several ranks: SeededES with a fitness that sleeps ``cost_ms`` (the
    evaluation dominates); rank 0 prints evaluations/s and its CPU seconds per generation
    (the noise, the update and the all-gather: what the sleeping leaves)."""
    from mpievo.evo.algorithms.es import ES
    from mpievo.parallel.es_group import SeededES
    from mpievo.parallel.world import world_comm

    def fitness(row):
        time.sleep(cost_ms / 1000)
        return float(row[0])

    comm = world_comm()
    run = SeededES(comm, fitness, np.zeros(dim, np.float32), ES(popsize=popsize), seed=0)
    run.es.popsize, saved = 2, run.es.popsize          # one tiny generation compiles the kernels
    run.step()
    run.es.popsize = saved
    start, cpu = time.perf_counter(), time.process_time()
    run.run(generations)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "evaluations_per_s": generations * popsize / seconds,
                          "seconds_per_generation": seconds / generations, "cpu_per_generation": cpu / generations}))


def scale(options) -> list[dict]:
    """Evaluations/s of SeededES on 1 and ``options.ranks`` ranks, the evaluation dominating:
    ``options.repeats`` rounds, the two taking turns; prints each round's ratio and their median."""
    from ..launcher import launch_command, launch_env

    rows, ratios = [], []
    for _ in range(options.repeats):
        speeds = []
        for ranks in (1, options.ranks):
            cmd = launch_command(ranks, ["python", "-m", "mpievo.bench.es", "scale-worker", "--dim",
                                         str(options.dim), "--popsize", str(options.popsize), "--cost-ms",
                                         str(options.cost_ms)])
            done = subprocess.run(cmd, env=launch_env(), capture_output=True, text=True, timeout=3600)
            if done.returncode:
                raise RuntimeError(f"scale worker on {ranks} ranks: exit {done.returncode}: {done.stderr[-2000:]}")
            rows.append(_last_json(done.stdout))
            speeds.append(rows[-1]["evaluations_per_s"])
        ratios.append(speeds[1] / speeds[0])
        cpu = [f"{1000 * row['cpu_per_generation']:.0f}" for row in rows[-2:]]
        print(f"SeededES, {options.dim} genes, popsize {options.popsize}, {options.cost_ms} ms per evaluation: "
              f"{speeds[0]:.1f} evaluations/s on 1 rank, {speeds[1]:.1f} on {options.ranks}: {ratios[-1]:.2f}x "
              f"(rank 0's CPU ms per generation: {cpu[0]} and {cpu[1]})")
    print(f"median ratio {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}, "
          f"{len(ratios)} rounds)")
    return rows


def wire_bytes(options) -> list[dict]:
    """Bytes per generation between ranks at each size, measured on ``options.ranks`` ranks."""
    from ..launcher import launch_command, launch_env

    rows = []
    for dim in options.bytes_dims:
        cmd = launch_command(options.ranks, ["python", "-m", "mpievo.bench.es", "bytes-worker",
                                             "--dim", str(dim), "--popsize", str(options.bytes_popsize)])
        done = subprocess.run(cmd, env=launch_env(), capture_output=True, text=True, timeout=3600)
        if done.returncode:
            raise RuntimeError(f"bytes worker at {dim} genes: exit {done.returncode}: {done.stderr[-2000:]}")
        row = _last_json(done.stdout)
        rows.append(row)
        print(f"{row['dim']:>12,d} genes, popsize {row['popsize']}, {row['ranks']} ranks: {row['bytes']} bytes "
              f"sent per generation (all ranks), genome {4 * row['dim']:,d} bytes; generation {row['seconds']:.1f} s")
    return rows


# ------------------------------------------------------------------- low-rank population
def lowrank(options) -> dict:
    """Evaluations/s of a low-rank population in one batched forward pass against
    materialising each member into the model and running it alone (same tokens per member)."""
    import torch

    from ..torch.lowrank import LowRankPopulation
    from .models import build_model, fastest

    torch.set_num_threads(options.threads)
    model = build_model(options.layers, options.width)
    params = sum(p.numel() for p in model.parameters())
    population = LowRankPopulation(model, popsize=options.popsize, rank=options.rank, sigma=1e-3)
    tokens = torch.randint(0, 256, (1, options.tokens), generator=torch.Generator().manual_seed(0))
    stacked = tokens.repeat(options.popsize, 1)

    def loss(logits, rows):
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 rows[:, 1:].reshape(-1), reduction="none").view(len(rows), -1)

    @torch.no_grad()
    def batched():
        with population.generation(1):
            return loss(model(stacked).logits, stacked).mean(dim=1)

    @torch.no_grad()
    def plain():             # batched inference of the base model alone: the ceiling
        return loss(model(stacked).logits, stacked).mean(dim=1)

    @torch.no_grad()
    def one_by_one():
        noise = population.noise(1)
        out = []
        for member in range(options.popsize):
            deltas = population.member_deltas(member, noise)
            for (_, module), delta in zip(population.modules, deltas):
                for key, value in delta.items():
                    getattr(module, key).add_(value)
            out.append(loss(model(tokens).logits, tokens).mean())
            for (_, module), delta in zip(population.modules, deltas):
                for key, value in delta.items():
                    getattr(module, key).sub_(value)
        return torch.stack(out)

    close = torch.allclose(batched(), one_by_one(), rtol=1e-3, atol=1e-3)
    low, dense, base = fastest(batched, one_by_one, plain, repeats=options.repeats)
    cpu = fastest(batched, one_by_one, plain, repeats=options.repeats, clock=time.process_time)
    row = {"parameters": params, "popsize": options.popsize, "rank": options.rank, "tokens": options.tokens,
           "threads": options.threads, "lowrank_evals_per_s": options.popsize / low,
           "materialise_evals_per_s": options.popsize / dense, "ratio": dense / low, "same_fitness": close,
           "plain_batched_evals_per_s": options.popsize / base, "cpu_seconds": cpu}
    print(f"GPT-2 {params / 1e6:.1f} M parameters ({options.layers} x {options.width}), population "
          f"{options.popsize}, rank {options.rank}, {options.tokens} tokens per member, {options.threads} "
          f"thread(s), fastest of {options.repeats}:")
    print(f"  low-rank batched forward:  {row['lowrank_evals_per_s']:8.1f} evaluations/s")
    print(f"  materialise then forward:  {row['materialise_evals_per_s']:8.1f} evaluations/s")
    print(f"  plain batched inference:   {row['plain_batched_evals_per_s']:8.1f} evaluations/s (no perturbation)")
    print(f"  ratio {row['ratio']:.2f}x; low-rank at {base / low:.0%} of plain batched inference; the same "
          f"fitness (rtol 1e-3): {close}")
    print(f"  in CPU time (fastest of {options.repeats}): ratio {cpu[1] / cpu[0]:.2f}x; low-rank at "
          f"{cpu[2] / cpu[0]:.0%} of plain batched inference")
    return row



def _ints(text: str) -> list[int]:
    return [int(float(t)) for t in text.split(",") if t.strip()]


def main(argv=None) -> int:
    """``mpievo bench es {quality,finetune,bytes,lowrank,scale}``; returns the exit status.

    Example::

        main(["quality", "--budget", "2000", "--seeds", "0"])
    """
    parser = argparse.ArgumentParser(prog="mpievo bench es", description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("quality", "finetune", "bytes", "lowrank", "scale", "bytes-worker",
                                         "scale-worker"))
    parser.add_argument("--dim", type=int, default=1000, help="quality: genes (default 1000)")
    parser.add_argument("--popsize", type=int, default=None,
                        help="members per generation (default: quality 50, finetune 30, lowrank 32)")
    parser.add_argument("--sigma", type=float, default=None,
                        help="quality, finetune: noise deviation (default 0.1, finetune 1e-3)")
    parser.add_argument("--lr", type=float, default=None,
                        help="quality, finetune: Adam learning rate (default 0.05, finetune 2e-3)")
    parser.add_argument("--budget", type=int, default=50_000, help="quality: evaluations per run (default 50000)")
    parser.add_argument("--seeds", type=_ints, default=[0, 1, 2], help="quality, finetune: seeds (default 0,1,2)")
    parser.add_argument("--evox-python", default=None, help="quality, finetune: the interpreter with evox installed")
    parser.add_argument("--task", default="sort", help="finetune: the example's task (default sort)")
    parser.add_argument("--size", default="full", help="finetune: the example's model size (default full)")
    parser.add_argument("--cache", default=None, help="finetune: the example's cache folder (as its build.py)")
    parser.add_argument("--example", default=None, help="finetune: the examples/merge_transformers folder")
    parser.add_argument("--generations", type=int, default=60, help="finetune: generations (default 60)")
    parser.add_argument("--lines", type=int, default=256, help="finetune: training lines scored (default 256)")
    parser.add_argument("--checkpoints", type=int, default=3,
                        help="finetune: points of the budget where the mean is scored (default 3)")
    parser.add_argument("--bytes-dims", type=_ints, default=[100_000, 100_000_000],
                        help="bytes: genome sizes (default 1e5,1e8)")
    parser.add_argument("--bytes-popsize", type=int, default=4, help="bytes: members per generation (default 4)")
    parser.add_argument("--ranks", type=int, default=2, help="bytes: ranks (default 2)")
    parser.add_argument("--cost-ms", type=float, default=20.0, help="scale: milliseconds per evaluation (default 20)")
    parser.add_argument("--layers", type=int, default=12, help="lowrank: GPT-2 blocks (default 12)")
    parser.add_argument("--width", type=int, default=256, help="lowrank: GPT-2 width (default 256: ~10 M parameters)")
    parser.add_argument("--rank", type=int, default=4, help="lowrank: rank of each perturbation (default 4)")
    parser.add_argument("--tokens", type=int, default=32, help="lowrank: tokens per member (default 32)")
    parser.add_argument("--threads", type=int, default=1, help="lowrank: torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="lowrank: timed repetitions; scale: rounds (default 3)")
    parser.add_argument("--json", dest="json_path", default=None, help="write the rows as JSON here")
    options = parser.parse_args(argv)
    options.popsize = options.popsize or {"lowrank": 32, "finetune": 30}.get(options.part, 50)
    if options.sigma is None:
        options.sigma = 1e-3 if options.part == "finetune" else 0.1
    if options.lr is None:
        options.lr = 2e-3 if options.part == "finetune" else 0.05
    for name in ("sigma", "lr"):
        if not getattr(options, name) > 0:
            print(f"mpievo bench es: --{name}: expected a number > 0, got {getattr(options, name)}", file=sys.stderr)
            return 2
    for name in ("dim", "popsize", "budget", "ranks", "bytes_popsize", "generations", "lines", "checkpoints"):
        value, minimum = getattr(options, name), 2 if name in ("popsize", "ranks", "bytes_popsize") else 1
        even = name in ("popsize", "bytes_popsize")
        if value < minimum or (even and value % 2):
            print(f"mpievo bench es: --{name.replace('_', '-')}: expected {'an even' if even else 'an'} int >= "
                  f"{minimum}, got {value}", file=sys.stderr)
            return 2
    if options.part == "bytes-worker":
        bytes_worker(options.dim, options.popsize)
        return 0
    if options.part == "scale-worker":
        scale_worker(options.dim, options.popsize, options.cost_ms, generations=4)
        return 0
    if options.part == "finetune" and options.evox_python and not Path(options.evox_python).exists():
        print(f"mpievo bench es: --evox-python: expected an interpreter, got {options.evox_python}", file=sys.stderr)
        return 2
    parts = {"quality": quality, "bytes": wire_bytes, "lowrank": lowrank, "scale": scale}
    if options.part == "finetune":
        from .es_finetune import EXAMPLE, example_modules, finetune

        data, _, zoo = example_modules(options.example or EXAMPLE)
        tasks, sizes = data.TASKS, zoo.SPECS
        parts["finetune"] = finetune
        if options.task not in tasks or options.size not in sizes:
            print(f"mpievo bench es: --task, --size: expected one of {list(tasks)} and of {sorted(sizes)}, got "
                  f"{options.task!r} and {options.size!r}", file=sys.stderr)
            return 2
    rows = parts[options.part](options)
    if options.json_path:
        with open(options.json_path, "w") as handle:
            json.dump(rows, handle, indent=1)
        print(f"wrote {options.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
