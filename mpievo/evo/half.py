"""Half-precision genomes: ``engine.dtype = "bfloat16"`` or ``"float16"``.

Archives, migrants and checkpoints hold the half type (2 bytes a gene, half of
float32's). Breeding computes in float32 and rounds once: the parents a generation
uses are widened to float32 (exactly: every half value is a float32 value), the GA's
operators -- crossover, mutation, box handling, all in float32 as for a float32
island -- write float32 children, and :meth:`HalfBreeding.round_into` rounds each
child to the half type once, to nearest, ties to even (what
``astype(ml_dtypes.bfloat16)`` and numpy's ``astype(np.float16)`` do; NaN stays a
quiet NaN). The box is rounded inwards in the half type and then widened, so a
child in the float32 box rounds to a value inside the box.

The conversions are the bit-pattern kernels of :mod:`mpievo.kernels.bitcast` on the
host and :mod:`mpievo.kernels.cuda.half` on the device; numpy has no bfloat16, so
bfloat16 rows are ``ml_dtypes.bfloat16`` arrays (a torch bfloat16 tensor's memory,
viewed as ``ml_dtypes.bfloat16``, is such a row, with no copy).

Supported: the GA, dense and delta genomes, host and device islands. DE/jDE, SHADE
and CMA-ES keep float64 state and add float64 steps to their members: rounding a
member to 8 (bfloat16) or 11 (float16) significant bits after every step would stall
their adaptation, so they refuse half types; seeded rows are float64 recipes and
refuse them too.
"""

from __future__ import annotations

import numpy as np

from ..kernels import bitcast, counter_operators, half_rows
from ..kernels.host import BFLOAT16
from . import operators as ops
from . import pipeline
from .operators import cast_bound

#: every ``engine.dtype``
GENOME_DTYPES = ("float32", "float64", "bfloat16", "float16")
#: the half-precision ones
HALF_DTYPES = ("bfloat16", "float16")
#: algorithms that breed half-precision genomes
HALF_ALGORITHMS = ("ga",)


def genome_dtype(dtype) -> np.dtype:
    """``dtype`` (a name of :data:`GENOME_DTYPES` or a dtype) as a numpy dtype;
    ``"bfloat16"`` is ``ml_dtypes.bfloat16``."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return BFLOAT16
    return np.dtype(dtype)


def is_half(dtype) -> bool:
    """True for float16 and bfloat16."""
    return genome_dtype(dtype) in (np.dtype(np.float16), BFLOAT16)


def compute_dtype(dtype) -> np.dtype:
    """The dtype operators compute in for genomes of ``dtype``: float32 for a half type."""
    return np.dtype(np.float32) if is_half(dtype) else genome_dtype(dtype)


def check_half(config, algorithm: str | None) -> None:
    """Refuse a half ``config.dtype`` with what cannot breed it (module docstring).

    Raises:
        ValueError: an algorithm other than the GA, or seeded genomes.
    """
    if config.dtype not in HALF_DTYPES:
        return
    if algorithm not in HALF_ALGORITHMS:
        raise ValueError(f"engine.dtype = {config.dtype!r}: expected algorithm 'ga' (the others keep "
                         f"float64 state; use float32 with them), got {algorithm!r}")
    if config.genome == "seeded":
        raise ValueError(f"engine.dtype = {config.dtype!r}: expected genome 'dense' or 'delta' (seeded "
                         "rows are float64 recipes), got 'seeded'")


def _bits(arr: np.ndarray, itemsize: int) -> np.ndarray:
    return arr.reshape(-1).view(np.uint16 if itemsize == 2 else np.uint32)


def widen_into(rows: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Half-precision host ``rows`` as float32 in ``out`` (same shape, C-contiguous), exactly."""
    bitcast.decode_bits(_bits(np.ascontiguousarray(rows), 2), _bits(out, 4), rows.dtype == BFLOAT16)
    return out


def bits(rows: np.ndarray) -> np.ndarray:
    """A ``uint16`` view of half-precision host ``rows`` (what the half kernels read)."""
    return rows.view(np.uint16)


def centroid_distances(rows: np.ndarray, width, out: np.ndarray) -> np.ndarray:
    """Each half-precision host row's scaled distance to the rows' centroid (as
    :func:`mpievo.kernels.operators.centroid_distances` of the rows widened), widened a
    tile at a time: no float32 copy of the rows.

    Example:
        >>> import numpy as np
        >>> rows = np.array([[0.0, 1.0], [2.0, 1.0]], np.float16)
        >>> centroid_distances(rows, np.ones(2), np.empty(2)).tolist()
        [1.0, 1.0]
    """
    width = np.broadcast_to(np.asarray(width, np.float64), (rows.shape[1],))
    half_rows.centroid_distances_half(bits(np.ascontiguousarray(rows)), rows.dtype == BFLOAT16, width, out)
    return out


def round_into(rows: np.ndarray, out: np.ndarray) -> np.ndarray:
    """float32 host ``rows`` rounded to ``out``'s half type (nearest, ties to even)."""
    bitcast.encode_bits(_bits(np.ascontiguousarray(rows), 4), _bits(out, 2), out.dtype == BFLOAT16)
    return out


def uniform_genomes(ops, rng, lower, upper, out, *, on_device: bool = False):
    """``ops.uniform_genomes`` into rows ``out`` of any genome dtype, the box (host arrays
    in ``out``'s dtype) placed by ``ops``: half-precision rows are drawn in float32 (the
    counter-based kernels know no half type) and rounded once."""
    if not is_half(out.dtype):
        return ops.uniform_genomes(rng, ops.place(lower), ops.place(upper), out)
    breeding = HalfBreeding(out.dtype, on_device=on_device)
    lower, upper = (ops.place(cast_bound(a, np.float32)) for a in (lower, upper))
    return breeding.round_into(ops.uniform_genomes(rng, lower, upper, breeding.work(tuple(out.shape))), out)


class HalfBreeding:
    """The float32 side of a half-precision island's breeding (module docstring).

    Args:
        dtype: the archive's half dtype.
        on_device: the archive's rows are device arrays.
    """

    def __init__(self, dtype, *, on_device: bool = False):
        self.dtype = genome_dtype(dtype)
        self.on_device = on_device
        self._work = None

    def work(self, shape: tuple[int, int]):
        """The float32 children buffer (reused while the shape stays)."""
        if self._work is None or tuple(self._work.shape) != tuple(shape):
            if self.on_device:
                from numba import cuda

                self._work = cuda.device_array(shape, np.float32)
            else:
                self._work = np.empty(shape, np.float32)
        return self._work

    def parents(self, genomes, idx_a, idx_b):
        """(float32 rows of the members ``idx_a`` and ``idx_b`` use, their indices there):
        each parent is widened once, however often it is picked."""
        used, inverse = np.unique(np.concatenate([idx_a, idx_b]), return_inverse=True)
        n = len(idx_a)
        if self.on_device:
            from mpievo.kernels.cuda import half as cuda_half

            rows = cuda_half.widen_rows(genomes, used, self.dtype)
        else:
            used_rows = genomes.view(np.uint16)[used].view(self.dtype)   # numpy gathers uint16 fast
            rows = widen_into(used_rows, np.empty((len(used), genomes.shape[1]), np.float32))
        return rows, inverse[:n].astype(np.int64), inverse[n:].astype(np.int64)

    def fuses(self, dim: int) -> bool:
        """Whether :meth:`breed` breeds children of ``dim`` genes in one pass (host rows of
        the counter-based kernels' size)."""
        return not self.on_device and ops.counter_based(dim)

    def breed(self, genomes, idx_a, idx_b, rng, lower, upper, out, *, omega, rate, steps, scale,
              bounds: str = "clip", defer: bool = False):
        """Interpolation crossover and mutation of the half-precision ``genomes``' rows
        ``idx_a``, ``idx_b`` into the half-precision children ``out`` in one pass: the
        draws, the float32 arithmetic and the rounding of :meth:`parents`,
        :func:`mpievo.evo.operators.breed` and :meth:`round_into` (same bits), each
        parent's tile widened where it is used (no float32 copy of the parents, no second
        pass to round). Host rows of at least :data:`mpievo.evo.operators.COUNTER_DIM` genes
        (:meth:`fuses`).

        With ``defer`` (and ``bounds`` other than resample, whose draws depend on the batch's
        size) the draws are taken now and each child's row is bred when it is made
        (:func:`mpievo.evo.pipeline.defer`); its count is filled then.

        Returns:
            (children ``out``, per-row number of mutated genes).

        Example:
            >>> import numpy as np
            >>> breeding = HalfBreeding("float16")
            >>> breeding.fuses(10)   # small rows: the pre-drawn kernels, not this one
            False
        """
        n, dim = out.shape
        code = ops.bound_code(bounds)
        w = ops.draw_omega(rng, n, omega, np.float32)
        plan = ops.vary_plan(rng, n, dim, rate, code)
        counts = np.zeros(n, np.int64)
        args = (bits(genomes), np.asarray(idx_a, np.int64), np.asarray(idx_b, np.int64), w,
                ops.steps_array(steps, n, np.float32))
        fixed = (scale, lower, upper, code, np.uint64(plan.threshold), plan.inv_log_q, plan.dense, plan.key)
        if defer and bounds != "resample":
            children = bits(out)

            def breed_one(c: int) -> None:      # child c's blocks follow the c children before it, as in the batch
                one = slice(c, c + 1)
                half_rows.vary_half(args[0], *(a[one] for a in args[1:]), *fixed,
                                    np.uint64(plan.base + counter_operators.mutation_blocks(c, dim, code)),
                                    counts[one], children[one],
                                    self.dtype == BFLOAT16)

            pipeline.defer(out, breed_one)
            return out, counts
        half_rows.vary_half(*args, *fixed, np.uint64(plan.base), counts, bits(out), self.dtype == BFLOAT16)
        return out, counts

    def round_into(self, work, out):
        """Round the float32 children ``work`` into the half-precision ``out``, once."""
        if self.on_device:
            from mpievo.kernels.cuda import half as cuda_half

            return cuda_half.round_rows(work, out, self.dtype)
        return round_into(work, out)
