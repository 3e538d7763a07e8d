"""Host (Numba) kernels for the evolutionary engine's variation operators.

The engine (``mpievo.evo.operators``) draws every random number from an explicit
``numpy.random.Generator`` and hands the draws to these kernels, which are pure
functions of their arguments. That split keeps results keyed only by the random
stream (bit-identical wherever they run) and lets a device version slot in with
the same arguments: the draws become device arrays and the kernel a CUDA one.

Kernels (all row-vectorised, no Python loop per child or gene):

* :func:`interpolate_rows` -- ``out[i] = b + w_i (a - b)`` with ``a = G[ia[i]]``,
  ``b = G[ib[i]]`` (``= w a + (1 - w) b``), clipped to the box to absorb rounding.
* :func:`mutate_sparse` -- Gaussian mutation of ``counts[i]`` distinct genes of row
  ``i`` (positions by Floyd's sampling from pre-drawn uniforms), each mutated gene
  then put back in the box (clip / reflect / resample).
* :func:`breed_interpolate_mutate` -- the two above in one dispatch; identical
  results to calling them in sequence.
* :func:`bound_rows` -- clip or reflect every gene of a batch (for operators whose
  children can leave the box: blend, SBX, differential evolution).
* :func:`sum_squares_rows` -- ``sum_j x_ij**2`` accumulated in float64 (sphere).
* :func:`hash_rows` -- a 64-bit hash of each row's values (uniqueness checks).
* :func:`kth_smallest` -- quickselect (compiles in a fraction of ``np.partition``'s time).
* :func:`survivors` -- the archive merge: which candidates enter, into which slots.
* :func:`merge_children` -- the merge of an island's own children, rows and columns
  written, in one call.
* :func:`copy_rows`, :func:`retain_rows` -- archive row moves without a temporary
  copy of the rows moved (genomes may be tens of megabytes each).
* :func:`centroid_distances` -- each row's scaled distance to the rows' centroid
  (an island's diversity) without a float64 copy of the rows.

Box modes are small ints: :data:`BOUND_CLIP`, :data:`BOUND_REFLECT`,
:data:`BOUND_RESAMPLE`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

BOUND_CLIP = 0
BOUND_REFLECT = 1
BOUND_RESAMPLE = 2

#: mode name -> kernel code
BOUND_MODES = {"clip": BOUND_CLIP, "reflect": BOUND_REFLECT, "resample": BOUND_RESAMPLE}

_JIT = dict(cache=True, nogil=True)


@numba.njit(**_JIT)
def _bound_value(x, lo, hi, mode, u):
    """Put one value back into [lo, hi] (``u`` in [0, 1) is used by resample)."""
    if x >= lo and x <= hi:
        return x
    if mode == BOUND_RESAMPLE:
        y = lo + u * (hi - lo)
    elif mode == BOUND_REFLECT:
        width = hi - lo
        if width <= 0:
            y = lo
        else:
            # Fold onto a period of 2*width so that any overshoot lands inside.
            r = (x - lo) % (2 * width)
            y = lo + (r if r <= width else 2 * width - r)
    else:
        y = x
    # Guard: a NaN goes to lo, and rounding never leaves the box.
    if not (y >= lo):
        return lo
    if y > hi:
        return hi
    return y


@numba.njit(**_JIT)
def interpolate_rows(genomes, idx_a, idx_b, omega, lower, upper, out):
    """``out[i] = clip(G[ib[i]] + omega[i] * (G[ia[i]] - G[ib[i]]))`` for every row."""
    # Here and in mutate_sparse rows are indexed in place rather than passed as row
    # views to a per-row helper: each array passed to a jitted call costs atomic
    # reference-count updates, which made the sparse mutation 3x slower.
    for i in range(out.shape[0]):
        a = idx_a[i]
        b = idx_b[i]
        w = omega[i]
        for j in range(out.shape[1]):
            x = genomes[b, j] + w * (genomes[a, j] - genomes[b, j])
            out[i, j] = min(max(x, lower[j]), upper[j])


@numba.njit(**_JIT)
def mutate_sparse(x, counts, pos_uniforms, normals, resample_uniforms, steps, scale,
                  lower, upper, mode):
    """Mutate ``counts[i]`` distinct genes of each row of ``x`` in place.

    Floyd's algorithm picks the k distinct positions of a row out of ``dim`` with k
    uniforms; with ``k == dim`` every gene is mutated in order and no uniform is read.

    Args:
        x: (n, dim) genomes.
        counts: (n,) int64, genes to mutate per row (<= dim).
        pos_uniforms: (sum(counts),) float64 in [0, 1) for positions (may be empty
            when every count equals dim).
        normals: (sum(counts),) standard normals, same dtype as ``x``.
        resample_uniforms: (sum(counts),) float64 in [0, 1), read only by resample.
        steps: (n,) step size of each row, in units of ``scale``.
        scale: (dim,) per-gene scale (e.g. the box width).
        lower, upper: (dim,) box.
        mode: BOUND_CLIP, BOUND_REFLECT or BOUND_RESAMPLE.

    ``normals``, ``steps``, ``scale``, ``lower`` and ``upper`` share ``x``'s dtype.
    """
    dim = x.shape[1]
    mark = np.zeros(dim, np.int64)  # mark[gene] == i + 1: gene already taken in row i
    start = 0
    for i in range(x.shape[0]):
        k = counts[i]
        step = steps[i]
        for t in range(k):
            if k == dim:
                gene = t
            else:
                top = dim - k + t
                gene = int(pos_uniforms[start + t] * (top + 1))
                if gene > top:
                    gene = top
                if mark[gene] == i + 1:
                    gene = top
                mark[gene] = i + 1
            u = resample_uniforms[start + t] if mode == BOUND_RESAMPLE else 0.0
            v = x[i, gene] + step * scale[gene] * normals[start + t]
            x[i, gene] = _bound_value(v, lower[gene], upper[gene], mode, u)
        start += k


@numba.njit(**_JIT)
def breed_interpolate_mutate(genomes, idx_a, idx_b, omega, counts, pos_uniforms,
                             normals, resample_uniforms, steps, scale, lower, upper,
                             mode, out):
    """:func:`interpolate_rows` into ``out`` then :func:`mutate_sparse` of ``out``
    in one dispatch; identical results to calling them in sequence."""
    interpolate_rows(genomes, idx_a, idx_b, omega, lower, upper, out)
    mutate_sparse(out, counts, pos_uniforms, normals, resample_uniforms, steps, scale,
                  lower, upper, mode)


@numba.njit(**_JIT)
def bound_rows(x, lower, upper, mode):
    """Clip or reflect every gene of ``x`` into the box, in place (resample needs
    one draw per gene outside: numpy does it in ``mpievo.evo.operators``).

    Returns the number of genes that were outside the box.
    """
    moved = 0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            if not (v >= lower[j] and v <= upper[j]):
                x[i, j] = _bound_value(v, lower[j], upper[j], mode, 0.0)
                moved += 1
    return moved


@numba.njit(fastmath={"reassoc"}, **_JIT)
def sum_squares_rows(x, out):
    """``out[i] = sum_j x[i, j]**2`` accumulated in float64.

    Reassociation lets the compiler vectorise the sum (6x faster than a strict
    left-to-right sum); the rounding then depends on the vector width of the
    instruction set, so results are bit-identical on the same CPU type only
    (as with numpy's own SIMD sums).
    """
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            v = np.float64(x[i, j])
            s += v * v
        out[i] = s


@numba.njit(**_JIT)
def hash_rows(bits, out):
    """FNV-1a over each row of an unsigned-integer view of the genomes, with an
    xor-shift after every word.

    Callers pass ``(x + 0.0).view(uint32 or uint64)`` so that -0.0 and 0.0 hash
    alike; equal rows always give equal hashes (confirm equality on a match). The
    xor-shift matters: a multiply only carries a bit upwards, so without it rows
    that differ only in the high (exponent) bits of their words, such as float64
    [0, 0] and [2, 2], collide.
    """
    for i in range(bits.shape[0]):
        h = np.uint64(14695981039346656037)
        for j in range(bits.shape[1]):
            h = (h ^ np.uint64(bits[i, j])) * np.uint64(1099511628211)
            h ^= h >> np.uint64(29)
        # splitmix64's finaliser: every input bit reaches every output bit
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = h ^ (h >> np.uint64(31))


@numba.njit(**_JIT)
def kth_smallest(values, k):
    """The ``k``-th smallest (from 0) of ``values`` (no NaN), which it reorders.

    Three-way partitions around a median of three, so runs of equal values (an archive
    full of +inf) cost one pass, not a quadratic number.
    """
    lo = 0
    hi = values.shape[0] - 1
    while lo < hi:
        a, b, c = values[lo], values[(lo + hi) >> 1], values[hi]
        pivot = max(min(a, b), min(max(a, b), c))
        lt, i, gt = lo, lo, hi
        while i <= gt:
            v = values[i]
            if v < pivot:
                values[i] = values[lt]
                values[lt] = v
                lt += 1
                i += 1
            elif v > pivot:
                values[i] = values[gt]
                values[gt] = v
                gt -= 1
            else:
                i += 1
        if k < lt:
            hi = lt - 1
        elif k > gt:
            lo = gt + 1
        else:
            return pivot
    return values[lo]


@numba.njit(**_JIT)
def survivors(member_fitness, candidate_fitness, capacity):
    """Keep the best ``capacity`` of members followed by candidates.

    The result is that of a stable sort of the concatenation (ties broken by
    position: members before candidates, earlier candidates first), found without
    sorting: a selection (:func:`kth_smallest`) gives the ``capacity``-th smallest value ``v``; everything
    below ``v`` is kept, and of the values equal to ``v`` the earliest ones. That is
    O(members + candidates), which matters for archives of thousands of members.
    Fitness must hold no NaN.

    Returns:
        (entered, slots): candidate indices that enter (ascending) and the slots they
        take: free slots ``size, size+1, ...`` first, then evicted members' slots
        (ascending).
    """
    # loops, not slice assignments or np.arange: those compile shape-error messages
    # (string formatting, seconds of compile time), and np.partition took ~10 s
    size = member_fitness.shape[0]
    n = candidate_fitness.shape[0]
    total = size + n
    merged = np.empty(total)
    scratch = np.empty(total)
    for i in range(size):
        merged[i] = member_fitness[i]
    for i in range(n):
        merged[size + i] = candidate_fitness[i]
    if total <= capacity:
        entered = np.empty(n, np.int64)
        slots = np.empty(n, np.int64)
        for i in range(n):
            entered[i] = i
            slots[i] = size + i
        return entered, slots
    for i in range(total):
        scratch[i] = merged[i]
    threshold = kth_smallest(scratch, capacity - 1)
    ties = capacity  # how many values equal to the threshold still fit
    for i in range(total):
        if merged[i] < threshold:
            ties -= 1
    keep = np.zeros(total, np.bool_)
    for i in range(total):
        v = merged[i]
        if v < threshold:
            keep[i] = True
        elif v == threshold and ties > 0:
            keep[i] = True
            ties -= 1
    n_entered = 0
    for i in range(size, total):
        if keep[i]:
            n_entered += 1
    entered = np.empty(n_entered, np.int64)
    slots = np.empty(n_entered, np.int64)
    k = 0
    for i in range(size, total):
        if keep[i]:
            entered[k] = i - size
            k += 1
    k = 0
    for s in range(size, capacity):
        slots[k] = s
        k += 1
    for s in range(size):
        if not keep[s]:
            slots[k] = s
            k += 1
    return entered, slots


@numba.njit(**_JIT)
def _copy_row(src, i, dst, k):
    """``dst[k] = src[i]`` as a loop: a slice assignment compiles numpy's broadcasting and
    its shape-error messages (seconds of compile time for a row copy)."""
    for j in range(dst.shape[1]):
        dst[k, j] = src[i, j]


@numba.njit(**_JIT)
def merge_children(children, child_fitness, rows, fitness, ids, origins, births, size, limit, first_id,
                   origin, birth):
    """The archive merge of one island's own children in one call: :func:`survivors`
    of the ``size`` members' ``fitness`` and ``child_fitness`` (no NaN), then each entering
    child's row copied into ``rows`` and its columns written in place: fitness, id
    ``first_id + its index``, ``origin``, ``birth``.

    Returns:
        (children entered, the new size, the members' best before, their best after).
    """
    before = np.inf
    for i in range(size):
        before = min(before, fitness[i])
    entered, slots = survivors(fitness[:size], child_fitness, limit)
    for k in range(entered.shape[0]):
        c = entered[k]
        s = slots[k]
        _copy_row(children, c, rows, s)
        fitness[s] = child_fitness[c]
        ids[s] = first_id + c
        origins[s] = origin
        births[s] = birth
        size = max(size, s + 1)
    after = np.inf
    for i in range(size):
        after = min(after, fitness[i])
    return entered.shape[0], size, before, after


@numba.njit(**_JIT)
def copy_rows(src, src_rows, dst, dst_rows):
    """``dst[dst_rows[k]] = src[src_rows[k]]`` for every k, row by row."""
    for k in range(src_rows.shape[0]):
        _copy_row(src, src_rows[k], dst, dst_rows[k])


@numba.njit(boundscheck=True, **_JIT)  # on its index arrays only (rows copy in _copy_row)
def retain_rows(x, slots):
    """``x[k] = x[slots[k]]`` (old rows) for ``k < len(slots)``, in place, with one row
    of scratch; ``slots`` distinct, in ``[0, len(x))``.

    Rows move along chains (start at a row whose old value nobody reads, pull its
    source in, then that source is free to be written) and what is left are cycles,
    each through the scratch row.
    """
    keep = slots.shape[0]
    read_by = np.full(x.shape[0], -1, np.int64)  # read_by[j] = k: old row j goes to k
    for k in range(keep):
        read_by[slots[k]] = k
    done = np.zeros(keep, np.bool_)
    for start in range(keep):
        if read_by[start] >= 0:
            continue
        k = start
        while True:
            _copy_row(x, slots[k], x, k)
            done[k] = True
            if slots[k] >= keep:
                break
            k = slots[k]
    scratch = np.empty((1, x.shape[1]), x.dtype)
    for start in range(keep):
        if done[start]:
            continue
        _copy_row(x, start, scratch, 0)
        k = start
        while slots[k] != start:
            _copy_row(x, slots[k], x, k)
            done[k] = True
            k = slots[k]
        _copy_row(scratch, 0, x, k)
        done[k] = True


@numba.njit(**_JIT)
def centroid_distances(genomes, width, out):
    """``out[i] = sqrt(sum_j ((G[i, j] - c_j) / width[j])**2)`` with ``c`` the mean row,
    in float64, gene by gene: no temporary of genome size."""
    m = genomes.shape[0]
    out[:] = 0.0
    for j in range(genomes.shape[1]):
        c = 0.0
        for i in range(m):
            c += genomes[i, j]
        c /= m
        for i in range(m):
            d = (genomes[i, j] - c) / width[j]
            out[i] += d * d
    for i in range(m):
        out[i] = math.sqrt(out[i])
