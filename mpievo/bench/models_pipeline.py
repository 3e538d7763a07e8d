"""``mpievo bench models pipeline``: how busy the evaluator is, with and without pipelining.

A GPT-2 built from a config (no download; ``--layers``, ``--width``, ``--vocab``) in
bfloat16, ``--sources`` in-memory sources of its architecture (the first the delta's
base), and a GA run over ``ModelProblem`` genomes (``--genome``: delta by default) on
every launched rank, one island each, twice per fitness: ``pipeline`` off, then on
(:mod:`mpievo.evo.pipeline`), same seed. Two fitnesses, each ``--ratio`` (20) times one
genome-sized memcpy measured in the same run:

* ``sleep``: the host waits that long (a device evaluation: the host's core is free);
* ``forward``: a GPT-2 forward pass on one torch thread, its token count calibrated to
  that time (the host's core is busy: the helper thread needs a core of its own).

Printed per rank and fitness: the fitness time, the evaluator's utilisation (time inside
the fitness over the wall time, from the end of generation 1 to the run's last child;
target with pipelining >= 0.9), the time outside the fitness per child, the wall time
per child (where the helper thread shares a core with a forward pass, the fitness itself
slows down: utilisation then rises more than the children per second), and whether the
two runs gave the same fitness values and best genome bit for bit.

Example: ``mpievo bench models pipeline`` (one rank and its helper thread on two cores);
``mpievo launch -n 2 -- python -m mpievo.bench.models pipeline --layers 2 --width 256``
(ranks on every core).
"""

from __future__ import annotations

import time

import numpy as np


def utilisation(stamps, start: int) -> tuple[float, float, float]:
    """(time inside the fitness / wall, wall outside the fitness per child, wall per
    child) over the fitness calls after call ``start`` (``stamps``: (began, ended) per
    call, in order).

    Example:
        >>> utilisation([(0.0, 1.0), (1.5, 2.5), (3.0, 4.0)], 0)
        (0.6666666666666666, 0.5, 1.5)
    """
    later = stamps[start + 1:]
    if not later:
        return float("nan"), float("nan"), float("nan")
    inside = sum(stop - begin for begin, stop in later)
    wall = later[-1][1] - stamps[start][1]
    return inside / wall, (wall - inside) / len(later), wall / len(later)


def forward_tokens(model, seconds: float, vocab: int, positions: int) -> int:
    """Tokens of a forward pass that takes about ``seconds`` (measured at 32 tokens, then
    at the count that gives, scaled each time).

    Example:
        >>> # forward_tokens(gpt2, 0.4, 50257, 1024)
    """
    import torch

    from .model_tools import fastest

    tokens = min(32, positions)
    for _ in range(2):
        ids = torch.zeros((1, tokens), dtype=torch.long)
        with torch.no_grad():
            took = fastest(lambda: model(ids), repeats=3)[0]
        tokens = int(np.clip(round(tokens * seconds / took), 1, positions))
    return tokens


def measure_pipeline(options) -> None:
    """The ``pipeline`` part (module docstring), on every launched rank; rank 0 prints.

    Example:
        >>> # mpievo launch -n 2 -- python -m mpievo.bench.models pipeline
    """
    import torch

    import mpievo
    from mpievo.parallel.world import world_comm
    from mpievo.torch import ModelProblem

    from .model_tools import build_model
    from .models_child import memcpy_seconds

    comm = world_comm()
    torch.set_num_threads(1)
    size = dict(vocab=options.vocab, positions=options.positions)
    model = build_model(options.layers, options.width, 0, **size).to(torch.bfloat16)
    sources = [build_model(options.layers, options.width, seed, **size).to(torch.bfloat16)
               for seed in range(1, options.sources + 1)]
    stamps, values = [], []
    fitness = {"seconds": 0.0, "ids": None}

    def score(m) -> float:
        began = time.perf_counter()
        if fitness["ids"] is None:
            time.sleep(fitness["seconds"])
            value = 0.0
        else:
            value = float(m(fitness["ids"]).logits[0, -1, :8].float().sum())
        stamps.append((began, time.perf_counter()))
        values.append(value)
        return value

    problem = ModelProblem(model, score, sources=sources, lower=-1.0, upper=1.0)
    copy = memcpy_seconds(problem.flat.nbytes)
    target = options.ratio * copy
    tokens = forward_tokens(model, target, options.vocab, options.positions)
    config = {"engine": {"genome": options.genome, "dtype": "bfloat16", "capacity": options.capacity,
                         "batch_size": options.batch}}
    budget = comm.size * (options.capacity + options.generations * options.batch)
    mpievo.minimize(problem, budget=comm.size * 2 * options.capacity, islands=comm.size, seed=2,
                    config=config, comm=comm)      # compiles, makes the second buffer
    rows = []
    for kind in options.fitness:
        fitness["ids"] = None if kind == "sleep" else torch.zeros((1, tokens), dtype=torch.long)
        fitness["seconds"] = target
        runs = {}
        for pipeline in (False, True):
            problem.pipeline = pipeline
            stamps.clear()
            values.clear()
            result = mpievo.minimize(problem, budget=budget, islands=comm.size, seed=1, config=config, comm=comm)
            used, outside, per_child = utilisation(stamps, options.capacity - 1 + options.batch)
            took = float(np.median([stop - begin for begin, stop in stamps]))
            runs[pipeline] = (used, outside, took, per_child, list(values),
                              result.x.tobytes() if comm.rank == 0 else b"")
        same = runs[False][4:] == runs[True][4:]
        rows.append((kind, runs[False][:4], runs[True][:4], same))
    report = comm.allgather_object((comm.rank, copy, rows))
    if comm.rank != 0:
        return
    mib = 2 ** 20
    print(f"model: GPT-2 {options.layers} x {options.width}, vocabulary {options.vocab}: {problem.dim:,} genes "
          f"({problem.flat.nbytes / mib:.0f} MiB bfloat16); {options.sources} in-memory sources; {options.genome} "
          f"genomes; {comm.size} rank(s), one island each, capacity {options.capacity}, batch {options.batch}, "
          f"{options.generations} generations; torch on 1 thread per rank")
    print(f"rank 0: memcpy of a genome {copy * 1e3:.1f} ms ({problem.flat.nbytes / copy / 1e9:.1f} GB/s); "
          f"fitness target {options.ratio:g}x memcpy = {target * 1e3:.0f} ms (forward: {tokens} tokens)")
    for rank, copy, entries in report:      # each rank's fitness from its own memcpy
        for kind, off, on, same in entries:
            print(f"rank {rank}: {kind:7s} fitness {on[2] * 1e3:.0f} ms ({on[2] / copy:.1f}x its memcpy of "
                  f"{copy * 1e3:.1f} ms): utilisation "
                  f"{off[0]:.3f} without pipelining, {on[0]:.3f} with (target >= 0.9); outside the fitness per "
                  f"child {off[1] * 1e3:.0f} ms -> {on[1] * 1e3:.0f} ms ({off[1] / copy:.1f}x -> "
                  f"{on[1] / copy:.1f}x memcpy); wall per child {off[3] * 1e3:.0f} ms -> {on[3] * 1e3:.0f} ms "
                  f"(fitness without pipelining {off[2] * 1e3:.0f} ms); same values and best genome: "
                  f"{'yes' if same else 'NO'}")


def main(argv=None) -> int:
    """``mpievo bench models pipeline [options]`` (module docstring).

    Example:
        >>> # main(["--layers", "2", "--width", "256", "--fitness", "sleep"])
    """
    import argparse

    parser = argparse.ArgumentParser(prog="mpievo bench models pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4, help="GPT-2 blocks (default 4)")
    parser.add_argument("--width", type=int, default=384, help="GPT-2 embedding width (default 384: 27 M genes)")
    parser.add_argument("--vocab", type=int, default=50257, help="vocabulary (default 50257: GPT-2's)")
    parser.add_argument("--positions", type=int, default=1024, help="positions (default 1024)")
    parser.add_argument("--sources", type=int, default=4, help="source models (a base and 3 more)")
    parser.add_argument("--capacity", type=int, default=8, help="archive capacity per island (8)")
    parser.add_argument("--batch", type=int, default=8, help="GA batch (8, the design study's)")
    parser.add_argument("--generations", type=int, default=4, help="generations after generation 0")
    parser.add_argument("--ratio", type=float, default=20.0, help="fitness time in genome-sized memcpys (20)")
    parser.add_argument("--genome", choices=("dense", "delta"), default="delta")
    parser.add_argument("--fitness", nargs="+", choices=("sleep", "forward"), default=["sleep", "forward"])
    measure_pipeline(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
