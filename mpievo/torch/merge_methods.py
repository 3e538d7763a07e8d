"""mergekit's merge methods on tensors: generalized task arithmetic (its sparsifiers and
sign consensus), model stock and passthrough, with mergekit's definitions and defaults.

One tensor at a time, computed in float32 (float64 for float64 sources):

* generalized task arithmetic (:func:`gta_tensor`): task vectors ``tau_i = theta_i - base``
  each sparsified with its own ``density`` by one of :data:`SPARSIFIERS`, weighted by
  ``w_i``, optionally masked by TIES' sign consensus (sign of ``sum_i w_i tau_i``, zero
  counts as +), summed, divided by the (agreeing) weights' sum with ``normalize``,
  scaled by ``lambda``: ``base + lam * sum_i m_i w_i tau_i' / [sum_i m_i w_i]``.
  With ``rescale`` the sparsified ``tau_i'`` is scaled back to the L1 norm of ``tau_i``.
  :data:`GTA` lists mergekit's methods of this family and their defaults;
* ``magnitude``: the ``density`` largest magnitudes kept (``int(density * n)``, at least 1);
* ``random`` (DARE): each entry kept with probability ``density``;
* ``magnitude_outliers`` (breadcrumbs): the ``gamma`` largest and then the smallest
  magnitudes dropped, ``int(density * n)`` kept;
* ``della_magprune`` (DELLA): each entry kept with a probability that grows with its
  magnitude's rank in its row, from ``density - epsilon`` to ``density + epsilon``;
* :func:`model_stock_tensor`: ``w_0 + t (mean_i theta_i - w_0)``, ``t = N c / (1 + (N-1) c)``
  with ``c`` the mean cosine between the task vectors (per row with ``filter_wise``);
* passthrough: one source's tensor, times ``scale``.

Random masks come from a ``torch.Generator`` (see :func:`mpievo.torch.merge.dare_generator`),
so every rank builds the same model; mergekit draws from torch's global generator instead.
"""

from __future__ import annotations

import numpy as np
import torch

#: sparsifiers of generalized task arithmetic
SPARSIFIERS = ("magnitude", "random", "magnitude_outliers", "della_magprune")
#: mergekit's generalized task arithmetic methods: (sparsifier, sign consensus, normalize, rescale)
GTA = {
    "task_arithmetic": (None, False, False, False),
    "ties": ("magnitude", True, True, False),
    "dare_ties": ("random", True, False, True),
    "dare_linear": ("random", False, False, True),
    "breadcrumbs": ("magnitude_outliers", False, False, False),
    "breadcrumbs_ties": ("magnitude_outliers", True, False, False),
    "della": ("della_magprune", True, True, True),
    "della_linear": ("della_magprune", False, False, True),
}


def work_dtype(tensor: torch.Tensor) -> torch.dtype:
    """float64 for float64 tensors, else float32: the dtype a merge is computed in."""
    return torch.float64 if tensor.dtype == torch.float64 else torch.float32


def rescale_l1(delta: torch.Tensor, masked: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """``masked`` scaled to the L1 norm of ``delta`` (as is, where either norm is below ``eps``)."""
    before, after = float(delta.abs().sum()), float(masked.abs().sum())
    return masked if before < eps or after < eps else masked * (before / after)


def magnitude_mask(delta: torch.Tensor, density: float) -> torch.Tensor:
    """1 at the ``int(density * n)`` (at least one) largest magnitudes of ``delta``, else 0."""
    k = max(1, int(density * delta.numel()))
    mask = torch.zeros(delta.numel(), dtype=delta.dtype, device=delta.device)
    mask[torch.argsort(delta.abs().reshape(-1), descending=True)[:k]] = 1
    return mask.reshape(delta.shape)


def outlier_mask(delta: torch.Tensor, density: float, gamma: float) -> torch.Tensor:
    """Breadcrumbs: 0 at the ``int(gamma * n)`` largest and the smallest magnitudes, so
    that ``int(density * n)`` entries stay (fewer large ones dropped where needed)."""
    n = delta.numel()
    keep, top = int(density * n), int(gamma * n)
    bottom = n - keep - top
    if bottom < 0:
        top, bottom = top + bottom, 0
    order = torch.argsort(delta.abs().reshape(-1))
    mask = torch.zeros(n, dtype=delta.dtype, device=delta.device)
    mask[order[bottom:n - top]] = 1
    return mask.reshape(delta.shape)


def della_mask(delta: torch.Tensor, density: float, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    """DELLA's MagPrune: per row (a 1-d tensor is one row), entry of magnitude rank ``r``
    (0 smallest .. ``m - 1``) kept with probability ``density - epsilon + 2 epsilon r / (m - 1)``."""
    if not (0 < density - epsilon and density + epsilon < 1):
        raise ValueError(f"expected epsilon with density +/- epsilon in (0, 1), got density {density} "
                         f"and epsilon {epsilon}")
    rows = delta.reshape(1, -1) if delta.dim() < 2 else delta
    ranks = rows.abs().argsort(dim=1).argsort(dim=1).to(delta.dtype)
    span = max(rows.shape[1] - 1, 1)
    probs = (density - epsilon) + (ranks / span) * 2 * epsilon
    draw = torch.rand(rows.shape, generator=generator, device=delta.device, dtype=torch.float32)
    return (draw < probs).to(delta.dtype).reshape(delta.shape)


def sparsify(delta: torch.Tensor, method: str, density: float, *, gamma: float = 0.01, epsilon: float = 0.15,
             rescale: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
    """``delta`` sparsified by ``method`` (:data:`SPARSIFIERS`) to ``density`` (module docstring).

    Example:
        >>> sparsify(torch.tensor([0.1, -3.0, 2.0, 0.5]), "magnitude", 0.5).tolist()
        [0.0, -3.0, 2.0, 0.0]
    """
    if density >= 1:
        return delta
    if method == "magnitude":
        mask = magnitude_mask(delta, density)
    elif method == "magnitude_outliers":
        mask = outlier_mask(delta, density, gamma)
    elif method == "random":
        mask = (torch.rand(delta.shape, generator=generator, device=delta.device, dtype=torch.float32)
                < density).to(delta.dtype)
    elif method == "della_magprune":
        if density <= 0:
            return torch.zeros_like(delta)
        mask = della_mask(delta, density, epsilon, generator)
    else:
        raise ValueError(f"expected a sparsifier among {SPARSIFIERS}, got {method!r}")
    masked = delta * mask
    return rescale_l1(delta, masked) if rescale else masked


def gta_tensor(stack: torch.Tensor, base: torch.Tensor, weights, *, sparsifier: str | None = None,
               consensus: bool = False, normalize: bool = False, rescale: bool = False, lam: float = 1.0,
               density=1.0, gamma=0.01, epsilon=0.15, generator: torch.Generator | None = None) -> torch.Tensor:
    """Generalized task arithmetic of one tensor (module docstring); ``density``, ``gamma``
    and ``epsilon`` are one value or one per source.

    Example:
        >>> base = torch.zeros(3)
        >>> gta_tensor(torch.tensor([[1.0, -2.0, 0.0], [3.0, 2.0, 1.0]]), base, [1.0, 1.0]).tolist()
        [4.0, 0.0, 1.0]
    """
    dtype = work_dtype(stack)
    base = base.to(dtype)
    count = stack.shape[0]
    per = [np.array(np.broadcast_to(np.asarray(v, np.float64), (count,))) for v in (weights, density, gamma, epsilon)]
    deltas = (stack - base.to(stack.dtype)).to(dtype)     # in the sources' dtype, as mergekit: the same ranks
    if sparsifier is not None:
        deltas = torch.stack([sparsify(d, sparsifier, float(per[1][i]), gamma=float(per[2][i]),
                                       epsilon=float(per[3][i]), rescale=rescale, generator=generator)
                              for i, d in enumerate(deltas)])
    w = torch.as_tensor(per[0], dtype=dtype, device=deltas.device).reshape((count,) + (1,) * (deltas.dim() - 1))
    weighted = deltas * w
    if consensus:
        elected = torch.where(weighted.sum(0) >= 0, 1.0, -1.0).to(dtype)
        agree = (torch.sign(weighted) == elected).to(dtype)
        mixed = (weighted * agree).sum(0)
        divisor = (w * agree).sum(0)
        divisor[divisor == 0] = 1
    else:
        mixed = weighted.sum(0)
        divisor = w.sum(0)
        divisor[divisor.abs() < 1e-8] = 1
    if normalize:
        mixed = mixed / divisor
    return base + lam * mixed


def model_stock_tensor(stack: torch.Tensor, base: torch.Tensor, *, filter_wise: bool = False,
                       scale: float = 1.0) -> torch.Tensor:
    """Model stock of ``stack`` (at least two fine-tuned sources) around ``base``
    (module docstring); ``scale`` multiplies its ratio ``t`` (1: mergekit's model stock).

    Example:
        >>> base = torch.zeros(2)
        >>> model_stock_tensor(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), base).tolist()   # orthogonal: t = 0
        [0.0, 0.0]
    """
    if stack.shape[0] < 2:
        raise ValueError(f"expected at least 2 sources besides the base for model stock, got {stack.shape[0]}")
    dtype = work_dtype(stack)
    shape = base.shape
    w0, ws = base.to(dtype), stack.to(dtype)
    if filter_wise:
        if w0.dim() == 1:
            w0, ws = w0.unsqueeze(0), ws.unsqueeze(1)
    else:
        w0, ws = w0.reshape(-1), ws.reshape(ws.shape[0], -1)
    offsets = ws - w0
    cosines = []
    for i in range(len(offsets)):
        for j in range(i + 1, len(offsets)):
            norms = offsets[i].norm(dim=-1) * offsets[j].norm(dim=-1)
            cosines.append(((offsets[i] * offsets[j]).sum(-1) / norms.clamp(min=1e-6)).clamp(-1, 1))
    cos = torch.stack(cosines).mean(0).unsqueeze(-1)
    n = len(offsets)
    t = scale * (n * cos) / (1 + (n - 1) * cos)
    return (t * ws.mean(0) + (1 - t) * w0).reshape(shape)
