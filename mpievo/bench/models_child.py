"""``mpievo bench models child``: a model-sized child against the memory traffic it needs.

A GPT-2 built from a config (no download; ``--layers``, ``--width``, ``--vocab``; 12 x 768
with the 50,257-token vocabulary is GPT-2 small, 124 M parameters) in bfloat16, a base and
``--sources - 1`` more sources saved as safetensors files in a temporary directory (by a
child process, so that this one's peak memory is the run's), then a delta-genome GA run
over them (``ModelProblem`` with :func:`mpievo.torch.hf.hf_bases`: the sources loaded once
per node, tensor by tensor, in bfloat16), one island per rank. Printed, same run, per rank:

* one genome-sized memcpy (the fastest of several, between two touched arrays);
* a delta child written into the model's buffer (``base + delta``, clipped) against it
  (target >= 0.5x memcpy);
* the time outside the fitness per child from generation 2 on (breeding, materialising,
  the archive's merge; the median over generations, and their spread, which shows the
  log points) and its ratio to the memcpy (target <= 6x; the
  traffic a child needs is about 3: its parents and the base read, the buffer written);
* generation 0 (sources into shared memory, the row box, the first population
  evaluated) against reading the safetensors files once (target <= 2x), whole and
  outside its evaluations (the fitness's forward passes are the user's work, not the
  loading's; in bfloat16 on a CPU without bfloat16 units they dominate);
* peak RSS of the node (each rank's growth over its resident set before the problem was
  built, the shared sources counted once) against the estimate the pre-run check uses
  (:func:`mpievo.parallel.memory.genomes_estimate`; target within 1.15x).

Example: ``mpievo launch -n 2 -- python -m mpievo.bench.models child --generations 12``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def save_sources(directory: str, count: int, layers: int, width: int, vocab: int, positions: int) -> None:
    """Write ``count`` bfloat16 GPT-2s (seeds 1..count) as Hugging Face directories
    ``directory/source{i}`` (one model in memory at a time).

    Example:
        >>> # save_sources("/tmp/sources", 4, 12, 768, 50257, 1024)   # GPT-2 small x 4
    """
    import gc

    import torch

    from .model_tools import build_model

    for seed in range(1, count + 1):
        model = build_model(layers, width, seed, vocab=vocab, positions=positions).to(torch.bfloat16)
        model.save_pretrained(Path(directory) / f"source{seed}")
        del model
        gc.collect()


def read_once(paths) -> float:
    """Seconds to read every safetensors file of ``paths`` once (tensor by tensor, as
    the loader does; the page cache as the run will find it).

    Example:
        >>> read_once([]) < 1.0
        True
    """
    from safetensors import safe_open

    start = time.perf_counter()
    for path in paths:
        for file in sorted(Path(path).glob("*.safetensors")):
            with safe_open(str(file), "pt") as handle:
                for name in handle.keys():
                    handle.get_tensor(name).clone()     # the bytes read (a mapped tensor alone reads none)
    return time.perf_counter() - start


def memcpy_seconds(nbytes: int) -> float:
    """The fastest of 7 copies of ``nbytes`` between two touched arrays.

    Example:
        >>> memcpy_seconds(1 << 20) > 0
        True
    """
    from .model_tools import fastest

    source, target = np.ones(nbytes // 2, np.uint16), np.zeros(nbytes // 2, np.uint16)
    return fastest(lambda: np.copyto(target, source))[0]


def write_seconds(problem, dtype) -> float:
    """The fastest delta child written into the model's buffer (the delta encoding's
    materialisation over one base row of the model's size).

    Example:
        >>> # write_seconds(model_problem, genome_dtype("bfloat16"))
    """
    from mpievo.evo.genomes import BaseModels, DeltaProblem

    from .model_tools import fastest

    rng = np.random.default_rng(0)
    base = rng.standard_normal((1, problem.dim), np.float32).astype(dtype)
    delta = (rng.standard_normal((1, problem.dim), np.float32) * 1e-3).astype(dtype)
    encoded = DeltaProblem(problem, BaseModels(base), dtype=dtype, budget=4 * problem.dim * dtype.itemsize)
    out = problem.genome_block(dtype)
    return fastest(lambda: encoded.materialize_into(delta, out))[0]


def measure_child(options) -> None:
    """The ``child`` part (module docstring), on every launched rank; rank 0 prints.

    Example:
        >>> # mpievo launch -n 2 -- python -m mpievo.bench.models child
    """
    import torch

    import mpievo
    from mpievo.bench.model_tools import _peak_bytes, _reset_peak, _status_bytes, build_model
    from mpievo.evo.half import genome_dtype
    from mpievo.parallel.memory import genomes_estimate
    from mpievo.parallel.world import world_comm
    from mpievo.torch import FlatParameters, ModelProblem, hf_bases

    comm = world_comm()
    torch.set_num_threads(1)
    directory = options.sources_dir or (tempfile.mkdtemp(prefix="mpievo-child-") if comm.rank == 0 else None)
    directory = comm.allgather_object(directory)[0]     # one directory on a one-node run
    if comm.rank == 0 and not options.sources_dir:
        subprocess.run([sys.executable, "-c", "import sys; from mpievo.bench.models_child import save_sources; "
                        f"save_sources({directory!r}, {options.sources}, {options.layers}, {options.width}, "
                        f"{options.vocab}, {options.positions})"], check=True)
    comm.barrier()
    paths = sorted(Path(directory).glob("source*"))
    read = read_once(paths) if comm.rank == 0 else 0.0
    comm.barrier()
    ids = torch.randint(0, min(options.vocab, 256), (1, options.tokens),
                        generator=torch.Generator().manual_seed(0))
    warm = ModelProblem(build_model(1, 32, 4).to(torch.bfloat16), lambda m: 0.0,
                        sources=[build_model(1, 32, 5).to(torch.bfloat16)])
    config = {"engine": {"genome": "delta", "dtype": "bfloat16", "capacity": options.capacity,
                         "batch_size": options.batch}}
    mpievo.minimize(warm, budget=comm.size * 24, islands=comm.size, seed=1, config=config, comm=comm)   # compiles
    dtype = genome_dtype("bfloat16")
    resident = _status_bytes("VmRSS") or 0
    model = build_model(options.layers, options.width, 0, vocab=options.vocab,
                        positions=options.positions).to(torch.bfloat16)
    fitness, stamps = [0.0], []

    def score(m) -> float:
        start = time.perf_counter()
        value = float(m(ids).logits[0, -1, :8].float().sum())
        stop = time.perf_counter()
        fitness[0] += stop - start
        stamps.append((stop, fitness[0]))
        return value

    rows = options.capacity + options.batch
    flat = FlatParameters(model)
    bases = hf_bases(paths, flat, archive_rows=rows, ranks_per_node=comm.size)   # checked, not loaded yet
    problem = ModelProblem(flat, score, sources=bases, lower=-1.0, upper=1.0)
    genome = problem.dim * dtype.itemsize
    copy = memcpy_seconds(genome)
    write = write_seconds(problem, dtype)
    buffers = problem.model_buffers(dtype)     # a pipelining model runs from two buffers
    estimate = genomes_estimate(problem.dim, sources=len(paths), bases_itemsize=2, rows_per_rank=rows,
                                row_itemsize=2, genome_itemsize=2, ranks_per_node=comm.size, block_rows=buffers)
    _reset_peak()
    comm.barrier()
    start = time.perf_counter()
    budget = comm.size * (options.capacity + options.generations * options.batch)
    mpievo.minimize(problem, budget=budget, islands=comm.size, seed=1, config=config, comm=comm)
    end = time.perf_counter()
    grown = _peak_bytes() - resident
    # steady state: from the end of generation 1 (generation 0's merge, first log point and
    # best genome behind it) to the last child; per generation, the median
    gen0 = stamps[options.capacity - 1]
    ends = stamps[options.capacity - 1::options.batch]
    gaps = [((b[0] - a[0]) - (b[1] - a[1])) / options.batch for a, b in zip(ends[1:], ends[2:])]
    outside = float(np.median(gaps)) if gaps else float("nan")
    spread = (min(gaps), max(gaps)) if gaps else (outside, outside)
    report = comm.allgather_object((comm.rank, (gen0[0] - start, gen0[1]), outside, end - start, grown, len(stamps),
                                    spread))
    if comm.rank != 0:
        return
    mib = 2 ** 20
    print(f"model: GPT-2 {options.layers} x {options.width}, vocabulary {options.vocab}: {problem.dim:,} genes "
          f"({genome / mib:.0f} MiB bfloat16); {len(paths)} sources; {comm.size} rank(s), one island each, "
          f"capacity {options.capacity}, batch {options.batch}, {options.generations} generations; fitness: a "
          f"forward pass of {options.tokens} tokens")
    print(f"memcpy of a genome {copy * 1e3:.1f} ms ({genome / copy / 1e9:.1f} GB/s)")
    print(f"delta child -> model buffer {write * 1e3:.1f} ms: {copy / write:.2f}x memcpy (target >= 0.5x)")
    for rank, gen0, per_child, wall, _, evaluated, (low, high) in report:
        print(f"rank {rank}: outside the fitness per child from generation 2 on {per_child * 1e3:.0f} ms "
              f"(median of generations; {low * 1e3:.0f}-{high * 1e3:.0f} ms): {per_child / copy:.1f}x memcpy "
              f"(target <= 6x); {evaluated} children, run {wall:.1f} s")
        (gen0, gen0_fitness) = gen0
        print(f"rank {rank}: generation 0 {gen0:.2f} s, reading the safetensors files once {read:.2f} s: "
              f"{gen0 / read:.2f}x (target <= 2x); outside its {options.capacity} evaluations "
              f"({gen0_fitness:.2f} s) {gen0 - gen0_fitness:.2f} s: {(gen0 - gen0_fitness) / read:.2f}x")
    node = sum(entry[4] for entry in report) - (comm.size - 1) * len(paths) * genome   # shared sources once
    print(f"node: peak RSS growth {node / mib:.0f} MiB (ranks: "
          f"{', '.join(f'{entry[4] / mib:.0f}' for entry in report)} MiB), estimate {estimate / mib:.0f} MiB "
          f"({len(paths)} sources + {comm.size} x ({rows} rows + row box + {buffers} model buffers) + best genome): "
          f"{node / estimate:.2f}x "
          "(target within 1.15x)")

