"""``engine.genome = "delta"``: a row is a genome's difference from a base model.

The base is the first of the problem's bases (``bases[0]``), held once per node (see
:mod:`mpievo.evo.base_models`). The row box is the problem's box shifted by the base
(``[lower - base, upper - base]`` in the rows' dtype, rounded inwards; its width is the
problem's), so every operator, algorithm and bound mode works on deltas exactly as on
genomes; an island starts from the problem's starting genomes
minus the base (uniform in the box when it has none). A genome is
``clip(base + delta, lower, upper)`` in the engine's dtype.

Deltas are dense rows in the engine's dtype, never sparse: interpolation crossover
``omega*a + (1-omega)*b`` of two sparse deltas is their union (sparsity is lost within
a few generations). Half-precision deltas (``engine.dtype`` bfloat16 or float16, see
:mod:`mpievo.evo.half`) breed in float32 and round once per child; their genome is
``float32(base) + float32(delta)`` rounded once to the half type, then clipped (the
bases float32 or of the genomes' half type: a half model's sources stay in their dtype),
in one pass per genome (:func:`mpievo.kernels.half_rows.materialize_half`: the base and
the delta read once, the genome written once, no float32 temporary). What ``delta`` saves is the base: one copy per node instead
of one per rank, and checkpoints that hold deltas and the base's checksum. For
genomes far larger than memory use ``seeded``.

On a device island (``engine.device``, as for dense genomes) the rows are device rows:
the archive, the operators (breeding deltas in the row box) and migration treat them
as any device island's, and evaluation materialises the genomes on the GPU
(:mod:`mpievo.kernels.cuda_delta`, the host's bits) into a reused block of at most
``engine.materialize_budget`` bytes handed to the user's problem as device arrays: no
genome crosses PCIe per child. The base goes to the device once per process (on first
use, shared by the process's islands over the same bases): once per GPU, as each rank
drives one GPU (the hybrid scheme maps one rank per GPU).
"""

from __future__ import annotations


import numpy as np

from .. import device
from ...kernels import half_rows, half_start
from ...kernels.host import BFLOAT16
from ..problems import Problem
from ..base_models import BaseModels
from ..half import compute_dtype, is_half
from ..operators import box_arrays, cast_bound
from .encoded import EncodedProblem


#: genes per chunk of the shifted box (bounds its float64 temporaries to 512 KiB each)
_CHUNK = 1 << 16

def shifted_box(problem: Problem, base: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """``[lower - base, upper - base]`` in ``dtype``, rounded inwards like every box
    (:func:`~mpievo.evo.operators.box_arrays`), chunk by chunk: no float64 genome-sized
    temporaries, and the row box is as large as one row per bound."""
    lower, upper = np.empty(problem.dim, dtype), np.empty(problem.dim, dtype)
    if np.dtype(dtype) == BFLOAT16 and base.dtype == BFLOAT16:    # one pass, the same bits
        bounds = [np.asarray(b, np.float64) for b in (problem.lower, problem.upper)]
        uniform = all(b.strides == (0,) for b in bounds)
        bounds = [np.ascontiguousarray(b[:1] if uniform else b) for b in bounds]
        half_start.shifted_box_bf16(*bounds, uniform, base.view(np.uint16), lower.view(np.uint16),
                                    upper.view(np.uint16))
        return lower, upper
    for start in range(0, problem.dim, _CHUNK):
        part = slice(start, start + _CHUNK)
        shift = base[part].astype(np.float64)
        lower[part], upper[part] = box_arrays(problem.lower[part] - shift, problem.upper[part] - shift, dtype)
    return lower, upper


class DeltaProblem(EncodedProblem):
    """The user's ``problem`` over deltas from ``bases[0]`` (module docstring)."""

    genome = "delta"
    device_rows = True

    def __init__(self, problem: Problem, bases: BaseModels, *, dtype, budget: int):
        if is_half(dtype) and bases.dtype not in (np.float32, np.dtype(dtype)):
            raise ValueError(f"engine.dtype = {np.dtype(dtype).name!r} with delta genomes: expected float32 "
                             f"or {np.dtype(dtype).name} base models (the sum is computed in float32), got "
                             f"{bases.dtype.name}")
        initial = None if problem.initial is None else self._initial_deltas
        row_lower, row_upper = shifted_box(problem, bases.array[0], dtype)
        super().__init__(problem, bases, row_dim=problem.dim, row_lower=row_lower, row_upper=row_upper,
                         row_dtype=dtype, dtype=dtype, budget=budget, initial=initial)
        self._box = box_arrays(problem.lower, problem.upper, dtype)
        # the half kernel's box: one value per bound when every gene has the same (read once)
        uniform = all(np.all(b == b[0]) for b in self._box)
        self._box_bits = tuple((b[:1] if uniform else b).view(np.uint16) for b in self._box) \
            if is_half(dtype) else None
        self.device = device.evaluates_on_device(problem)   # rows evaluate where the genomes can
        self._placed = None                                   # (base, lower, upper, block) on the GPU

    @property
    def width(self) -> np.ndarray:
        """The genome box's width: a delta's box is the genome box, translated."""
        return self.inner.width

    def _initial_deltas(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self._deltas(self.inner._check_initial(self.inner.initial(rng, n), n))

    def _deltas(self, genomes: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        base = self.bases.array[0]
        deltas = np.empty(genomes.shape, self.row_dtype) if out is None else out
        for row, genome in zip(deltas, genomes):    # in float64, cast in the ufunc's chunks: no float64 row
            np.subtract(genome, base, out=row, dtype=np.float64, casting="unsafe")
        return deltas

    def initial_genomes(self, rng: np.random.Generator, n: int, dtype, out: np.ndarray | None = None) -> np.ndarray:
        """Generation 0's rows (:meth:`Problem.initial_genomes` over the row box), into
        ``out`` when given (an archive's own rows: no population beside the archive).
        bfloat16 deltas of bfloat16 starting genomes over bfloat16 bases take one pass a
        row (:func:`~mpievo.kernels.half_start.deltas_bf16`: the delta, the finiteness
        check and the clip of the element-wise code below, the same bits)."""
        base = self.bases.array[0]
        if self.initial is None or np.dtype(dtype) != self.row_dtype:
            return super().initial_genomes(rng, n, dtype, out)
        genomes = self.inner._check_initial(self.inner.initial(rng, n), n)
        out = np.empty((n, self.dim), dtype) if out is None else out
        if not (self.row_dtype == genomes.dtype == base.dtype == BFLOAT16 and self.lower.flags.c_contiguous):
            self._check_initial(self._deltas(genomes, out), n)      # as Problem.initial_genomes does
            return np.clip(out, *box_arrays(self.lower, self.upper, dtype), out=out)
        bad = 0
        for genome, row in zip(genomes, out):
            bad += half_start.deltas_bf16(np.ascontiguousarray(genome).view(np.uint16), base.view(np.uint16),
                                          self.lower.view(np.uint16), self.upper.view(np.uint16),
                                          row.view(np.uint16))
        if bad:
            raise ValueError(f"expected finite initial genomes from {self.name!r}, got {bad} non-finite genes")
        return out

    def materialize_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        base = self.bases.array[0]
        if is_half(self.dtype) and out.flags.c_contiguous:   # one pass, no float32 temporary
            none = np.empty(0, np.float32), np.empty(0, np.uint16)
            base = (none[0], base.view(np.uint16)) if is_half(base.dtype) else (base, none[1])
            half_rows.materialize_half(*base, np.ascontiguousarray(rows).view(np.uint16), *self._box_bits,
                                       out.view(np.uint16), self.dtype == BFLOAT16)
            return
        np.add(base, rows, out=out, casting="unsafe")
        np.clip(out, *self._box, out=out)

    def _evaluate_rows(self, rows) -> np.ndarray:
        """User values of the genomes of ``rows``; device rows (a device island's) are
        materialised on the GPU and the user's problem gets them as device arrays."""
        if not device.is_device_array(rows):
            return super()._evaluate_rows(rows)
        from mpievo.kernels import cuda_delta

        rows = device.as_numba(rows)
        base, lower, upper, block = self._device_arrays()
        values = np.empty(rows.shape[0])
        for start in range(0, rows.shape[0], self.block_rows):
            part = rows[start:start + self.block_rows]
            out = block[:part.shape[0]]
            cuda_delta.materialize(base, part, lower, upper, out)
            values[start:start + part.shape[0]] = self.inner.to_user(device.evaluate(self.inner, out))
        return values

    def _device_arrays(self) -> tuple:
        """The base (once per process and bases), the genome box and the evaluation block
        on the GPU, placed on first use."""
        if self._placed is None:
            from numba import cuda

            from mpievo.kernels.cuda import bound_to_device

            box = (cast_bound(a, compute_dtype(self.dtype)) for a in self._box)   # half: widened
            self._placed = (self.bases.on_device(row=0), *(bound_to_device(a) for a in box),
                            cuda.device_array((self.block_rows, self.genome_dim), self.dtype))
        return self._placed
