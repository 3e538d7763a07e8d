"""Low-rank evolution-strategy noise on a genome's weight matrices (``es_noise = "lowrank"``).

Pair ``j``'s low-rank noise: per matrix ``(offset, rows, cols)`` of the genome (row-major)
the factors ``U`` (rows, r) and ``V`` (cols, r), then one normal per gene outside the
matrices, all from one "compact" noise vector drawn like a full one
(:func:`mpievo.kernels.es_noise.noise`, the compact length in place of the genome's);
the pair's perturbation is ``U V^T / sqrt(r)`` on each matrix and the normal elsewhere
(EGGROLL's perturbations, materialised per member for an island's rows).

Example::

    blocks, rest, compact = lowrank_layout(dim, [(0, 4, 5)], 2)
    kept = np.empty((popsize // 2, compact), np.float32)
    lowrank_members(rows, kept, mean, 0.1, key, 1, blocks, rest, 2)
    sums = lowrank_sums(coeffs, kept, dim, blocks, rest, 2)     # the update's sum_j c_j delta_j
"""

from __future__ import annotations

import numba
import numpy as np

from .es_noise import noise, pair_stride


@numba.njit(nogil=True, cache=True)
def _lowrank_delta(delta, compact, matrices, rest, rank, scale):
    at = 0
    for mi in range(matrices.shape[0]):
        offset, rows, cols = matrices[mi, 0], matrices[mi, 1], matrices[mi, 2]
        u, v = at, at + rows * rank
        for a in range(rows):
            for b in range(cols):
                total = 0.0
                for k in range(rank):
                    total += np.float64(compact[u + a * rank + k]) * np.float64(compact[v + b * rank + k])
                delta[offset + a * cols + b] = total * scale
        at = v + cols * rank
    for i in range(rest.shape[0]):
        delta[rest[i]] = np.float64(compact[at + i])


@numba.njit(nogil=True, cache=True)
def _lowrank_members(out, compact, mean, sigma, matrices, rest, rank, scale):
    delta = np.empty(out.shape[1])
    for j in range(out.shape[0] // 2):
        _lowrank_delta(delta, compact[j], matrices, rest, rank, scale)
        for i in range(out.shape[1]):
            x = np.float64(mean[i])
            out[2 * j, i] = x + sigma * delta[i]
            out[2 * j + 1, i] = x + (-sigma) * delta[i]


@numba.njit(nogil=True, cache=True)
def _lowrank_sums(sums, coeffs, compact, matrices, rest, rank, scale):
    delta = np.empty(sums.shape[0])
    sums[:] = 0.0
    for j in range(coeffs.shape[0]):
        _lowrank_delta(delta, compact[j], matrices, rest, rank, scale)
        c = coeffs[j]
        for i in range(sums.shape[0]):
            sums[i] += c * delta[i]


def lowrank_layout(dim: int, matrices, rank: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(matrices, rest, compact)`` of a genome of ``dim`` genes whose ``matrices`` are
    ``(offset, rows, cols)`` row-major blocks: the blocks as an (n, 3) int64 array, the
    genes outside them, and the length of a pair's compact noise.

    Raises:
        ValueError: no matrix, blocks that overlap or leave the genome, or ``rank`` above
            a matrix's smaller side.

    Example::

        blocks, rest, compact = lowrank_layout(13, [(0, 3, 4)], 2)   # rest: genes 12; compact 15
    """
    blocks = np.asarray(matrices, np.int64).reshape(-1, 3)
    if not len(blocks):
        raise ValueError("expected at least one weight matrix (a ModelProblem's 2-D tensor) for low-rank noise, "
                         "got none")
    covered = np.zeros(dim, bool)
    for i, (offset, rows, cols) in enumerate(blocks):
        if rows < 1 or cols < 1 or offset < 0 or offset + rows * cols > dim \
                or covered[offset:offset + rows * cols].any():
            raise ValueError(f"expected matrix {i} inside the genome of {dim} genes and apart from the others, "
                             f"got offset {offset}, shape ({rows}, {cols})")
        if rank > min(rows, cols):
            raise ValueError(f"es_rank: expected at most the smaller side {min(rows, cols)} of matrix {i} "
                             f"({rows} x {cols}), got {rank}")
        covered[offset:offset + rows * cols] = True
    rest = np.flatnonzero(~covered).astype(np.int64)
    return blocks, rest, int(rank * (blocks[:, 1] + blocks[:, 2]).sum() + len(rest))


def lowrank_members(out: np.ndarray, compact: np.ndarray, mean: np.ndarray, sigma: float, key, base: int,
                    blocks: np.ndarray, rest: np.ndarray, rank: int) -> None:
    """Every member of a generation with low-rank noise into the rows of ``out`` (popsize,
    dim), and each pair's compact noise into the rows of ``compact`` (popsize / 2, length
    of :func:`lowrank_layout`) for the update (:func:`lowrank_sums`).

    Example::

        lowrank_members(rows, compact, mean, 1e-3, key, 1, blocks, rest, 4)
    """
    stride = pair_stride(compact.shape[1])
    for j in range(compact.shape[0]):
        noise(compact[j], key, base, pair=j, stride=stride)
    _lowrank_members(out, compact, mean, np.float64(sigma), blocks, rest, np.int64(rank),
                     np.float64(1.0 / np.sqrt(rank)))


def lowrank_sums(coeffs: np.ndarray, compact: np.ndarray, dim: int, blocks: np.ndarray, rest: np.ndarray,
                 rank: int) -> np.ndarray:
    """``sum_j coeffs[j] delta_j`` (float64, pairs in order) of the low-rank perturbations
    ``delta_j`` kept in ``compact`` by :func:`lowrank_members`: the ``sums`` of
    :func:`adam_update`.

    Example::

        sums = lowrank_sums(coeffs, compact, dim, blocks, rest, 4)
    """
    sums = np.empty(dim)
    _lowrank_sums(sums, np.ascontiguousarray(coeffs, np.float64), compact, blocks, rest, np.int64(rank),
                  np.float64(1.0 / np.sqrt(rank)))
    return sums
