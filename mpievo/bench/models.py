"""``mpievo bench models``: models as genomes, measured (printed ratios, never asserted).

Three measurements on a GPT-2 built from a config (no download; ``--layers``,
``--width`` set its size):

* ``copy``: writing a child into the model's flat buffer (dense: one copy; delta:
  ``base + delta`` materialised in place) against a plain memcpy of the same bytes
  between two preallocated arrays (target >= 0.5x), and the bytes Python allocated
  while writing (tracemalloc; target: far below one genome). On a GPU (``--device
  cuda``), a device child into the buffer against a device-to-device copy.
* ``memory``: a delta-genome run's peak RSS growth on this rank against the estimate
  of what is resident, per phase (generation 0, then later generations: Linux resets the
  peak in between; other ranks print the whole run's): sources, archive, batch (target
  within 10 %); generation 0 holds its population beside the archive it enters.
* ``child`` (:mod:`.models_child`): a model-sized child at scale (GPT-2 small in
  bfloat16 by default) against a genome-sized memcpy, generation 0 against reading the
  sources' safetensors files once, and the node's peak RSS against the pre-run estimate.
* ``load`` (``--sources-dir``, as ``child`` writes them): the sources read into the node's
  shared memory (:func:`mpievo.torch.hf.hf_bases`, loaded by
  :func:`mpievo.parallel.shared_bases.share_bases`) against reading their safetensors
  files once: the time, and the leader's peak RSS growth while loading against the growth
  that stays (target <= 1.1x).
* ``scale``: evaluations/s of the same job (islands and budget fixed) on all the
  launched ranks against rank 0 alone, the fitness a forward pass that dominates (target
  >= 1.8x at 2 ranks). Run it under ``mpievo launch -n 2 -- python -m mpievo.bench.models
  scale``; one process measures only itself.

Example: ``python -m mpievo.bench.models copy --layers 8 --width 256``.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from .model_tools import _peak_bytes, _reset_peak, _status_bytes, build_model, fastest


def measure_copy(options) -> None:
    import torch

    from mpievo.torch import FlatParameters

    flat = FlatParameters(build_model(options.layers, options.width, device=options.device))
    rng = np.random.default_rng(0)
    child = rng.standard_normal(flat.dim).astype(np.float32)
    base = rng.standard_normal(flat.dim).astype(np.float32)
    print(f"model: {flat.dim:,} genes ({flat.nbytes / 2**20:.1f} MiB {flat.dtype}) on {flat.device}")
    if flat.device.type == "cuda":
        source = torch.as_tensor(child, device=flat.device)
        other = torch.empty_like(source)
        sync = torch.cuda.synchronize
        copy, write = fastest(lambda: (other.copy_(source), sync()), lambda: (flat.write(source), sync()))
        print(f"device child -> flat buffer {write * 1e3:.3f} ms, device copy {copy * 1e3:.3f} ms: "
              f"{copy / write:.2f}x a device copy (target >= 0.5x)")
        return
    target = np.zeros_like(child)       # touched: no first-write page faults in the timing
    view = flat.genome()
    copy, dense, delta = fastest(lambda: np.copyto(target, child), lambda: flat.write(child),
                                 lambda: np.add(base, child, out=view))
    tracemalloc.start()
    flat.write(child)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"memcpy {copy * 1e3:.2f} ms ({flat.nbytes / copy / 1e9:.1f} GB/s)")
    print(f"dense child -> flat buffer {dense * 1e3:.2f} ms: {copy / dense:.2f}x memcpy (target >= 0.5x)")
    print(f"delta base+delta -> flat buffer {delta * 1e3:.2f} ms: {copy / delta:.2f}x memcpy "
          "(reads two genomes, writes one)")
    print(f"allocated while writing a child: {peak} B ({peak / flat.nbytes:.2e} of a genome)")


def measure_memory(options) -> None:
    import torch

    import mpievo
    from mpievo.parallel.world import world_comm
    from mpievo.torch.problem import ModelProblem

    comm = world_comm()
    torch.set_num_threads(1)
    sources = [build_model(options.layers, options.width, seed) for seed in (1, 2)]
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    model = build_model(options.layers, options.width, 3)
    islands, capacity, batch = comm.size, options.capacity, options.batch
    config = {"engine": {"genome": "delta", "capacity": capacity, "batch_size": batch}}
    warm = ModelProblem(build_model(1, 32, 4), lambda m: 0.0, sources=[build_model(1, 32, 5)])
    mpievo.minimize(warm, budget=2 * comm.size * (capacity + batch), islands=comm.size, seed=1,
                    config=config, comm=comm)     # compiles the kernels: not the model's memory
    problem = ModelProblem(model, lambda m: float(m(ids).logits[0, -1, 0]), sources=sources)
    genome = problem.flat.nbytes
    # materialising: the block is the model's buffer (lent), the rest of the budget an LRU
    # cache of decoded best genomes: one here (the default 1 GiB would be counted in full)
    config["engine"]["materialize_budget"] = 2 * genome
    phased = _reset_peak()
    start = _status_bytes("VmRSS") if phased else _peak_bytes()
    first = {}

    def after_generation_0(_point) -> None:      # rank 0's callback; its first log point is generation 0
        if not first and phased:
            first["peak"] = _peak_bytes() - start
            _reset_peak()

    mpievo.minimize(problem, budget=islands * (capacity + 2 * batch), islands=islands, seed=1,
                    config=config, comm=comm, callback=after_generation_0)   # given on every rank: a collective
    later = _peak_bytes() - start
    # growth over the resident set before the run; the model's flat buffer was made with
    # the problem (before): a child is written into it, no growth. Counted per rank, in
    # rows of one genome: the sources (every rank maps and reads the node's copy), the
    # delta encoding's row box (lower and upper, 2 rows), then
    # - later generations: the archive (capacity rows), one batch of children, the decode
    #   cache (1 row) and the copy of the best genome a log point hands out (1 row);
    # - generation 0: the archive and generation 0's population beside it (the start
    #   hook's genomes and their deltas, then the deltas and the archive they enter).
    rows = {"later": len(sources) + 2 + capacity + batch + 2, "generation 0": len(sources) + 2 + 2 * capacity}
    mib = 2 ** 20
    print(f"rank {comm.rank}: rows of {genome / mib:.2f} MiB; estimates: generation 0 {rows['generation 0']} rows "
          f"(2 sources + 2 row box + {capacity} archive + {capacity} generation 0 beside it), later "
          f"{rows['later']} rows (2 sources + 2 row box + {capacity} archive + {batch} batch + 2 best genome)")
    if "peak" in first:
        for phase, grown in (("generation 0", first["peak"]), ("later", later)):
            estimate = rows[phase] * genome
            print(f"rank {comm.rank}: {phase}: peak RSS growth {grown / mib:.1f} MiB, estimate "
                  f"{estimate / mib:.1f} MiB: {grown / estimate:.2f}x (target within 10 %)")
    else:       # no phases here (another rank, or no /proc): the whole run's peak
        estimate = max(rows.values()) * genome
        print(f"rank {comm.rank}: whole run: peak RSS growth {later / mib:.1f} MiB, estimate "
              f"{estimate / mib:.1f} MiB (the larger phase): {later / estimate:.2f}x (target within 10 %)")


def measure_load(options) -> None:
    """The ``load`` part (module docstring), on every launched rank; each node's leader
    loads and prints.

    Example:
        >>> # python -m mpievo.bench.models load --sources-dir /tmp/sources --layers 12 --width 768
    """
    from pathlib import Path

    import torch

    from mpievo.parallel.shared_bases import share_bases
    from mpievo.parallel.world import world_comm
    from mpievo.torch import FlatParameters, hf_bases

    from .models_child import read_once

    if not options.sources_dir:
        raise SystemExit("mpievo bench models load: expected --sources-dir (source* model directories), got none")
    comm = world_comm()
    paths = sorted(Path(options.sources_dir).glob("source*"))
    flat = FlatParameters(build_model(options.layers, options.width, 0, vocab=options.vocab or 50257,
                                      positions=options.positions or 1024).to(torch.bfloat16))
    bases = hf_bases(paths, flat, ranks_per_node=comm.size)
    read = read_once(paths) if comm.rank == 0 else 0.0
    comm.barrier()
    before = _status_bytes("VmRSS") or 0
    phased = _reset_peak()
    start = time.perf_counter()
    release = share_bases(comm, bases)
    seconds = time.perf_counter() - start
    peak, resident = _peak_bytes() - before, (_status_bytes("VmRSS") or 0) - before
    if comm.rank == 0:
        mib = 2 ** 20
        print(f"{len(paths)} sources of {flat.dim:,} genes ({bases.nbytes / mib:.0f} MiB {bases.dtype.name}): "
              f"loaded in {seconds:.2f} s, reading the safetensors files once {read:.2f} s ({seconds / read:.2f}x)")
        if phased:
            print(f"leader: peak RSS growth while loading {peak / mib:.0f} MiB, resident after {resident / mib:.0f} "
                  f"MiB: {peak / max(resident, 1):.3f}x (target <= 1.1x)")
    comm.barrier()
    release()


def measure_scale(options) -> None:
    import torch

    import mpievo
    from mpievo.comm import SelfComm
    from mpievo.parallel.world import world_comm
    from mpievo.torch.problem import ModelProblem

    torch.set_num_threads(1)
    comm = world_comm()
    ids = torch.randint(0, 256, (options.tokens_batch, 64), generator=torch.Generator().manual_seed(0))
    sources = [build_model(options.layers, options.width, seed) for seed in (1, 2)]

    def run(on, evaluations):
        problem = ModelProblem(build_model(options.layers, options.width, 3),
                               lambda m: float(m(ids).logits.mean()), sources=sources)
        start = time.perf_counter()
        result = mpievo.minimize(problem, budget=evaluations, islands=2, seed=1,
                                 config={"engine": {"capacity": 8, "batch_size": 4}}, comm=on)
        return result.evaluations / (time.perf_counter() - start)

    def barrier():
        if comm.size > 1:     # a sleeping barrier: MPI's spins and would steal rank 0's core
            from mpi4py import MPI

            from mpievo.plan.workloads import sleep_until_all_arrive

            sleep_until_all_arrive(MPI.COMM_WORLD)

    run(SelfComm(), 24)                       # every rank compiles its kernels first
    barrier()
    alone = run(SelfComm(), options.evaluations) if comm.rank == 0 else None
    barrier()
    together = run(comm, options.evaluations)
    if comm.rank == 0:
        print(f"evaluations/s ({options.evaluations} evaluations, 2 islands): 1 rank {alone:.1f}, "
              f"{comm.size} ranks {together:.1f}: {together / alone:.2f}x (target >= 1.8x at 2 ranks)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="mpievo bench models", description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("copy", "memory", "scale", "child", "load"))
    parser.add_argument("--layers", type=int, default=None, help="GPT-2 blocks (default: copy, memory 8; scale 2)")
    parser.add_argument("--width", type=int, default=None,
                        help="GPT-2 embedding width (default: copy, memory 256; scale 64)")
    parser.add_argument("--device", default="cpu", help="copy: cpu or cuda")
    parser.add_argument("--capacity", type=int, default=None, help="memory, child: archive capacity (8; 4)")
    parser.add_argument("--batch", type=int, default=None, help="memory, child: GA batch (4; 2)")
    parser.add_argument("--evaluations", type=int, default=96, help="scale: evaluations per run")
    parser.add_argument("--tokens-batch", type=int, default=32,
                        help="scale: sequences of 64 tokens per forward pass (the evaluation's cost)")
    parser.add_argument("--sources", type=int, default=4, help="child: source models (a base and 3 more)")
    parser.add_argument("--sources-dir", default=None,
                        help="child, load: use the source* directories there (as save_sources writes them)")
    parser.add_argument("--vocab", type=int, default=None, help="child: vocabulary (default 50257: GPT-2's)")
    parser.add_argument("--positions", type=int, default=None, help="child: positions (default 1024)")
    parser.add_argument("--generations", type=int, default=12, help="child: generations after generation 0")
    parser.add_argument("--tokens", type=int, default=16, help="child: tokens of the fitness's forward pass")
    options = parser.parse_args(argv)
    if options.part == "child":          # GPT-2 small unless told: 12 x 768, 50,257 tokens, 124 M genes
        from .models_child import measure_child

        options.layers, options.width = options.layers or 12, options.width or 768
        options.vocab, options.positions = options.vocab or 50257, options.positions or 1024
        options.capacity, options.batch = options.capacity or 4, options.batch or 2
        measure_child(options)
        return 0
    options.capacity, options.batch = options.capacity or 8, options.batch or 4
    small = options.part == "scale"        # scale: a small genome, an evaluation that dominates
    options.layers = options.layers or (2 if small else 8)
    options.width = options.width or (64 if small else 256)
    {"copy": measure_copy, "memory": measure_memory, "scale": measure_scale, "load": measure_load}[options.part](options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
