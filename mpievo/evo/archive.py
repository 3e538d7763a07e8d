"""An island's archive: a fixed-capacity elite set of genomes with their records.

Each member has a genome (a row of ``genomes``), a fitness (minimised, float64), an
id (int64, see :func:`~mpievo.evo.archive_records.make_ids`), the generation it was born in and the island it was
born on. :meth:`Archive.insert` merges a batch of candidates and keeps the best
``limit`` of members and candidates: a candidate replaces the worst member only
when strictly better (incumbents win ties; among candidates the earlier one wins), so
the result is deterministic. With ``unique=True`` a candidate whose genome equals a
member's or an earlier candidate's is dropped.

``limit`` (members in use, at most ``capacity``, the storage allocated) lets a
population grow without reallocating: the GA's restarts raise it
(:meth:`Archive.set_limit`); :meth:`Archive.retain` and :meth:`Archive.truncate`
drop members, and later inserts refill the freed slots.

Non-finite fitness (NaN, +inf, -inf) ranks worst: it is stored as +inf
(:func:`~mpievo.evo.archive_records.sanitize_fitness` also counts it).

Every slot carries a *row version* (:meth:`Archive.row_versions`): a number, unique in
the process, given to a row whenever a genome is written into its slot (``_write``,
``insert_children``) and moved with the row (``retain``). Two equal versions are the
same bytes, so a checkpoint can store only the rows whose versions it has not seen
(:mod:`mpievo.io.rows`). Code that writes rows into the storage must go through those
methods.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mpievo.kernels import operators as kernels
from .archive_records import VersionedRows, fresh_versions, row_hashes, sanitize_fitness
from .half import GENOME_DTYPES, genome_dtype

_DTYPES = tuple(genome_dtype(name) for name in GENOME_DTYPES)



def _moved(genomes: np.ndarray) -> np.ndarray:
    """``genomes`` as the row-move kernels take them: half types as their uint16 bits
    (Numba has no bfloat16; a move copies bits)."""
    return genomes.view(np.uint16) if genomes.dtype.itemsize == 2 else genomes


class Insertion(NamedTuple):
    """What :meth:`Archive.insert` did.

    Example::

        done = archive.insert(genomes, fitness, ids, origins, births)
        done.entered, done.slots, done.duplicates      # which candidates entered, where; repeats dropped
    """

    entered: np.ndarray      # indices (into the candidates) that entered, ascending
    slots: np.ndarray        # archive slots they went to (same order)
    duplicates: int          # candidates dropped as duplicates


class Archive:
    """Fixed-capacity elite archive (see the module docstring).

    Args:
        capacity: storage, the largest ``limit`` (>= 1).
        dim: genes per genome.
        dtype: genome dtype, float32, float64, bfloat16 or float16 (:mod:`.half`).
        unique: drop candidates whose genome is already held.
        limit: members kept by merges (1..capacity); None: ``capacity``.
        island: index of the island that owns the archive (its own members have
            ``origins == island``).

    Attributes (read-only views of the first ``size`` slots; do not modify):
        genomes (size, dim), fitness (size,), ids, births, origins (size,) int64.

    Example::

        import numpy as np
        archive = Archive(capacity=4, dim=2, dtype="float64")
        archive.insert(np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([3.0, 1.0]),
                       ids=np.arange(2), origins=np.zeros(2, int), births=np.zeros(2, int))
        archive.size, archive.fitness[archive.best_index()]                # (2, 1.0)
    """

    def __init__(self, capacity: int, dim: int, dtype="float32", *, unique: bool = False,
                 limit: int | None = None, island: int = 0):
        dtype = genome_dtype(dtype)
        if dtype not in _DTYPES:
            raise TypeError(f"expected genome dtype float32, float64, bfloat16 or float16, got {dtype}")
        if capacity < 1 or dim < 1:
            raise ValueError(f"expected capacity >= 1 and dim >= 1, got {capacity} and {dim}")
        self.capacity = int(capacity)
        self.dim = int(dim)
        self.dtype = dtype
        self.unique = bool(unique)
        self.island = int(island)
        self._genomes = self._allocate()
        self._fitness = np.full(self.capacity, np.inf)
        self._ids = np.full(self.capacity, -1, np.int64)
        self._births = np.zeros(self.capacity, np.int64)
        self._origins = np.zeros(self.capacity, np.int64)
        self._hashes = np.zeros(self.capacity, np.uint64) if self.unique else None
        self._versions = np.zeros(self.capacity, np.int64)     # see the module docstring
        self.size = 0
        self.limit = self.capacity
        if limit is not None:
            self.set_limit(limit)
        # own children merge in one compiled call where merge, writes and row moves are this
        # class's (a subclass that changes one of them, or unique, takes insert_rows)
        cls = type(self)
        self.merges_in_one_call = not self.unique and all(
            getattr(cls, name) is getattr(Archive, name) for name in ("_merge_slots", "_write", "_copy_rows"))

    # --- views -------------------------------------------------------------------
    @property
    def genomes(self) -> np.ndarray:
        return self._genomes[:self.size]

    @property
    def fitness(self) -> np.ndarray:
        return self._fitness[:self.size]

    @property
    def objectives(self) -> np.ndarray:
        """What migrants carry: ``fitness`` here; a ParetoArchive's (size, n_obj) objectives."""
        return self.fitness

    @property
    def ids(self) -> np.ndarray:
        return self._ids[:self.size]

    @property
    def births(self) -> np.ndarray:
        return self._births[:self.size]

    @property
    def origins(self) -> np.ndarray:
        return self._origins[:self.size]

    def __len__(self) -> int:
        return self.size

    def row_versions(self) -> np.ndarray:
        """A copy of the members' row versions (see the module docstring)."""
        return self._versions[:self.size].copy()

    # --- genome storage (host here; DeviceArchive keeps it on the GPU) ---------------
    on_device = False

    def _allocate(self):
        return np.zeros((self.capacity, self.dim), self.dtype)

    def as_rows(self, genomes, name: str = "genomes"):
        """``genomes`` as rows this archive stores (validated (n, dim), cast to its dtype;
        device rows are copied to the host)."""
        from .device import is_device_array, to_host  # lazy: device imports problems

        genomes = to_host(genomes) if is_device_array(genomes) else np.asarray(genomes)
        if genomes.ndim != 2 or genomes.shape[1] != self.dim:
            raise ValueError(f"expected {name} of shape (n, {self.dim}), got {genomes.shape}")
        return genomes.astype(self.dtype, copy=False)

    def take(self, slots):
        """Copies of the members in ``slots`` (in that order), where the archive keeps them."""
        return self.genomes[np.asarray(slots, dtype=np.intp)]

    def row(self, slot: int) -> np.ndarray:
        """A host copy of member ``slot``'s genome."""
        return self.genomes[slot].copy()

    def host_genomes(self) -> np.ndarray:
        """A host copy of the members' genomes."""
        return self.genomes.copy()

    def _row_hashes(self, genomes) -> np.ndarray:
        return row_hashes(genomes)

    def _rows_equal(self, a, ia, b, ib) -> np.ndarray:
        return np.all(a[ia] == b[ib], axis=1)

    def population_rows(self, count: int) -> np.ndarray | None:
        """The storage of the first ``count`` slots, for generation 0 to be written and
        evaluated in place (then :meth:`insert` it: rows already in their slots are not
        copied), so no population is held beside the archive; None where that does not
        apply (members already, a device archive, or a subclass that moves rows itself).

        Example:
            >>> archive = Archive(4, 3)
            >>> rows = archive.population_rows(2)
            >>> rows[:] = 1.0
            >>> archive.insert(rows, [2.0, 1.0], [0, 1], 0, 0).slots.tolist()
            [0, 1]
        """
        if self.size or not 0 < count <= self.limit or not self.merges_in_one_call:
            return None
        return self._genomes[:count]

    def _copy_rows(self, genomes, rows, slots) -> None:
        if genomes.base is self._genomes and genomes.ctypes.data == self._genomes.ctypes.data:
            # generation 0 written in place (population_rows): row k enters slot k, or,
            # with duplicates dropped, a lower one (read before it is written over)
            if self.size or np.any(slots > rows) or np.any(np.diff(slots) <= 0):
                genomes = genomes.copy()
            else:
                moved = np.flatnonzero(rows != slots)
                rows, slots = rows[moved], slots[moved]
        kernels.copy_rows(_moved(genomes), rows, _moved(self._genomes), slots)

    def _retain_rows(self, slots) -> None:
        kernels.retain_rows(_moved(self._genomes), slots)  # in place: no copy of the kept genomes

    def ranking(self) -> np.ndarray:
        """Member slots from best to worst (ties: lower slot first)."""
        return np.lexsort((np.arange(self.size), self.fitness))

    def best_index(self) -> int:
        """Slot of the best member (lowest slot among equals)."""
        if self.size == 0:
            raise ValueError("expected a non-empty archive, got an empty one")
        return int(np.argmin(self.fitness))

    # --- duplicates --------------------------------------------------------------
    def hashes(self) -> np.ndarray:
        """The :func:`row_hashes` of the members' genomes (with ``unique``, a read-only
        view of the hashes kept up to date; do not modify)."""
        return self._hashes[:self.size] if self.unique else self._row_hashes(self.genomes)

    def duplicate_mask(self, genomes: np.ndarray, hashes: np.ndarray | None = None) -> np.ndarray:
        """True for each row equal to a member's genome or to an earlier row."""
        genomes = self.as_rows(genomes)
        hashes = self._row_hashes(genomes) if hashes is None else hashes
        dup = np.zeros(genomes.shape[0], bool)
        if self.size:
            member_hashes = self.hashes()
            order = np.argsort(member_hashes, kind="stable")
            sorted_hashes = member_hashes[order]
            pos = np.minimum(np.searchsorted(sorted_hashes, hashes), self.size - 1)
            hit = np.flatnonzero(sorted_hashes[pos] == hashes)
            match = order[pos[hit]]
            same = self._rows_equal(self._genomes, match, genomes, hit)
            dup[hit[same]] = True
        _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        representative = first[inverse.reshape(-1)]
        later = np.flatnonzero(representative != np.arange(genomes.shape[0]))
        same = self._rows_equal(genomes, later, genomes, representative[later])
        dup[later[same]] = True
        return dup

    # --- updates -----------------------------------------------------------------
    def _check_batch(self, genomes, fitness, ids, origins, births):
        """Validated columns; int columns given as scalars stay scalars (broadcast on write)."""
        genomes = self.as_rows(genomes)
        n = genomes.shape[0]
        fitness, _ = sanitize_fitness(fitness)
        if fitness.shape != (n,):
            raise ValueError(f"expected fitness of shape ({n},), got {fitness.shape}")
        columns = [genomes, fitness]
        for name, col in (("ids", ids), ("origins", origins), ("births", births)):
            if np.ndim(col) == 0:
                columns.append(np.int64(col))
                continue
            col = np.asarray(col, dtype=np.int64)
            if col.shape != (n,):
                raise ValueError(f"expected {name} of shape ({n},), got {col.shape}")
            columns.append(col)
        return columns

    def _write(self, slots, genomes, rows, fitness, ids, origins, births, hashes):
        """Rows ``rows`` of ``genomes`` and the other columns into ``slots``; genomes are
        copied row by row (no temporary of the rows taken: genomes may be large)."""
        self._copy_rows(genomes, rows, slots)
        self._fitness[slots] = fitness
        self._ids[slots] = ids
        self._origins[slots] = origins
        self._births[slots] = births
        self._versions[slots] = fresh_versions(np.size(slots))
        if self.unique:
            self._hashes[slots] = hashes

    def insert(self, genomes, fitness, ids, origins, births) -> Insertion:
        """Merge candidates into the archive, keeping the best ``capacity``.

        Args:
            genomes: (n, dim) candidates.
            fitness: (n,) minimised fitness (non-finite ranks worst).
            ids, origins, births: (n,) int64 or scalars (same order as
                :class:`~mpievo.evo.migration_policy.Migrants`).

        Returns:
            :class:`Insertion` (which candidates entered, where, duplicates dropped).
        """
        return self.insert_rows(*self._check_batch(genomes, fitness, ids, origins, births))

    def insert_rows(self, genomes, fitness, ids, origins, births) -> Insertion:
        """:meth:`insert` of columns validated already (what ``_check_batch`` returns:
        rows of this archive's dtype, float64 fitness with no NaN, int64 ids, origins
        and births or int scalars), for a caller that checked them once itself."""
        hashes = self._row_hashes(genomes) if self.unique else None
        n = genomes.shape[0]
        candidates = np.arange(n)
        duplicates = 0
        if self.unique and n:
            keep = ~self.duplicate_mask(genomes, hashes)
            duplicates = int(n - np.count_nonzero(keep))
            candidates = candidates[keep]
        if duplicates:
            entered, slots = self._merge_slots(fitness[candidates])
            entered = candidates[entered]
        else:
            entered, slots = self._merge_slots(fitness)
        if len(entered):
            pick = lambda col: col if np.ndim(col) == 0 else col[entered]  # noqa: E731
            self._write(slots, genomes, entered, fitness[entered], pick(ids), pick(origins),
                        pick(births), hashes[entered] if self.unique else None)
            self.size = max(self.size, int(slots.max()) + 1)
        return Insertion(entered, slots, duplicates)

    def insert_children(self, genomes, fitness, first: int, birth: int) -> tuple[int, float, float]:
        """:meth:`insert_rows` of this island's own children, validated already, with ids
        ``first, first + 1, ...``, origin ``island`` and birth ``birth``, in one compiled
        call (only where ``merges_in_one_call``).

        Returns:
            (children entered, the members' best fitness before, after).
        """
        if not self.merges_in_one_call:
            raise TypeError(f"expected an archive that merges in one call, got {type(self).__name__} "
                            f"(unique={self.unique})")
        ids = self._ids[:self.limit].copy()    # a slot that took a child has its fresh id
        entered, self.size, before, after = kernels.merge_children(
            _moved(genomes), fitness, _moved(self._genomes), self._fitness, self._ids, self._origins,
            self._births, self.size, self.limit, first, self.island, birth)
        changed = np.flatnonzero(self._ids[:self.limit] != ids)
        self._versions[changed] = fresh_versions(len(changed))
        return entered, before, after

    def _merge_slots(self, candidate_fitness: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which candidates enter (indices into ``candidate_fitness``) and their slots."""
        return kernels.survivors(self.fitness, np.ascontiguousarray(candidate_fitness), self.limit)

    def replace(self, slots, genomes, fitness, ids, origins, births) -> None:
        """Overwrite the given member slots unconditionally (slots < size, or == size.. to append)."""
        genomes, fitness, ids, origins, births = self._check_batch(genomes, fitness, ids, origins, births)
        slots = np.asarray(slots, dtype=np.int64)
        n = genomes.shape[0]
        ids, origins, births = (np.full(n, c) if np.ndim(c) == 0 else c for c in (ids, origins, births))
        if slots.shape != (n,) or (len(slots) and (slots.min() < 0 or slots.max() >= self.limit)):
            raise ValueError(f"expected {n} slots in [0, {self.limit}), got {slots}")
        if len(slots) and not np.all(np.isin(np.arange(self.size, slots.max() + 1), slots)):
            raise ValueError(f"expected slots that leave no gap after the {self.size} members, got {slots}")
        self._write(slots, genomes, np.arange(n), fitness, ids, origins, births,
                    self._row_hashes(genomes) if self.unique else None)
        if len(slots):
            self.size = max(self.size, int(slots.max()) + 1)

    def set_limit(self, limit: int) -> None:
        """Set how many members merges keep; lowering it below ``size`` drops the worst.

        Raises:
            ValueError: ``limit`` not an int in [1, capacity].
        """
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or not 1 <= limit <= self.capacity:
            raise ValueError(f"expected an archive limit in [1, {self.capacity}], got {limit!r}")
        self.limit = int(limit)
        if self.size > self.limit:
            self.truncate(self.limit)

    def retain(self, slots) -> None:
        """Keep only the members in ``slots``, moved to slots ``0..len(slots)-1`` in that order.

        Raises:
            ValueError: slots not distinct member slots.
        """
        slots = np.asarray(slots, dtype=np.int64)
        if slots.ndim != 1 or (len(slots) and (slots.min() < 0 or slots.max() >= self.size)) \
                or len(np.unique(slots)) != len(slots):
            raise ValueError(f"expected distinct member slots in [0, {self.size}), got {slots}")
        columns = [self._fitness, self._ids, self._origins, self._births, self._versions]
        if self.unique:
            columns.append(self._hashes)
        keep = len(slots)
        self._retain_rows(slots)
        for column in columns:
            column[:keep] = column[slots]  # fancy indexing copies first: overlap is safe
        self._fitness[keep:self.size] = np.inf
        self.size = keep

    def truncate(self, keep: int) -> None:
        """Keep only the best ``keep`` members (rank order, see :meth:`retain`).

        Raises:
            ValueError: ``keep`` < 0.
        """
        if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 0:
            raise ValueError(f"expected keep to be an int >= 0, got {keep!r}")
        if keep < self.size:
            self.retain(self.ranking()[:keep])

    # --- checkpoint --------------------------------------------------------------
    def state_dict(self, copy: bool = True) -> dict:
        """Members as numpy arrays (copies) plus capacity/limit/unique/dtype.

        Args:
            copy: False: a host archive's genomes as a read-only view (no genome-sized
                copy), for a caller that writes them out before the archive changes;
                the view is a :class:`VersionedRows` (a checkpoint then stores only
                the rows it has not stored before).
        """
        if copy:
            genomes = self.host_genomes()
        else:
            rows = self.host_genomes() if self.on_device else self.genomes
            genomes = VersionedRows.of(rows, self.row_versions())
        return {
            "genomes": genomes, "fitness": self.fitness.copy(), "ids": self.ids.copy(),
            "births": self.births.copy(), "origins": self.origins.copy(),
            "capacity": self.capacity, "limit": self.limit, "unique": self.unique,
            "dtype": self.dtype.name,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore members saved by :meth:`state_dict` (exact).

        Raises:
            ValueError: capacity, dim or dtype differ from this archive's.
        """
        genomes = np.asarray(state["genomes"])
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"expected archive capacity {self.capacity}, got {int(state['capacity'])}")
        if genomes.ndim != 2 or genomes.shape[1] != self.dim or genomes.shape[0] > self.capacity:
            raise ValueError(f"expected genomes of shape (<= {self.capacity}, {self.dim}), got {genomes.shape}")
        if genomes.dtype != self.dtype:
            raise ValueError(f"expected genomes of dtype {self.dtype}, got {genomes.dtype}")
        size = genomes.shape[0]
        self.size = 0
        self._fitness[:] = np.inf
        # states written before the limit existed used the whole capacity
        self.limit = self.capacity
        self.set_limit(int(state.get("limit", self.capacity)))
        if size > self.limit:
            raise ValueError(f"expected at most limit = {self.limit} members, got {size}")
        self.replace(np.arange(size), genomes, state["fitness"], state["ids"], state["origins"],
                     state["births"])
