"""What the ``delta`` and ``seeded`` encodings share: an :class:`EncodedProblem`.

An encoding turns the user's :class:`~mpievo.evo.problems.Problem` (whole genomes of
``dim`` genes) into a Problem over *rows* -- what archives hold, operators breed,
migration sends and checkpoints store -- whose ``evaluate`` materialises the rows
into whole genomes and calls the user's problem on them. So every part of the
engine and every scheme (islands, groups of ranks evaluating row blocks, a
replicated archive) works through it unchanged, and with seeded rows only recipes
travel between ranks: each rank materialises what it evaluates from the bases it
holds (once per node).

Materialising is bounded by ``engine.materialize_budget`` bytes of whole genomes:
half of it (at least one genome) is the block that evaluation fills and hands to the
user's function, the rest an LRU cache of materialised members for
:meth:`EncodedProblem.decode` (best genomes, a seeded island's diversity).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from ..pipeline import pipelined_rows, settle_rows
from ..problems import Problem
from ..base_models import BaseModels


def encoding_of(problem) -> "EncodedProblem | None":
    """The encoded problem behind ``problem`` (itself, or the one a wrapper copied), or
    None for dense genomes."""
    return getattr(problem, "encoded", None)


class EncodedProblem(Problem):
    """A Problem over encoded rows (see the module docstring); subclasses define
    :meth:`materialize_into` and the row format.

    Attributes:
        inner: the user's problem (whole genomes).
        bases: its :class:`BaseModels`.
        genome: the encoding's name.
        genome_dim: genes of a whole genome (``inner.dim``).
        row_dtype: dtype of the rows.
        dtype: dtype of materialised genomes (the engine's ``dtype``).
        device_rows: whether the rows may live on a device island (genome-shaped
            rows whose evaluation takes device arrays).
    """

    genome = "dense"
    device_rows = False

    def __init__(self, inner: Problem, bases: BaseModels, *, row_dim: int, row_lower, row_upper,
                 row_dtype, dtype, budget: int, initial=None):
        super().__init__(self._evaluate_rows, row_dim, row_lower, row_upper, maximize=inner.maximize,
                         name=f"{inner.name} ({self.genome} genomes)", batched=True, initial=initial)
        self.inner = inner
        self.bases = bases
        self.genome_dim = inner.dim
        self.row_dtype = np.dtype(row_dtype)
        self.dtype = np.dtype(dtype)
        genome_bytes = inner.dim * self.dtype.itemsize
        fit = max(1, int(budget) // genome_bytes)
        self.block_rows = max(1, fit // 2)
        self.cache_rows = fit - self.block_rows
        self._block = None
        # a problem that owns the memory its genomes must end up in (a model's flat
        # parameters, mpievo.torch) lends it as the block: materialising writes there
        # directly, with no block of our own and no copy after
        lend = getattr(inner, "genome_block", None)
        lent = lend(self.dtype) if lend is not None else None
        if lent is not None:
            self._block, self.block_rows = lent, lent.shape[0]
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        # wrappers that copy a problem's __dict__ (a group's or a replica's view of it)
        # keep pointing here: see encoding_of
        self.encoded = self

    # --- materialising -------------------------------------------------------------
    def materialize_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Whole genomes of ``rows`` into ``out`` (len(rows), genome_dim)."""
        raise NotImplementedError

    def _block_buffer(self) -> np.ndarray:
        if self._block is None:
            self._block = np.empty((self.block_rows, self.genome_dim), self.dtype)
        return self._block

    def blocks(self, rows: np.ndarray):
        """Yield ``(start, genomes)``: the materialised genomes of ``rows`` in blocks of
        at most ``block_rows`` (a reused buffer: use each block before the next)."""
        rows = np.asarray(rows)
        block = self._block_buffer()
        for start in range(0, rows.shape[0], self.block_rows):
            part = rows[start:start + self.block_rows]
            out = block[:part.shape[0]]
            self.materialize_into(part, out)
            yield start, out

    def _evaluate_rows(self, rows: np.ndarray) -> np.ndarray:
        """The user's values of the genomes of ``rows`` (Problem's ``func``); pipelined
        (:mod:`mpievo.evo.pipeline`) where the user's problem lends two genome buffers."""
        lend = getattr(self.inner, "genome_blocks", None)
        blocks = lend(self.dtype) if lend is not None and rows.shape[0] > 1 else None
        if blocks is not None:                  # children bred as they are made
            return pipelined_rows(rows, lambda i, slot: self.materialize_into(rows[i:i + 1], blocks[slot]),
                                  lambda i, slot: self.inner(blocks[slot])[0])
        settle_rows(rows)
        values = np.empty(rows.shape[0])
        for start, genomes in self.blocks(rows):
            values[start:start + genomes.shape[0]] = self.inner(genomes)
        return values

    def evaluates_deferred_rows(self) -> bool:
        """Whether evaluation makes the children on the pipeline's helper thread (the
        user's problem lends two genome buffers), so that breeding may defer their rows
        to it (:mod:`mpievo.evo.pipeline`)."""
        lend = getattr(self.inner, "genome_blocks", None)
        on_device = getattr(self, "device", False) or getattr(self, "on_device", False)
        return lend is not None and not on_device and lend(self.dtype) is not None

    def decode(self, row) -> np.ndarray:
        """The whole genome of one row (a fresh array; members are cached, see the
        module docstring)."""
        row = np.ascontiguousarray(np.asarray(row, self.row_dtype).reshape(-1))
        key = hashlib.blake2b(row, digest_size=16).digest()   # not the row's bytes: a genome-sized copy
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit.copy()
        out = np.empty((1, self.genome_dim), self.dtype)
        self.materialize_into(row[None, :], out)
        if self.cache_rows:
            self._cache[key] = out[0]
            while len(self._cache) > self.cache_rows:
                self._cache.popitem(last=False)
        return out[0].copy()

    # --- checkpoints ---------------------------------------------------------------
    def metadata(self) -> dict:
        """What an island's checkpoint records of the encoding under ``genome`` (plain
        values; the bases by reference and checksum, never the bases)."""
        return {"encoding": self.genome, "dim": self.genome_dim,
                "dtype": self.dtype.name, "bases_reference": self.bases.reference,
                "bases_checksum": self.bases.checksum,
                "bases_shape": np.asarray(self.bases.shape, np.int64)}

    def check_metadata(self, saved: dict) -> None:
        """Refuse a checkpoint of another encoding or other bases (``saved``: the state's ``genome``).

        Raises:
            ValueError: naming the key, what was expected and what the state holds.
        """
        for name, expected in self.metadata().items():
            if name == "bases_reference":
                continue  # the same bases may move to another path
            got, key = saved.get(name), f"genome/{name}"
            if isinstance(expected, np.ndarray):
                same = got is not None and np.array_equal(np.asarray(got), expected)
            else:
                same = got == expected
            if not same:
                raise ValueError(f"expected {key} = {expected!r} in the island state "
                                 f"(bases {self.bases.reference}), got {got!r}")
