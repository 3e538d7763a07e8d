"""Device (Numba CUDA) row utilities of a GPU island's archive.

The device versions of the archive's row operations in
:mod:`mpievo.kernels.operators` and :mod:`mpievo.evo.archive`, on numba device
arrays of genomes (float32 or float64, rows x genes):

* :func:`copy_rows`, :func:`take_rows` -- scatter / gather rows.
* :func:`retain_rows` -- compact the kept rows in place, through a bounded scratch.
* :func:`rows_equal` -- gene-wise equality of row pairs (uniqueness checks).
* :func:`hash_rows` -- the host's 64-bit row hashes, bit for bit (migration
  exchanges them between host and device islands).
* :func:`centroid_distances` -- each row's scaled distance to the centroid.
* :func:`to_host`, :func:`from_host` -- whole arrays in bounded chunks (checkpoints).

Index arrays may be host (numpy, range-checked here) or device arrays (trusted:
checking them would cost a copy to the host). Nothing here touches CUDA at import
time; kernels compile on first use.
"""

from __future__ import annotations

import numpy as np

from . import row_reduce as cuda_row_reduce
from .reduce import element_kind, launch_dims
from .operators import genome_dtype, is_device, require_device, to_device, launch_dims_2d
from .row_kernels import distance_kernels, hash_kernel, row_kernel
from .workspace import staged_index

#: default bound of one chunk of :func:`to_host` / :func:`from_host` and of the
#: scratch of :func:`retain_rows`
CHUNK_BYTES = 64 << 20


# ------------------------------------------------------------- checks
def _check_index_type(idx, name: str) -> None:
    if len(idx.shape) != 1 or (idx.shape[0] and np.dtype(idx.dtype).kind not in "iu"):
        raise TypeError(f"expected {name} to be a 1-D integer array, got {idx.dtype} "
                        f"of shape {tuple(idx.shape)}")


def _host_index(idx, n: int, name: str, *, distinct: bool = False) -> np.ndarray:
    """Host index array as int64, checked against ``[0, n)`` (and for repeats)."""
    host = np.asarray(idx)
    _check_index_type(host, name)
    host = host.astype(np.int64, copy=False)
    if host.size and (host.min() < 0 or host.max() >= n):
        raise ValueError(f"expected {name} in [0, {n}), got values in [{host.min()}, {host.max()}]")
    repeats = host.size - np.unique(host).size if distinct else 0
    if repeats:
        raise ValueError(f"expected distinct {name}, got {repeats} repeated")
    return host


def _rows_index(idx, n: int, name: str, stream, *, distinct: bool = False):
    """Index array on the device; host ones are checked first (device ones are trusted)."""
    if is_device(idx):
        _check_index_type(idx, name)
        return idx
    # a scratch array: moving the archive's rows allocates nothing per generation
    return staged_index(_host_index(idx, n, name, distinct=distinct), name, stream)


def _same_length(a, b, names: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"expected {names} of the same length, got {a.shape[0]} and {b.shape[0]}")


def _genomes(arr, name: str) -> np.dtype:
    return np.dtype(genome_dtype(require_device(arr, name), name))


def _moved(arr, name: str):
    """``arr`` as the row moves take it: half-precision rows (float16, bfloat16) as their
    uint16 bits (a move copies bits; Numba has no bfloat16), others checked as genomes."""
    if element_kind(require_device(arr, name).dtype) != "native" and len(arr.shape) == 2:
        return arr.view(np.uint16)
    _genomes(arr, name)
    return arr


def _same_genes(a, b, names: str) -> None:
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"expected {names} with the same number of genes, got "
                         f"{a.shape[1]} and {b.shape[1]}")


def describe(arr) -> str:
    """``arr``'s type, shape and dtype, for error messages."""
    return (f"{type(arr).__name__} of shape {tuple(getattr(arr, 'shape', ()))} "
            f"and dtype {getattr(arr, 'dtype', None)}")


def _host_result(dev, stream) -> np.ndarray:
    out = dev.copy_to_host(stream=stream)
    if not isinstance(stream, int):
        stream.synchronize()
    return out


def _launch_2d(kernel, rows: int, cols: int, stream, *args) -> None:
    if rows and cols:
        blocks, threads = launch_dims_2d(rows, cols)
        kernel[blocks, threads, stream](*args)


# ------------------------------------------------------------- row moves
def copy_rows(src, rows, dst, slots, *, stream=0) -> None:
    """``dst[slots[k]] = src[rows[k]]`` for every k (rows of device arrays).

    Args:
        src, dst: 2-D device arrays of one genome dtype and gene count; they must
            not share memory (in-place moves: :func:`retain_rows`).
        rows: indices into ``src``; slots: distinct indices into ``dst`` (same length).

    Raises:
        TypeError / ValueError: host arrays, dtypes, shapes or indices out of range.
    """
    src_bits, dst_bits = _moved(src, "src"), _moved(dst, "dst")
    if np.dtype(src.dtype) != np.dtype(dst.dtype):
        raise TypeError(f"expected dst of dtype {np.dtype(src.dtype)} (as src), got {np.dtype(dst.dtype)}")
    src, dst = src_bits, dst_bits
    _same_genes(src, dst, "src and dst")
    rows = _rows_index(rows, src.shape[0], "rows", stream)
    slots = _rows_index(slots, dst.shape[0], "slots", stream, distinct=True)
    _same_length(rows, slots, "rows and slots")
    _launch_2d(row_kernel("copy"), rows.shape[0], dst.shape[1], stream, src, rows, dst, slots)


def take_rows(src, rows, *, stream=0):
    """A new device array ``src[rows]`` of shape ``(len(rows), genes)``."""
    from numba import cuda

    _moved(src, "src")
    rows = _rows_index(rows, src.shape[0], "rows", stream)
    out = cuda.device_array((rows.shape[0], src.shape[1]), np.dtype(src.dtype), stream=stream)
    copy_rows(src, rows, out, np.arange(rows.shape[0]), stream=stream)
    return out


def retain_rows(genomes, slots, *, scratch_bytes: int = CHUNK_BYTES, stream=0) -> None:
    """``genomes[k] = old genomes[slots[k]]`` for ``k < len(slots)``, in place.

    Any order and overlap. Rows move through a device scratch of ``scratch_bytes``
    in whole rows (at least one; one more holds a row of a cycle longer than that),
    in batches whose reads all precede their writes (:func:`retain_plan`); with
    room for every moved row that is two kernel launches.

    Args:
        genomes: 2-D device array.
        slots: distinct rows in ``[0, len(genomes))`` (host or device; a device
            array is copied to the host to plan the moves).
        scratch_bytes: scratch bound in bytes.

    Raises:
        TypeError / ValueError: host genomes, bad slots.
    """
    from numba import cuda

    genomes = _moved(genomes, "genomes")
    dtype = np.dtype(genomes.dtype)
    n, dim = genomes.shape
    host = _host_index(slots.copy_to_host() if is_device(slots) else slots, n, "slots",
                       distinct=True)
    batch = max(1, int(scratch_bytes) // max(1, dim * dtype.itemsize))
    plan = retain_plan(host, batch)
    if not plan or dim == 0:
        return
    scratch_rows = 1 + max(int(s.max()) for _, _, s in plan)
    scratch = cuda.device_array((scratch_rows, dim), dtype, stream=stream)
    copy = row_kernel("copy")
    for into_scratch, rows, scratch_slots in plan:
        rows, scratch_slots = to_device(rows, stream), to_device(scratch_slots, stream)
        if into_scratch:
            _launch_2d(copy, rows.shape[0], dim, stream, genomes, rows, scratch, scratch_slots)
        else:
            _launch_2d(copy, rows.shape[0], dim, stream, scratch, scratch_slots, genomes, rows)


def retain_plan(slots: np.ndarray, batch: int) -> list[tuple[bool, np.ndarray, np.ndarray]]:
    """The copies of :func:`retain_rows`: ``(into_scratch, genome_rows, scratch_rows)``.

    ``into_scratch`` copies ``genome_rows`` to ``scratch_rows``, otherwise back.
    Moves (old row ``slots[k]`` to row ``k``; fixed points skipped) go in batches of
    at most ``batch``: all sources into the scratch, then all out. A batch may read
    a row only if no earlier batch wrote it, so moves follow the host kernel's order
    (each chain from the row nobody reads, back along its sources); a cycle goes in
    one batch when it fits, else its first row is held in scratch row ``batch``
    while the rest moves as a chain.
    """
    keep = slots.shape[0]
    moving = np.flatnonzero(slots != np.arange(keep))
    if moving.size <= batch:  # one batch: every read precedes every write
        return _batch(slots[moving], moving)
    read_by = np.full(max(keep, int(slots.max()) + 1), -1, np.int64)
    read_by[slots] = np.arange(keep)
    done = slots == np.arange(keep)
    plan, pending = [], []

    def flush():
        if pending:
            plan.extend(_batch(*np.array(pending, np.int64).T))
            pending.clear()

    def move(k):
        pending.append((slots[k], k))
        done[k] = True
        if len(pending) == batch:
            flush()

    for start in range(keep):
        k = start
        while read_by[k] < 0 and not done[k]:  # a chain: nobody reads old row k
            move(k)
            if slots[k] >= keep:
                break
            k = slots[k]
            read_by[k] = -1  # its reader has run: row k is free to be written
    for start in np.flatnonzero(~done):
        if done[start]:  # its cycle has moved
            continue
        cycle = [start]
        while slots[cycle[-1]] != start:
            cycle.append(slots[cycle[-1]])
        if len(cycle) > batch - len(pending):
            flush()
        if len(cycle) <= batch:
            for k in cycle:
                move(k)
            continue
        plan.append((True, np.array([start]), np.array([batch])))  # hold old row start
        for k in cycle[:-1]:
            move(k)
        flush()
        done[cycle[-1]] = True
        plan.append((False, np.array([cycle[-1]]), np.array([batch])))
    flush()
    return plan


def _batch(sources, targets) -> list[tuple[bool, np.ndarray, np.ndarray]]:
    if len(sources) == 0:
        return []
    staged = np.arange(len(sources))
    return [(True, np.asarray(sources), staged), (False, np.asarray(targets), staged)]


# ------------------------------------------------------------- comparisons
def rows_equal(a, ia, b, ib, *, stream=0) -> np.ndarray:
    """Host bool ``(k,)``: ``a[ia[k]] == b[ib[k]]`` gene-wise (NaN != NaN, -0.0 == 0.0).

    ``a`` and ``b`` are 2-D device arrays with the same gene count (float32 or
    float64, compared as numpy's ``==`` would).
    """
    from numba import cuda

    _genomes(a, "a")
    _genomes(b, "b")
    _same_genes(a, b, "a and b")
    ia = _rows_index(ia, a.shape[0], "ia", stream)
    ib = _rows_index(ib, b.shape[0], "ib", stream)
    _same_length(ia, ib, "ia and ib")
    equal = cuda.to_device(np.ones(ia.shape[0], np.uint8), stream=stream)
    _launch_2d(row_kernel("equal"), ia.shape[0], a.shape[1], stream, a, ia, b, ib, equal)
    return _host_result(equal, stream).astype(bool)


def hash_rows(genomes, *, stream=0) -> np.ndarray:
    """Host uint64 ``(n,)``: :func:`mpievo.evo.archive_records.row_hashes` of the rows, bit for bit.

    The hash is sequential along a row, so each row is one thread's: for a few
    very long rows this is far from the device's bandwidth.
    """
    from numba import cuda

    dtype = _genomes(genomes, "genomes")
    n = genomes.shape[0]
    out = cuda.device_array(n, np.uint64, stream=stream)
    if n:
        blocks, threads = launch_dims(n)
        bits = genomes.view(np.uint32 if dtype.itemsize == 4 else np.uint64)
        hash_kernel(dtype.itemsize)[blocks, threads, stream](bits, out)
    return _host_result(out, stream)


def centroid_distances(genomes, width, *, stream=0) -> np.ndarray:
    """Host float64 ``(n,)``: ``sqrt(sum_j ((G[i, j] - c_j) / width[j])**2)``, ``c`` the
    mean row (as :func:`mpievo.kernels.operators.centroid_distances`, to rounding:
    the genes are summed in another order). Allocates one float64 row (``c``)."""
    from numba import cuda

    _genomes(genomes, "genomes")
    m, dim = genomes.shape
    width = to_device(width, stream, np.float64)
    if tuple(width.shape) != (dim,) or np.dtype(width.dtype) != np.float64:
        raise ValueError(f"expected width of shape ({dim},) float64, got {tuple(width.shape)} "
                         f"{width.dtype}")
    if m == 0:
        return np.zeros(0)
    centroid = cuda.device_array(max(dim, 1), np.float64, stream=stream)
    if dim:
        blocks, threads = launch_dims(dim)
        row_kernel("centroid")[blocks, threads, stream](genomes, centroid)
    out = cuda_row_reduce.reduce_rows(distance_kernels(), genomes, centroid, width, stream=stream)
    return _host_result(out, stream)


# ------------------------------------------------------------- host transfers
def _flat_chunks(arr, chunk_bytes: int, name: str):
    if chunk_bytes < 1:
        raise ValueError(f"expected chunk_bytes >= 1, got {chunk_bytes}")
    contiguous = (arr.is_c_contiguous() if is_device(arr) else arr.flags.c_contiguous)
    if not contiguous:
        raise ValueError(f"expected {name} to be C-contiguous, got strides {tuple(arr.strides)}")
    step = max(1, chunk_bytes // np.dtype(arr.dtype).itemsize)
    size = int(np.prod(arr.shape))
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def to_host(src, out=None, *, chunk_bytes: int = CHUNK_BYTES, stream=0) -> np.ndarray:
    """Copy device array ``src`` into a host array in chunks of at most ``chunk_bytes``.

    Each chunk goes straight into ``out`` (no staging buffer, no second full-size
    copy on the host), which is what checkpoints of large genomes need.

    Args:
        src: C-contiguous device array (typically 2-D genomes).
        out: C-contiguous writeable numpy array of the same shape and dtype
            (allocated when None).

    Returns:
        ``out``, complete.
    """
    require_device(src, "src")
    if out is None:
        out = np.empty(tuple(src.shape), np.dtype(src.dtype))
    elif (not isinstance(out, np.ndarray) or out.shape != tuple(src.shape)
          or out.dtype != np.dtype(src.dtype) or not out.flags.writeable):
        raise ValueError(f"expected out: a writeable numpy array of shape {tuple(src.shape)} "
                         f"and dtype {np.dtype(src.dtype)}, got {describe(out)}")
    chunks = _flat_chunks(src, chunk_bytes, "src")
    _flat_chunks(out, chunk_bytes, "out")
    flat_src, flat_out = src.reshape(-1), out.reshape(-1)
    for start, stop in chunks:
        flat_src[start:stop].copy_to_host(flat_out[start:stop], stream=stream)
    if not isinstance(stream, int):
        stream.synchronize()
    return out


def from_host(src, dst=None, *, chunk_bytes: int = CHUNK_BYTES, stream=0):
    """Copy host array ``src`` to the device in chunks of at most ``chunk_bytes``.

    Args:
        src: C-contiguous numpy array.
        dst: C-contiguous device array of the same shape and dtype (allocated when None).

    Returns:
        ``dst``.
    """
    from numba import cuda

    if is_device(src) or not isinstance(src, np.ndarray):
        raise TypeError(f"expected src to be a numpy array, got {type(src).__module__}."
                        f"{type(src).__name__}")
    if dst is None:
        dst = cuda.device_array(src.shape, src.dtype, stream=stream)
    elif tuple(require_device(dst, "dst").shape) != src.shape or np.dtype(dst.dtype) != src.dtype:
        raise ValueError(f"expected dst of shape {src.shape} and dtype {src.dtype}, got "
                         f"{tuple(dst.shape)} {dst.dtype}")
    chunks = _flat_chunks(src, chunk_bytes, "src")
    _flat_chunks(dst, chunk_bytes, "dst")
    flat_src, flat_dst = src.reshape(-1), dst.reshape(-1)
    for start, stop in chunks:
        flat_dst[start:stop].copy_to_device(flat_src[start:stop], stream=stream)
    return dst
