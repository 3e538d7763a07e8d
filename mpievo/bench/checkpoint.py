"""``mpievo bench checkpoint``: incremental, background checkpoints of a model-sized archive.

One rank, one island whose archive holds ``--rows`` genomes of ``--params`` genes in
``--dtype`` (default: 16 x 124e6 bfloat16, a GPT-2 island: 3.7 GiB). It prints, in one
run (the figures of a shared machine are noisy; the ratios are same-run):

1. the first checkpoint, written before the loop goes on (what a SIGTERM costs when no
   checkpoint exists yet): bytes, seconds (wall, and CPU: on a machine shared with other
   work the wall time stretches, the CPU time much less);
2. after ``--changed`` of the rows change, the second, incremental checkpoint written in
   the background: bytes, the seconds the loop was blocked (the snapshot of the
   changed rows), the writer's seconds, and what the loop did meanwhile: the rate of a
   stand-in evaluation (a BLAS product, the GIL released) and of a pure-Python counter
   (needs the GIL) during the write, each against its rate alone;
3. after as many rows change again, the checkpoint a SIGTERM writes (it waits for the
   write in flight, then writes the changed rows before the loop ends): seconds;
4. a check that the last checkpoint reads back, row by row through its references with
   h5py, bit for bit as the archive holds it.

Memory: the archive, plus ``--changed`` rows for the snapshot of the background write.

Example:
    >>> main(argparse.Namespace(params=1e5, rows=4, dtype="bfloat16", changed=1, dir=None))  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

MIB = 1 << 20


def main(args: argparse.Namespace) -> int:
    """Run the bench (options of ``mpievo bench checkpoint``: params, rows, dtype, changed,
    dir) and print its figures (see the module docstring); 0 when the last checkpoint
    reads back bit for bit, 1 otherwise, 2 for bad options."""
    from mpievo.evo.archive import Archive
    from mpievo.io import Checkpointer

    if not args.params >= 1 or args.rows < 1 or not 0 <= args.changed <= args.rows:
        print(f"mpievo bench checkpoint: expected --params >= 1, --rows >= 1 and 0 <= --changed <= --rows, "
              f"got {args.params}, {args.rows} and {args.changed}", flush=True)
        return 2
    dim = int(args.params)
    archive = Archive(args.rows, dim, args.dtype)
    row_bytes = dim * archive.dtype.itemsize
    print(f"archive: {args.rows} x {dim:.4g} {archive.dtype} = {args.rows * row_bytes / MIB:.0f} MiB "
          f"({row_bytes / MIB:.1f} MiB a row); {args.changed} rows change between checkpoints", flush=True)
    for slot in range(args.rows):
        _put(archive, slot, seed=slot)
    root = Path(tempfile.mkdtemp(prefix="mpievo-bench-ckpt-")) if args.dir is None else Path(args.dir)
    directory = root / "checkpoints"
    try:
        checkpointer = Checkpointer(directory, keep=3)
        states = lambda: {0: {"archive": archive.state_dict(copy=False)}}  # noqa: E731
        start, cpu = time.perf_counter(), time.process_time()
        first = checkpointer.save(1, states(), config="bench = 1")
        first_s, first_cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"first checkpoint (written before the loop goes on; a SIGTERM with no checkpoint yet): "
              f"{_size(directory, first) / MIB:.0f} MiB in {first_s:.2f} s ({first_cpu:.2f} s of CPU)", flush=True)

        alone = _rates(0.5)
        _change(archive, args.changed, generation=2)
        start = time.perf_counter()
        checkpointer.save_background(2, states(), config="bench = 1")
        blocked = time.perf_counter() - start
        during = _rates_while(checkpointer)
        start = time.perf_counter()
        second = checkpointer.wait()
        waited = time.perf_counter() - start
        after = _rates(0.5)
        alone = ((alone[0] + after[0]) / 2, (alone[1] + after[1]) / 2)     # before and after the write
        print(f"second checkpoint (incremental, background): {_size(directory, second) / MIB:.0f} MiB "
              f"({second.new_row_bytes / MIB:.0f} MiB of rows written, {second.referenced_row_bytes / MIB:.0f} "
              f"MiB referenced); loop blocked {blocked * 1e3:.0f} ms by the hand-off + {waited * 1e3:.0f} ms "
              f"at completion; writer {second.write_s:.2f} s", flush=True)
        print(f"  while it wrote: evaluations (BLAS, GIL released) {during[0] / alone[0]:.2f}x their rate "
              f"alone, a pure-Python loop (GIL held) {during[1] / alone[1]:.2f}x", flush=True)

        _change(archive, args.changed, generation=3)
        start, cpu = time.perf_counter(), time.process_time()
        stop = checkpointer.save(3, states(), config="bench = 1")       # what the stop path calls
        stop_s, stop_cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"SIGTERM checkpoint (incremental, {args.changed} rows changed): "
              f"{_size(directory, stop) / MIB:.0f} MiB in {stop_s:.2f} s ({stop_cpu:.2f} s of CPU; "
              f"Slurm's default grace: 30 s)", flush=True)
        same = _reads_back(directory / stop.files[0].path, archive)
        print(f"the last checkpoint reads back bit for bit with h5py: {'yes' if same else 'NO'}", flush=True)
        return 0 if same else 1
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


def _put(archive, slot: int, seed: int, generation: int = 0) -> None:
    """A distinct genome into ``slot`` (row by row: no second archive-sized array)."""
    tile = np.random.default_rng(seed).standard_normal(1 << 16).astype(np.float32)
    row = np.resize(tile, archive.dim).astype(archive.dtype)
    archive.replace([slot], row[None], [float(seed)], [seed + 1000 * generation], 0, generation)


def _change(archive, count: int, generation: int) -> None:
    for k in range(count):
        _put(archive, (generation * 7 + k) % archive.capacity, seed=1000 * generation + k, generation=generation)


def _size(directory: Path, info) -> int:
    return sum((directory / f.path).stat().st_size for f in info.files)


def _rates(seconds: float, until=None) -> tuple[float, float]:
    """(BLAS products a second in this thread, pure-Python steps a second in a second
    thread) over ``seconds``, or until ``until()`` is true."""
    a = np.ones((256, 256), np.float32)
    counter = [0, False]

    def python_loop():
        while not counter[1]:
            counter[0] += 1

    thread = threading.Thread(target=python_loop, daemon=True)
    products, start = 0, time.perf_counter()
    thread.start()
    while True:
        a @ a
        products += 1
        elapsed = time.perf_counter() - start
        if (until is not None and until()) or (until is None and elapsed >= seconds):
            break
    counter[1] = True
    thread.join()
    return products / elapsed, counter[0] / elapsed


def _rates_while(checkpointer) -> tuple[float, float]:
    return _rates(0.0, until=checkpointer.written)


def _reads_back(path: Path, archive) -> bool:
    import h5py

    with h5py.File(path, "r") as handle:
        dataset = handle["islands/0/archive/genomes"]
        return all(np.array_equal(dataset[i], archive.genomes[i].view(dataset.dtype))
                   for i in range(archive.size))
