"""Low-rank ES populations: a whole population in one batched forward pass (EGGROLL-style).

Member ``k`` of a :class:`LowRankPopulation` perturbs each weight matrix ``W`` of the
model's linear layers (``nn.Linear`` and Hugging Face's ``Conv1D``) by a rank-``r`` term
``s_k sigma / sqrt(r) U_k V_k^T`` (``U_k`` on the layer's input side, ``V_k`` on its
output side, ``s_k = +1`` for even members and ``-1`` for odd ones: antithetic pairs) and
each bias and layer-norm vector by full noise ``s_k sigma e_k``. Nothing is materialised:
forward hooks turn the layer's output for the stacked inputs of all members (member-major
along the batch dimension) into ``x W + b + s_k sigma (x U_k) V_k^T / sqrt(r) + s_k sigma
e_k``, so the population costs one batched forward pass over the shared base weights.
Embeddings (and a head tied to them) are not perturbed.

The noise of pair ``j`` comes from the counter-based generator
(four normals per Philox block, :func:`mpievo.kernels.es_noise.noise`) keyed by ``(seed, island, generation, "breed")``
and ``(pair, tensor)``, so any rank rebuilds any member's factors. The update
(:meth:`LowRankPopulation.step`) is the ES gradient as the sum of the low-rank terms,
``sum_j c_j U_j V_j^T`` per matrix (one matrix product), applied in place with SGD.

Example::

    population = LowRankPopulation(model, popsize=32, rank=4, sigma=1e-3, seed=0)
    with population.generation(1):
        logits = model(tokens.repeat(32, 1)).logits     # member k: rows k*b .. (k+1)*b
    population.step(fitness, learning_rate=1e-3)          # fitness (32,), minimised
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from mpievo.evo.algorithms.es import shape_fitness
from mpievo.evo.streams import counter_key
from mpievo.kernels import es_noise

_LINEAR_TYPES = ("Linear", "Conv1D")


def _is_conv1d(module) -> bool:
    return type(module).__name__ == "Conv1D"


def perturbed_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of the linear layers and layer norms a population perturbs: linear
    layers whose weight is not an embedding's (a tied head stays as it is).

    Example::

        names = [name for name, _ in perturbed_modules(gpt2)]   # c_attn, c_proj, ..., ln_f
    """
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    chosen = []
    for name, module in model.named_modules():
        kind = type(module).__name__
        if kind in _LINEAR_TYPES and getattr(module, "weight", None) is not None \
                and module.weight.dim() == 2 and id(module.weight) not in embeddings:
            chosen.append((name, module))
        elif isinstance(module, torch.nn.LayerNorm) and module.weight is not None:
            chosen.append((name, module))
    return chosen


class LowRankPopulation:
    """A population of low-rank perturbations of ``model`` (see the module docstring).

    Args:
        model: the base model (its weights are the mean; :meth:`step` updates them).
        popsize: members, an even int >= 2.
        rank: ``r`` of every matrix's perturbation, >= 1 and at most each matrix's smaller side.
        sigma: the noise's scale, > 0.
        seed, island: the keys of the noise.
        shaping: fitness shaping of :meth:`step` (:func:`mpievo.evo.algorithms.es.shape_fitness`).

    Raises:
        ValueError: "expected X, got Y" for a bad setting, before any work.

    Example::

        population = LowRankPopulation(model, popsize=8, rank=2, sigma=0.01)
    """

    def __init__(self, model: torch.nn.Module, *, popsize: int, rank: int, sigma: float, seed: int = 0,
                 island: int = 0, shaping: str = "centered_ranks"):
        if isinstance(popsize, bool) or not isinstance(popsize, int) or popsize < 2 or popsize % 2:
            raise ValueError(f"expected popsize to be an even int >= 2 (antithetic pairs), got {popsize!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"expected rank to be an int >= 1, got {rank!r}")
        if not isinstance(sigma, (int, float)) or isinstance(sigma, bool) or not sigma > 0:
            raise ValueError(f"expected sigma > 0, got {sigma!r}")
        shape_fitness(np.zeros(2), shaping)               # refuses an unknown shaping
        self.model, self.popsize, self.rank, self.sigma = model, popsize, rank, float(sigma)
        self.seed, self.island, self.shaping = int(seed), int(island), shaping
        self.modules = perturbed_modules(model)
        for name, module in self.modules:
            if type(module).__name__ in _LINEAR_TYPES and rank > min(module.weight.shape):
                raise ValueError(f"rank: expected at most the smaller side {min(module.weight.shape)} of "
                                 f"{name}.weight {tuple(module.weight.shape)}, got {rank}")
        self._noise = None           # per module: the factors or vectors of every pair, this generation

    # --- noise --------------------------------------------------------------------
    def _draw(self, key, block: int, shape) -> torch.Tensor:
        # the normals of blocks block, block + 1, ... four per block (es_noise's vectorised draw)
        values = np.empty(int(np.prod(shape)), np.float32)
        es_noise.noise(values, key, block, pair=0, stride=0)
        return torch.from_numpy(values.reshape(shape))

    def noise(self, generation: int) -> list[dict]:
        """Per perturbed module, its noise for all ``popsize / 2`` pairs (float32 tensors on
        the module's device): ``u`` (pairs, fan_in, r) and ``v`` (pairs, fan_out, r) for a
        linear layer, ``weight``/``bias`` (pairs, features) vectors, keyed by generation.

        Example::

            factors = population.noise(1)[0]["u"]        # the first layer's input-side factors
        """
        key = counter_key(self.seed, self.island, generation, "breed")
        pairs, out, block = self.popsize // 2, [], 1
        for _, module in self.modules:
            entry = {}
            if type(module).__name__ in _LINEAR_TYPES:
                fan_in, fan_out = self._fans(module)
                shapes = {"u": (pairs, fan_in, self.rank), "v": (pairs, fan_out, self.rank)}
            else:
                shapes = {"weight": (pairs,) + tuple(module.weight.shape)}
            if getattr(module, "bias", None) is not None:
                shapes["bias"] = (pairs,) + tuple(module.bias.shape)
            for name, shape in shapes.items():
                entry[name] = self._draw(key, block, shape).to(module.weight.device, module.weight.dtype)
                block += es_noise.pair_stride(int(np.prod(shape)))
            out.append(entry)
        return out

    @staticmethod
    def _fans(module) -> tuple[int, int]:
        rows, cols = module.weight.shape
        return (rows, cols) if _is_conv1d(module) else (cols, rows)     # Conv1D: (in, out)

    def signs(self, like: torch.Tensor) -> torch.Tensor:
        """``s_k sigma`` of every member (+ for even, - for odd), shape (popsize,)."""
        signs = torch.tensor([self.sigma if k % 2 == 0 else -self.sigma for k in range(self.popsize)])
        return signs.to(like.device, like.dtype)

    # --- the batched forward ----------------------------------------------------------
    @contextlib.contextmanager
    def generation(self, generation: int):
        """Within the block, the model's forward takes the stacked inputs of all members
        (batch dimension ``popsize * b``, member-major) and gives each member's outputs."""
        self._noise = self.noise(generation)
        handles = [module.register_forward_hook(self._hook(module, noise))
                   for (_, module), noise in zip(self.modules, self._noise)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _hook(self, module, noise: dict):
        # pair j's noise serves members 2j and 2j + 1; the signs and scales folded in once
        # per generation, so that each layer adds its members' terms in one fused product
        expand = {name: value.repeat_interleave(2, dim=0) for name, value in noise.items()}
        signs = self.signs(module.weight)[:, None]                       # (popsize, 1)
        bias = signs * expand["bias"] if "bias" in expand else None      # (popsize, out)
        linear, with_bias = type(module).__name__ in _LINEAR_TYPES, bias is not None
        if linear:
            left = expand["u"] * (signs / math.sqrt(self.rank))[:, :, None]   # (popsize, in, r)
            right = expand["v"].transpose(1, 2)                                # (popsize, r, out)
            if bias is not None:     # the bias as one more rank: a column of ones times it
                right = torch.cat([right, bias[:, None, :]], dim=1)
            right = right.contiguous()
        else:                         # a layer norm: each member's own weight and bias
            weight = (module.weight + signs * expand["weight"])[:, None, :]
            shift = (module.bias + bias)[:, None, :] if bias is not None else torch.zeros_like(weight)

        def hook(mod, inputs, output):
            x = inputs[0]
            p = self.popsize
            if x.shape[0] % p:
                raise ValueError(f"expected a batch of popsize ({p}) x b rows, got {x.shape[0]}")
            if not linear:
                normed = torch.nn.functional.layer_norm(x, mod.normalized_shape, None, None, mod.eps)
                out = torch.addcmul(shift, normed.reshape(p, -1, normed.shape[-1]), weight)
                return out.reshape(output.shape)
            xs = x.reshape(p, -1, x.shape[-1])
            t = torch.bmm(xs, left)
            if with_bias:              # the bias's rank: a column of ones
                t = torch.cat([t, torch.ones_like(t[:, :, :1])], dim=2)
            out = torch.baddbmm(output.reshape(p, -1, output.shape[-1]), t, right)
            return out.reshape(output.shape)

        return hook

    # --- materialised members (reference) and the update --------------------------------
    def member_deltas(self, member: int, noise: list[dict] | None = None) -> list[dict]:
        """Member ``member``'s perturbation of each module as dense tensors (``weight``,
        ``bias``), for checks and for writing a member into a model: from ``noise`` (what
        :meth:`noise` gives), else from the last :meth:`generation`'s.

        Example::

            with population.generation(1):
                deltas = population.member_deltas(3)
        """
        noise = self._noise if noise is None else noise
        if noise is None:
            raise RuntimeError("expected the noise of a generation (generation() or noise=), got none")
        sign = self.sigma if member % 2 == 0 else -self.sigma
        j, out = member // 2, []
        for (_, module), drawn in zip(self.modules, noise):
            entry = {}
            if "u" in drawn:
                delta = sign / math.sqrt(self.rank) * drawn["u"][j] @ drawn["v"][j].T     # (fan_in, fan_out)
                entry["weight"] = delta if _is_conv1d(module) else delta.T
            else:
                entry["weight"] = sign * drawn["weight"][j]
            if "bias" in drawn:
                entry["bias"] = sign * drawn["bias"][j]
            out.append(entry)
        return out

    @torch.no_grad()
    def step(self, fitness, learning_rate: float) -> None:
        """SGD on the base weights from the members' minimised ``fitness``: per matrix the
        sum of the pairs' low-rank terms ``sum_j c_j U_j V_j^T / sqrt(r)`` as one product,
        ``c_j = (u_2j - u_2j+1) / (popsize sigma)`` (``u`` the shaped utilities)."""
        fitness = np.asarray(fitness, np.float64)
        if fitness.shape != (self.popsize,):
            raise ValueError(f"expected the fitness of {self.popsize} members, got shape {fitness.shape}")
        if self._noise is None:
            raise RuntimeError("expected a generation() before step(), got none")
        u = shape_fitness(fitness, self.shaping)
        coeffs = (u[0::2] - u[1::2]) / (self.popsize * self.sigma)
        for (_, module), noise in zip(self.modules, self._noise):
            c = torch.as_tensor(coeffs, dtype=module.weight.dtype, device=module.weight.device)
            if "u" in noise:
                pairs, fan_in, r = noise["u"].shape
                left = (noise["u"] * c[:, None, None]).permute(1, 0, 2).reshape(fan_in, pairs * r)
                right = noise["v"].permute(1, 0, 2).reshape(-1, pairs * r)
                ascent = left @ right.T / math.sqrt(self.rank)        # (fan_in, fan_out)
                module.weight.add_(learning_rate * (ascent if _is_conv1d(module) else ascent.T))
            else:
                module.weight.add_(learning_rate * (c @ noise["weight"]))
            if "bias" in noise:
                module.bias.add_(learning_rate * (c @ noise["bias"]))
