"""A stand-in for ``mpievo run`` that honours its checkpoint/requeue contract.

It lets tests/slurm/run.sh check the Slurm mechanics of the templates in slurm/
(launchers, signal forwarding, requeue, resume, array indexing, GPU binding)
independently of the optimiser itself. The contract, shared with ``mpievo run``:

* ``--out DIR`` starts a run; ``--resume DIR`` continues one from its checkpoint.
* SIGUSR1 or SIGTERM on any rank: every rank stops at the next generation boundary,
  writes its checkpoint (``DIR/checkpoints/rank-<R>.json``, then rank 0 writes
  ``DIR/checkpoints/manifest.json``, the mark of a complete checkpoint, as mpievo.io
  does) and the program exits with status 85 ("checkpointed, please requeue").
* A finished run writes ``DIR/summary.json`` with ``best_fitness`` and ``best_genome``
  (and ``resumed_from``: null, or the generation of the checkpoint it resumed from).
* The same seed gives the same summary, however often the run was interrupted.

Each rank also writes ``DIR/rank-<R>.env.json`` with the variables that place it
(CUDA_VISIBLE_DEVICES, SLURM_* ids), for the GPU-binding and array checks.

Usage (under any MPI launcher):
    python standin_run.py --out DIR [--generations N] [--seed S] [--generation-seconds T]
    python standin_run.py --resume DIR
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

#: exit status meaning "checkpointed at a generation boundary, please requeue"
EXIT_CHECKPOINTED = 85
GENOME_LENGTH = 8
PLACEMENT_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_ARRAY_TASK_ID",
                       "SLURM_RESTART_COUNT", "SLURMD_NODENAME", "SLURM_PROCID")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="directory of a new run")
    where.add_argument("--resume", type=Path, help="directory of a checkpointed run")
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generation-seconds", type=float, default=0.1,
                        help="sleep per generation, so that a signal can arrive mid-run")
    args = parser.parse_args(argv)
    if args.generations < 1:
        parser.error(f"expected --generations >= 1, got {args.generations}")
    return args


class StopFlag:
    """Set by SIGUSR1/SIGTERM; read at generation boundaries."""

    def __init__(self) -> None:
        self.requested = False
        for signum in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(signum, self._request)

    def _request(self, signum, frame) -> None:
        self.requested = True


def fresh_state(seed: int, rank: int) -> dict:
    rng = np.random.default_rng([seed, rank])
    genome = rng.uniform(-5.0, 5.0, GENOME_LENGTH)
    return {"generation": 0, "rng": rng.bit_generator.state,
            "genome": genome.tolist(), "fitness": sphere(genome)}


def sphere(genome: np.ndarray) -> float:
    return float(np.sum(np.square(genome)))


def step(state: dict) -> dict:
    """One (1+1) evolution step, deterministic given the state."""
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]
    parent = np.asarray(state["genome"])
    child = parent + rng.normal(0.0, 0.5, parent.size)
    fitness = sphere(child)
    if fitness < state["fitness"]:
        parent, state = child, {**state, "fitness": fitness}
    return {**state, "generation": state["generation"] + 1,
            "rng": rng.bit_generator.state, "genome": parent.tolist()}


def write_json(path: Path, data: dict) -> None:
    """Write atomically, so a kill mid-write never leaves a torn checkpoint."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def checkpoint_path(out: Path, rank: int) -> Path:
    return out / "checkpoints" / f"rank-{rank}.json"


def write_checkpoint(out: Path, state: dict, comm: MPI.Comm) -> None:
    """Every rank writes its state; the manifest, written last, marks it complete."""
    if comm.rank == 0:
        (out / "checkpoints").mkdir(exist_ok=True)
    comm.Barrier()
    write_json(checkpoint_path(out, comm.rank), state)
    comm.Barrier()
    if comm.rank == 0:
        write_json(out / "checkpoints" / "manifest.json",
                   {"generation": state["generation"], "ranks": comm.size})


def start(args: argparse.Namespace, comm: MPI.Comm) -> tuple[Path, dict, dict]:
    """Return (out dir, run parameters, this rank's state) for a new or resumed run."""
    if args.resume is not None:
        out = args.resume
        params = json.loads((out / "standin-params.json").read_text())
        if params["ranks"] != comm.size:
            raise SystemExit(f"expected {params['ranks']} ranks to resume, got {comm.size}")
        return out, params, json.loads(checkpoint_path(out, comm.rank).read_text())
    out = args.out
    params = {"generations": args.generations, "seed": args.seed,
              "generation_seconds": args.generation_seconds, "ranks": comm.size}
    if comm.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "standin-params.json", params)
    comm.Barrier()
    return out, params, fresh_state(params["seed"], comm.rank)


def write_summary(out: Path, params: dict, state: dict, resumed_from: int | None,
                  comm: MPI.Comm) -> None:
    results = comm.gather((state["fitness"], state["genome"]), root=0)
    if comm.rank == 0:
        best_fitness, best_genome = min(results, key=lambda r: r[0])
        write_json(out / "summary.json", {
            "best_fitness": best_fitness, "best_genome": best_genome,
            "generations": params["generations"], "seed": params["seed"],
            "ranks": comm.size, "resumed_from": resumed_from})


def main(argv: list[str]) -> int:
    comm = MPI.COMM_WORLD
    stop = StopFlag()
    args = parse_args(argv)
    out, params, state = start(args, comm)
    resumed_from = state["generation"] if args.resume is not None else None
    write_json(out / f"rank-{comm.rank}.env.json",
               {name: os.environ.get(name) for name in PLACEMENT_VARIABLES})
    while state["generation"] < params["generations"]:
        # Ranks see signals at different times: agree before anyone stops.
        if comm.allreduce(stop.requested, op=MPI.LOR):
            write_checkpoint(out, state, comm)
            if comm.rank == 0:
                print(f"standin: checkpointed at generation {state['generation']}", flush=True)
            return EXIT_CHECKPOINTED
        time.sleep(params["generation_seconds"])
        state = step(state)
    write_summary(out, params, state, resumed_from, comm)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
