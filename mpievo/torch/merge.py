"""Merge methods on tensors, and the standard merges of whole models as plain functions.

The methods (one parameter tensor at a time, computed in float32 or float64, whatever
the sources' dtype) are those mergekit and evolutionary model merging use:

* ``linear``: ``sum_i w_i theta_i / sum_i w_i`` (the plain average for equal weights);
* ``task_arithmetic``: ``base + lam * sum_i w_i (theta_i - base)``;
* ``slerp`` (two sources): spherical interpolation of the two tensors as vectors,
  linear where they are (anti)parallel (``|cos| > 0.9995``), as mergekit;
* ``ties``: task vectors ``tau_i = theta_i - base`` trimmed to their ``density`` largest
  magnitudes (per tensor, at least one kept), weighted, the sign elected per entry as
  the sign of ``sum_i w_i tau_i`` (zero counts as +), and the agreeing entries averaged:
  ``base + lam * sum_i [sign agrees] w_i tau_i / sum_i [sign agrees] w_i`` (mergekit's
  ``ties`` with ``normalize``);
* ``dare``: each ``tau_i`` entry kept with probability ``density`` and rescaled by
  ``1 / density`` (the DARE paper's rescale), then task arithmetic. The drop mask comes
  from a ``torch.Generator`` seeded by ``(seed, source, tensor)``, so every rank that
  merges the same recipe on the same kind of device gets the same model;
* ``model_stock``, ``della``, ``breadcrumbs`` (mergekit's definitions and defaults, in
  :mod:`.merge_methods`), ``passthrough`` (one source's tensors).

We wrote these rather than call mergekit 0.1.5: its methods are reachable on
in-memory tensors (``mergekit.sparsify``, ``generalized_task_arithmetic.get_mask``),
but installing it brings transformers>=5, peft, accelerate, datasets and more; its
DARE draws from torch's global generator (no per-recipe key), and it is LGPL-3.0.
tests/torch check these against independent formulas (and against mergekit's
functions where mergekit is importable).

The whole-model merges (:func:`average`, :func:`task_arithmetic`, :func:`ties`,
:func:`dare`, :func:`slerp`) write the merged genome into a model's
:class:`~.flat.FlatParameters` from source genomes in its layout (``(count, dim)``,
numpy or torch; e.g. ``BaseModels.array``), tensor by tensor.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .flat import FlatParameters, from_numpy
from .merge_methods import GTA, gta_tensor, model_stock_tensor

METHODS = ("linear", "task_arithmetic", "slerp", "ties", "dare", "model_stock", "della", "breadcrumbs", "passthrough")
#: methods that merge task vectors over a base model
BASED = ("task_arithmetic", "ties", "dare", "model_stock", "della", "breadcrumbs")


def _work_dtype(tensor: torch.Tensor) -> torch.dtype:
    return torch.float64 if tensor.dtype == torch.float64 else torch.float32


def _weights(weights, count: int, like: torch.Tensor) -> torch.Tensor:
    w = torch.as_tensor(np.asarray(weights, np.float64), dtype=like.dtype, device=like.device)
    if w.shape != (count,):
        raise ValueError(f"expected {count} weights (one per source), got shape {tuple(w.shape)}")
    return w.reshape((count,) + (1,) * (like.dim() - 1))


def linear_tensor(stack: torch.Tensor, weights, normalize: bool = True) -> torch.Tensor:
    """``sum_i w_i stack[i]`` (divided by ``sum_i w_i`` with ``normalize``, unless ~0)."""
    x = stack.to(_work_dtype(stack))
    w = _weights(weights, stack.shape[0], x)
    merged = (w * x).sum(0)
    total = float(w.sum())
    return merged / total if normalize and abs(total) > 1e-8 else merged


def trim(delta: torch.Tensor, density: float) -> torch.Tensor:
    """``delta`` with all but its ``density`` largest magnitudes zeroed (at least one kept)."""
    if density >= 1:
        return delta
    k = max(1, int(density * delta.numel()))
    keep = torch.topk(delta.abs().reshape(-1), k, sorted=False).indices
    mask = torch.zeros(delta.numel(), dtype=torch.bool, device=delta.device)
    mask[keep] = True
    return delta * mask.reshape(delta.shape)


def drop_and_rescale(delta: torch.Tensor, density: float, generator: torch.Generator) -> torch.Tensor:
    """DARE: each entry kept with probability ``density``, kept ones scaled by ``1/density``."""
    if density >= 1:
        return delta
    keep = torch.rand(delta.shape, generator=generator, device=delta.device, dtype=torch.float32) < density
    return delta * keep / density


def elect_sign(weighted: torch.Tensor) -> torch.Tensor:
    """TIES' elected sign per entry: the sign of the sum over sources (0 counts as +1)."""
    return torch.where(weighted.sum(0) >= 0, 1.0, -1.0).to(weighted.dtype)


def based_tensor(method: str, stack: torch.Tensor, base: torch.Tensor, weights, *, lam: float = 1.0,
                 density: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """``task_arithmetic``, ``ties`` or ``dare`` of one tensor (module docstring)."""
    dtype = _work_dtype(stack)
    base = base.to(dtype)
    deltas = stack.to(dtype) - base
    if method == "ties":
        deltas = torch.stack([trim(d, density) for d in deltas])
    elif method == "dare":
        deltas = torch.stack([drop_and_rescale(d, density, generator) for d in deltas])
    w = _weights(weights, stack.shape[0], deltas)
    weighted = w * deltas
    if method == "ties":
        agree = (torch.sign(weighted) == elect_sign(weighted)).to(dtype)   # a zero never agrees
        divisor = (w * agree).sum(0)
        divisor[divisor == 0] = 1
        mixed = (weighted * agree).sum(0) / divisor
    else:
        mixed = weighted.sum(0)
    return base + lam * mixed


def slerp_tensor(t: float, a: torch.Tensor, b: torch.Tensor, threshold: float = 0.9995,
                 eps: float = 1e-8) -> torch.Tensor:
    """Spherical interpolation from ``a`` (t=0) to ``b`` (t=1), the tensors as vectors."""
    dtype = _work_dtype(a)
    a, b = a.to(dtype), b.to(dtype)
    na, nb = a.norm(), b.norm()
    if float(na) < eps or float(nb) < eps:
        return (1 - t) * a + t * b
    dot = float(((a / na) * (b / nb)).sum().clamp(-1, 1))
    if abs(dot) > threshold:
        return (1 - t) * a + t * b
    theta = float(np.arccos(dot))
    return (np.sin((1 - t) * theta) * a + np.sin(t * theta) * b) / np.sin(theta)


# --- whole models, in a FlatParameters layout -----------------------------------------

def as_tensor(genomes, device=None) -> torch.Tensor:
    """``genomes`` (numpy, incl. ``ml_dtypes.bfloat16``, or torch) as a tensor, without a
    copy where it already is on ``device``."""
    if isinstance(genomes, torch.Tensor):
        tensor = genomes
    else:
        array = np.asarray(genomes)
        with warnings.catch_warnings():     # read-only shared bases: we never write them
            warnings.simplefilter("ignore", UserWarning)
            tensor = from_numpy(np.ascontiguousarray(array))
    return tensor if device is None else tensor.to(device)


def merge_into(flat: FlatParameters, method: str, sources, *, base=None, weights=None, lam: float = 1.0,
               density: float = 1.0, t: float = 0.5, seed: int = 0, **settings) -> None:
    """Write the ``method`` merge of ``sources`` (``(count, dim)`` genomes of ``flat``'s
    layout) into ``flat``'s model, tensor by tensor, with one setting for every tensor
    (per-group settings: :mod:`.recipes`); ``settings``: ``epsilon`` (DELLA), ``gamma``
    (breadcrumbs), ``scale`` (model stock's ratio, passthrough), ``source`` (passthrough's row).

    Raises:
        ValueError: an unknown method, genomes of another length, a based method
            without ``base``, or SLERP of other than two sources.

    Example::

        merge_into(flat, "ties", genomes[1:], base=genomes[0], density=0.5, lam=1.0)
        merge_into(flat, "slerp", genomes[:2], t=0.3)
    """
    sources = as_tensor(sources, flat.device)
    count = check_sources(flat, method, sources, base)
    weights = np.ones(count) if weights is None else np.asarray(weights, np.float64)
    base = None if base is None else as_tensor(base, flat.device).reshape(-1)
    with torch.no_grad():
        for index, (start, stop) in enumerate(zip(flat.offsets[:-1], flat.offsets[1:])):
            part = slice(int(start), int(stop))
            flat.flat[part] = merge_part(method, sources[:, part], None if base is None else base[part],
                                         weights, lam=lam, density=density, t=t,
                                         generator=dare_generator(seed, index, flat.device), **settings)


def check_sources(flat: FlatParameters, method: str, sources: torch.Tensor, base) -> int:
    """The number of sources, after refusing what ``method`` cannot merge (see :func:`merge_into`)."""
    if method not in METHODS:
        raise ValueError(f"expected a merge method among {METHODS}, got {method!r}")
    if sources.dim() != 2 or sources.shape[1] != flat.dim:
        raise ValueError(f"expected source genomes of shape (count, {flat.dim}), got {tuple(sources.shape)}")
    if method in BASED and base is None:
        raise ValueError(f"expected a base model for {method!r} (task vectors are differences from it), got none")
    if method == "slerp" and sources.shape[0] != 2:
        raise ValueError(f"expected 2 source models for 'slerp', got {sources.shape[0]}")
    if method == "model_stock" and sources.shape[0] < 2:
        raise ValueError(f"expected at least 2 source models besides the base for 'model_stock', "
                         f"got {sources.shape[0]}")
    return sources.shape[0]


def dare_generator(seed: int, tensor: int, device) -> torch.Generator:
    """DARE's generator for one tensor of one recipe: keyed by ``(seed, tensor)``."""
    generator = torch.Generator(device=device)
    generator.manual_seed((int(seed) * 1_000_003 + tensor) % (1 << 63))
    return generator


def merge_part(method: str, stack: torch.Tensor, base, weights, *, lam: float, density: float, t: float,
               generator: torch.Generator | None, epsilon: float = 0.15, gamma: float = 0.01,
               scale: float = 1.0, source: int = 0) -> torch.Tensor:
    """One tensor's merge (``stack``: the sources' ``(count, n)`` slices)."""
    if method == "linear":
        return linear_tensor(stack, weights)
    if method == "slerp":
        return slerp_tensor(t, stack[0], stack[1])
    if method == "passthrough":
        return stack[int(source)].to(_work_dtype(stack)) * scale
    if method == "model_stock":
        return model_stock_tensor(stack, base, scale=scale)
    if method in ("della", "breadcrumbs"):
        sparsifier, consensus, normalize, rescale = GTA[method]
        return gta_tensor(stack, base, weights, sparsifier=sparsifier, consensus=consensus, normalize=normalize,
                          rescale=rescale, lam=lam, density=density, gamma=gamma, epsilon=epsilon,
                          generator=generator)
    return based_tensor(method, stack, base, weights, lam=lam, density=density, generator=generator)


def average(flat: FlatParameters, sources) -> None:
    """The plain average of ``sources`` into ``flat``'s model.

    Example::

        flat = FlatParameters(model)
        average(flat, bases.array[1:])          # the model now holds the mean of the sources
    """
    merge_into(flat, "linear", sources)


def task_arithmetic(flat: FlatParameters, base, sources, lam: float = 1.0) -> None:
    """``base + lam * sum_i (theta_i - base)`` into ``flat``'s model.

    Example::

        task_arithmetic(flat, genomes[0], genomes[1:], lam=0.5)
    """
    merge_into(flat, "task_arithmetic", sources, base=base, lam=lam)


def ties(flat: FlatParameters, base, sources, density: float = 0.5, lam: float = 1.0) -> None:
    """TIES (trim to ``density``, elect sign, disjoint mean, scale by ``lam``) into ``flat``'s model.

    Example::

        ties(flat, genomes[0], genomes[1:], density=0.5, lam=1.0)
    """
    merge_into(flat, "ties", sources, base=base, density=density, lam=lam)


def dare(flat: FlatParameters, base, sources, density: float = 0.5, lam: float = 1.0, seed: int = 0) -> None:
    """DARE (drop with ``1 - density``, rescale, task arithmetic) into ``flat``'s model.

    Example::

        genomes = hf_bases(["experts/base", "experts/a", "experts/b"], flat).array
        dare(flat, genomes[0], genomes[1:], density=0.5, lam=1.0, seed=0)
    """
    merge_into(flat, "dare", sources, base=base, density=density, lam=lam, seed=seed)


def slerp(flat: FlatParameters, sources, t: float = 0.5) -> None:
    """SLERP of two sources at ``t`` into ``flat``'s model.

    Example::

        slerp(flat, genomes[:2], t=0.3)         # 30 % of the way from the first to the second
    """
    merge_into(flat, "slerp", sources, t=t)


def model_stock(flat: FlatParameters, base, sources) -> None:
    """Model stock (mergekit's, per tensor) of ``sources`` around ``base`` into ``flat``'s model.

    Example::

        model_stock(flat, genomes[0], genomes[1:])
    """
    merge_into(flat, "model_stock", sources, base=base)


def della(flat: FlatParameters, base, sources, density: float = 0.5, epsilon: float = 0.15, lam: float = 1.0,
          seed: int = 0) -> None:
    """DELLA (mergekit's ``della``: MagPrune, L1 rescale, sign consensus, normalised) into ``flat``'s model.

    Example::

        della(flat, genomes[0], genomes[1:], density=0.5, epsilon=0.1)
    """
    merge_into(flat, "della", sources, base=base, density=density, epsilon=epsilon, lam=lam, seed=seed)


def breadcrumbs(flat: FlatParameters, base, sources, density: float = 0.9, gamma: float = 0.01,
                lam: float = 1.0) -> None:
    """Model breadcrumbs (mergekit's ``breadcrumbs``: the ``gamma`` largest and the smallest
    task-vector entries dropped, ``density`` kept, summed) into ``flat``'s model.

    Example::

        breadcrumbs(flat, genomes[0], genomes[1:], density=0.9, gamma=0.01)
    """
    merge_into(flat, "breadcrumbs", sources, base=base, density=density, gamma=gamma, lam=lam)


def passthrough(flat: FlatParameters, sources, source: int = 0, scale: float = 1.0) -> None:
    """Row ``source`` of ``sources`` (times ``scale``) into ``flat``'s model.

    Example::

        passthrough(flat, genomes, source=1)
    """
    merge_into(flat, "passthrough", sources, source=source, scale=scale)
