"""``python -m mpievo.bench.breed_bytes``: bytes between ranks a generation, by purpose,
with the leader breeding every child (``run.breed = "leader"``) against the evaluators
breeding their own (``"evaluator"``), under the centralized and master-worker schemes.

Launched on P >= 2 ranks of one node, e.g. ``mpievo launch -n 2 -- python -m
mpievo.bench.breed_bytes --dim 4000000``: per (scheme, run.breed) one job of 2 GA islands
over sphere rows of ``--dim`` genes in ``--dtype`` (capacity 4, batch ``--batch``, migration
every 2 generations), generation 0, then ``--generations`` generations measured. Printed on
rank 0, one line per job: bytes all ranks sent per measured generation, by purpose
(``comm.traffic`` over the scheme's communicators: "breeding" carries plans and survivors'
slots, "evaluation" rows or fitness), and the wall time per generation (noisy on a shared
machine: compare within one run). Generation 0's rows go through the leader in every mode
and are not counted.
"""

from __future__ import annotations

import argparse
import time

#: (run.scheme, engine.evaluation) measured
SCHEMES = (("centralized", "generational"), ("master_worker", "generational"), ("master_worker", "steady"))


def measure(comm, scheme_name: str, evaluation: str, breed: str, dim: int, dtype: str, batch: int,
            generations: int) -> dict:
    """One job's bytes per measured generation by purpose (all ranks summed) and wall per
    generation (rank 0's); collective over ``comm``.

    Example::

        row = measure(Communicator(MPI.COMM_WORLD), "master_worker", "steady", "evaluator",
                      4_000_000, "float32", 4, 3)     # {"bytes": {...}, "wall_s": ...}
    """
    from ..config import validate
    from ..parallel import build_scheme
    from ..plan.workloads import scheme_traffic

    job = validate({"run": {"scheme": scheme_name, "islands": 2, "breed": breed, "generations": generations},
                    "problem": {"name": "sphere", "dim": dim, "shift": False, "rotate": False},
                    "engine": {"algorithm": "ga", "dtype": dtype, "capacity": 4, "batch_size": batch,
                               "evaluation": evaluation, "stagnation_patience": 0},
                    "migration": {"interval": 2, "emigrants": 1}}, comm.size)
    scheme = build_scheme(comm, job)
    served = getattr(scheme, "loop_comm", comm) is not comm
    try:
        if not served:
            scheme.initialize()
        elif comm.rank == 0:
            scheme.initialize()
            scheme.summon({"kind": "mark"})     # the workers out of generation 0
        else:
            scheme.serve()
        before, start = scheme_traffic(comm, scheme), time.perf_counter()
        if served and comm.rank:
            scheme.serve()
        else:
            for _ in range(generations):
                scheme.step()
            if served:
                scheme.summon({"kind": "finish"})
        wall = time.perf_counter() - start
        after = scheme_traffic(comm, scheme)
        mode = getattr(scheme, "breed", breed)
    finally:
        getattr(scheme, "close", lambda: None)()
    sent = comm.gather_object({k: v - before.get(k, 0) for k, v in after.items()})
    if comm.rank:
        return {}
    total: dict[str, float] = {}
    for part in sent:
        for purpose, nbytes in part.items():
            if nbytes:
                total[purpose] = total.get(purpose, 0) + nbytes / generations
    return {"scheme": scheme_name, "evaluation": evaluation, "breed": mode, "bytes": total,
            "wall_s": wall / generations}


def main(argv=None) -> None:
    """Measure every (scheme, run.breed) pair on the launched ranks and print the lines."""
    from mpi4py import MPI

    from ..comm import Communicator

    parser = argparse.ArgumentParser(prog="python -m mpievo.bench.breed_bytes", description=__doc__.split("\n")[0])
    parser.add_argument("--dim", type=int, default=4_000_000)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--generations", type=int, default=3)
    args = parser.parse_args(argv)
    comm = Communicator(MPI.COMM_WORLD)
    if comm.size < 2:
        raise SystemExit(f"expected at least 2 ranks (mpievo launch -n 2 -- ...), got {comm.size}")
    row_bytes = args.dim * (2 if args.dtype == "bfloat16" else 4)
    if comm.rank == 0:
        print(f"P={comm.size}, 2 islands, rows of {args.dim:,} {args.dtype} genes ({row_bytes:,} B), "
              f"batch {args.batch}, {args.generations} generations measured")
    for scheme_name, evaluation in SCHEMES:
        for breed in ("leader", "evaluator"):
            row = measure(comm, scheme_name, evaluation, breed, args.dim, args.dtype, args.batch, args.generations)
            if comm.rank == 0:
                purposes = ", ".join(f"{p} {n:,.0f}" for p, n in sorted(row["bytes"].items()))
                print(f"  {scheme_name:<13} {evaluation:<12} {row['breed']:<9} "
                      f"{sum(row['bytes'].values()):>13,.0f} B/generation ({purposes}); "
                      f"{1e3 * row['wall_s']:.0f} ms/generation", flush=True)


if __name__ == "__main__":
    main()
