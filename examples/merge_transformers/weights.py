"""Models as flat float32 vectors, and the standard merges of them.

A model's parameters (tied ones once, in ``named_parameters`` order; buffers are not
merged) are one flat vector; ``assign`` writes a vector back into a model in place.
The merges work on the flat vectors of a base and its experts through task vectors
``tau_k = expert_k - base``:

* plain average       ``mean_k expert_k``
* task arithmetic     ``base + lam * sum_k tau_k``
* TIES                trim each ``tau_k`` to its ``density`` largest magnitudes (per
                      tensor), elect a sign per weight from the sum of the trimmed
                      vectors, average the entries that agree with it, ``base + lam * that``
                      (Yadav et al., 2023)
"""

from __future__ import annotations

import numpy as np
import torch


def flatten(model) -> np.ndarray:
    """(P,) float32 copy of the model's parameters."""
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().astype(np.float32)


def assign(model, vector: np.ndarray) -> None:
    """Write the (P,) vector into the model's parameters in place."""
    expected = sum(p.numel() for p in model.parameters())
    if np.shape(vector) != (expected,):
        raise ValueError(f"expected a vector of shape ({expected},), got {np.shape(vector)}")
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.as_tensor(np.asarray(vector, np.float32)), model.parameters())


def tensor_slices(model) -> list[tuple[str, slice]]:
    """(name, slice of the flat vector) of each parameter tensor, in flat order."""
    out, start = [], 0
    for name, p in model.named_parameters():
        out.append((name, slice(start, start + p.numel())))
        start += p.numel()
    return out


def average(experts: np.ndarray) -> np.ndarray:
    return experts.mean(axis=0)


def task_arithmetic(base: np.ndarray, experts: np.ndarray, lam: float) -> np.ndarray:
    return base + lam * (experts - base).sum(axis=0)


def ties(base: np.ndarray, experts: np.ndarray, slices, density: float, lam: float) -> np.ndarray:
    """TIES-merging with per-tensor trimming to ``density`` (fraction kept, in (0, 1])."""
    taus = experts.astype(np.float64) - base
    trimmed = np.zeros_like(taus)
    for _, part in slices:
        block = taus[:, part]
        keep = max(1, int(round(density * block.shape[1])))
        threshold = -np.partition(-np.abs(block), keep - 1, axis=1)[:, keep - 1:keep]
        trimmed[:, part] = np.where(np.abs(block) >= threshold, block, 0.0)
    sign = np.sign(trimmed.sum(axis=0))
    agree = (np.sign(trimmed) == sign) & (trimmed != 0)
    merged = (trimmed * agree).sum(axis=0) / np.maximum(agree.sum(axis=0), 1)
    return (base + lam * merged).astype(np.float32)
