"""One CMA-ES run in numpy: (mu/mu_w, lambda)-CMA-ES with active covariance update.

Hansen's standard algorithm (*The CMA Evolution Strategy: A Tutorial*, 2016, Table 1
and eq. 46-53, the defaults of pycma): weighted recombination of the mu best,
cumulative step-size adaptation (CSA), rank-one plus rank-mu covariance update with
negative weights for the lambda - mu worst ("active" CMA). Vectorised over the
population: one matrix product samples a generation, one maps the told points back
to the eigenbasis, one makes the rank-mu update. The eigendecomposition of C is
lazy, every ``1 / (10 n (c1 + cmu))`` generations (each generation for small
populations), as in Hansen's reference code.

Coordinates: ``x = mean + sigma * scale * y`` with ``y ~ N(0, C)``; ``scale`` is the
box width per gene, so ``sigma`` and the tolerances are relative to the box.

Told points are whatever the caller evaluated: :meth:`Strategy.tell` recomputes the
steps ``y`` from them. Rows flagged ``injected`` (repaired into the box, immigrants)
did not come from the sampling distribution; their step is shortened to Mahalanobis
length ``sqrt(n) + 2n/(n+2)`` (Hansen 2011, *Injecting external solutions into
CMA-ES*), so that they cannot blow up the paths or C.

The state is plain numpy arrays and floats (:meth:`Strategy.state_dict`); the
weights and learning rates are recomputed from ``(dim, popsize)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

TOLFUN = 1e-12          # tolfun, tolfunhist: range of the fitness values
TOLX = 1e-12            # tolx: standard deviations, relative to the box width
MAX_CONDITION = 1e14    # conditioncov: largest over smallest eigenvalue of C
HISTORY_CAP = 20000     # generations of fitness history kept (the stagnation window's cap)


def _median(ascending: np.ndarray) -> float:
    """Median of a sorted array (np.median's overhead is ten times the work here)."""
    k = len(ascending)
    return float(0.5 * (ascending[(k - 1) // 2] + ascending[k // 2]))


class Parameters(NamedTuple):
    """Strategy parameters of a ``(dim, popsize)`` run (Hansen 2016, Table 1)."""

    dim: int
    popsize: int
    mu: int
    weights: np.ndarray   # (popsize,): mu positive (sum 1), then negative
    mueff: float
    cc: float
    cs: float
    c1: float
    cmu: float
    damps: float
    chi_n: float          # E||N(0, I)||
    eigen_gap: int        # generations between eigendecompositions
    injection_norm: float  # longest Mahalanobis step of an injected point


def default_popsize(dim: int) -> int:
    """``4 + floor(3 ln dim)``."""
    return 4 + int(3 * math.log(dim))


def parameters(dim: int, popsize: int) -> Parameters:
    """The default learning rates and weights for ``dim`` genes and ``popsize`` samples."""
    n, lam = dim, popsize
    mu = lam // 2
    raw = math.log((lam + 1) / 2) - np.log(np.arange(1, lam + 1))
    positive, negative = raw[:mu], raw[mu:]
    mueff = positive.sum() ** 2 / (positive ** 2).sum()
    mueff_neg = negative.sum() ** 2 / (negative ** 2).sum() if (negative ** 2).sum() > 0 else 0.0
    c1 = 2.0 / ((n + 1.3) ** 2 + mueff)
    cmu = min(1.0 - c1, 2.0 * (0.25 + mueff + 1.0 / mueff - 2.0) / ((n + 2.0) ** 2 + mueff))
    # Negative weights: scaled so that C stays positive definite (tutorial eq. 53).
    neg_scale = min(1.0 + c1 / cmu, 1.0 + 2.0 * mueff_neg / (mueff + 2.0), (1.0 - c1 - cmu) / (n * cmu))
    neg_sum = -negative.sum()
    weights = np.concatenate([positive / positive.sum(),
                              negative * (neg_scale / neg_sum) if neg_sum > 0 else negative])
    cs = (mueff + 2.0) / (n + mueff + 5.0)
    return Parameters(
        dim=n, popsize=lam, mu=mu, weights=weights, mueff=mueff,
        cc=(4.0 + mueff / n) / (n + 4.0 + 2.0 * mueff / n), cs=cs, c1=c1, cmu=cmu,
        damps=1.0 + 2.0 * max(0.0, math.sqrt((mueff - 1.0) / (n + 1.0)) - 1.0) + cs,
        chi_n=math.sqrt(n) * (1.0 - 1.0 / (4.0 * n) + 1.0 / (21.0 * n * n)),
        eigen_gap=max(1, int(1.0 / (10.0 * n * (c1 + cmu)))),
        injection_norm=math.sqrt(n) + 2.0 * n / (n + 2.0))


class Strategy:
    """One CMA-ES run from ``mean`` with step ``sigma`` (see the module docstring).

    Args:
        mean: (dim,) start point.
        sigma: initial step, relative to ``scale``.
        popsize: samples per generation (>= 2).
        scale: (dim,) positive scale per gene (the box width).
    """

    def __init__(self, mean: np.ndarray, sigma: float, popsize: int, scale: np.ndarray):
        self.scale = np.asarray(scale, np.float64)
        self.p = parameters(len(self.scale), int(popsize))
        n = self.p.dim
        self.mean = np.array(mean, np.float64)
        self.sigma = self.sigma0 = float(sigma)
        self.cov = np.eye(n)
        self.basis = np.eye(n)
        self.axes = np.ones(n)            # sqrt of C's eigenvalues (D)
        self.path_c = np.zeros(n)
        self.path_sigma = np.zeros(n)
        self.generation = 0
        self.eigen_generation = 0
        self.best_history: list[float] = []
        self.median_history: list[float] = []
        self.last_range = math.inf        # range of the last generation's fitness
        self.best_fitness = math.inf
        self._transform = self.basis * self.axes

    @property
    def popsize(self) -> int:
        return self.p.popsize

    # --- sampling and update -----------------------------------------------------
    def ask(self, rng: np.random.Generator) -> np.ndarray:
        """(popsize, dim) float64 samples (unbounded). Draws: popsize * dim normals."""
        z = rng.standard_normal((self.p.popsize, self.p.dim))
        x = z @ self._transform.T
        x *= self.sigma * self.scale
        x += self.mean
        return x

    def tell(self, x: np.ndarray, fitness: np.ndarray, injected: np.ndarray) -> None:
        """Update from the evaluated points ``x`` (popsize, dim), minimised ``fitness``
        (+inf ranks last) and the mask of rows that were not sampled as they are."""
        p = self.p
        order = np.argsort(fitness, kind="stable")
        f = fitness[order]
        y = (x[order] - self.mean) / (self.sigma * self.scale)
        z = (y @ self.basis) / self.axes              # D^-1 B^T y: C^-1/2 y in the eigenbasis
        shorten = injected[order]
        if shorten.any():
            norms = np.sqrt(np.einsum("ij,ij->i", z[shorten], z[shorten]))
            factor = np.minimum(1.0, p.injection_norm / np.maximum(norms, 1e-300))[:, None]
            y[shorten] *= factor
            z[shorten] *= factor
        w_pos = p.weights[:p.mu]
        y_w = w_pos @ y[:p.mu]
        self.mean += (self.sigma * self.scale) * y_w
        self.path_sigma *= 1.0 - p.cs
        self.path_sigma += math.sqrt(p.cs * (2.0 - p.cs) * p.mueff) * (self.basis @ (w_pos @ z[:p.mu]))
        ps_norm = float(np.linalg.norm(self.path_sigma))
        hsig = ps_norm / math.sqrt(1.0 - (1.0 - p.cs) ** (2 * (self.generation + 1))) \
            < (1.4 + 2.0 / (p.dim + 1.0)) * p.chi_n
        self.path_c *= 1.0 - p.cc
        if hsig:
            self.path_c += math.sqrt(p.cc * (2.0 - p.cc) * p.mueff) * y_w
        self._update_cov(y, z, hsig)
        self.sigma *= math.exp(min(1.0, (p.cs / p.damps) * (ps_norm / p.chi_n - 1.0)))
        # Flat fitness: the best quarter ties, selection sees no signal; step out (Hansen's code).
        if f[0] == f[min(p.popsize - 1, int(math.ceil(0.1 + p.popsize / 4.0)))]:
            self.sigma *= math.exp(0.2 + p.cs / p.damps)
        self._record(f)
        if self.generation - self.eigen_generation >= p.eigen_gap:
            self._decompose()

    def _update_cov(self, y: np.ndarray, z: np.ndarray, hsig: bool) -> None:
        p = self.p
        weights = p.weights.copy()
        # Negative weights act on directions normalised to length sqrt(n) (tutorial eq. 46).
        tail = np.einsum("ij,ij->i", z[p.mu:], z[p.mu:])
        weights[p.mu:] *= p.dim / np.maximum(tail, 1e-300)
        # hsig = 0 stalls path_c; keep the variance its update would have carried.
        stalled = 0.0 if hsig else p.c1 * p.cc * (2.0 - p.cc)
        self.cov *= 1.0 + stalled - p.c1 - p.cmu * float(p.weights.sum())
        self.cov += p.c1 * np.outer(self.path_c, self.path_c)
        self.cov += p.cmu * ((y.T * weights) @ y)

    def _record(self, f: np.ndarray) -> None:
        self.generation += 1
        self.best_history.append(float(f[0]))
        self.median_history.append(_median(f))
        if len(self.best_history) > HISTORY_CAP + 1000:   # trim in chunks, not every generation
            del self.best_history[:-HISTORY_CAP], self.median_history[:-HISTORY_CAP]
        self.last_range = float(f[-1] - f[0])
        self.best_fitness = min(self.best_fitness, float(f[0]))

    def _decompose(self) -> None:
        cov = (self.cov + self.cov.T) * 0.5     # exactly symmetric (rounding may have broken it)
        eigenvalues, self.basis = np.linalg.eigh(cov)
        # Rounding can make tiny eigenvalues <= 0; clamped, conditioncov then ends the run.
        self.axes = np.sqrt(np.maximum(eigenvalues, eigenvalues.max() * 1e-20))
        self.cov = cov
        self.eigen_generation = self.generation
        self._transform = self.basis * self.axes

    # --- termination ---------------------------------------------------------------
    def stop_reason(self, dtype) -> str:
        """The first termination criterion that holds, or ``""``.

        ``noeffectcoord``/``noeffectaxis`` test in ``dtype`` (the archive's): a float32
        island stops when its steps no longer change the rounded genomes.
        """
        if self.generation == 0:
            return ""
        p = self.p
        window = 10 + math.ceil(30 * p.dim / p.popsize)
        recent = self.best_history[-window:]
        spread = max(recent) - min(recent)
        if self.generation > 1 and max(spread, self.last_range) < TOLFUN:
            return "tolfun"
        if len(recent) == window and spread < TOLFUN:
            return "tolfunhist"
        stds = np.sqrt(np.diagonal(self.cov))
        if np.all(self.sigma * np.maximum(np.abs(self.path_c), stds) < TOLX):
            return "tolx"
        if self.axes.max() ** 2 > MAX_CONDITION * self.axes.min() ** 2:
            return "conditioncov"
        dtype = np.dtype(dtype)
        rounded = self.mean.astype(dtype)
        if np.any((self.mean + 0.2 * self.sigma * self.scale * stds).astype(dtype) == rounded):
            return "noeffectcoord"
        i = self.generation % p.dim
        axis = (0.1 * self.sigma * self.axes[i]) * self.scale * self.basis[:, i]
        if np.all((self.mean + axis).astype(dtype) == rounded):
            return "noeffectaxis"
        if self._stagnated():
            return "stagnation"
        return ""

    def _stagnated(self) -> bool:
        """Hansen 2009: over the last ``0.2 g + 120 + 30 n / lambda`` generations (at most
        20,000), the medians of the newest 30% of the best and of the median fitness are
        both no better than those of the oldest 30%."""
        p = self.p
        window = min(HISTORY_CAP, int(0.2 * self.generation + 120 + 30 * p.dim / p.popsize))
        if self.generation < window:
            return False
        part = max(1, int(0.3 * window))
        for history in (self.best_history, self.median_history):
            values = np.array(history[-window:])
            if _median(np.sort(values[-part:])) < _median(np.sort(values[:part])):
                return False
        return True

    # --- checkpoint ---------------------------------------------------------------
    def state_dict(self) -> dict:
        """Plain arrays and scalars; with ``scale`` they rebuild the run exactly."""
        return {
            "popsize": self.p.popsize, "mean": self.mean.copy(), "sigma": self.sigma,
            "sigma0": self.sigma0, "cov": self.cov.copy(), "basis": self.basis.copy(),
            "axes": self.axes.copy(), "path_c": self.path_c.copy(),
            "path_sigma": self.path_sigma.copy(), "generation": self.generation,
            "eigen_generation": self.eigen_generation,
            "best_history": np.array(self.best_history, np.float64),
            "median_history": np.array(self.median_history, np.float64),
            "last_range": self.last_range, "best_fitness": self.best_fitness,
        }

    @classmethod
    def from_state(cls, state: dict, scale: np.ndarray) -> "Strategy":
        """The run saved by :meth:`state_dict` (shapes checked against ``scale``).

        Raises:
            ValueError: an array of the wrong shape.
        """
        n = len(scale)
        shapes = {"mean": (n,), "cov": (n, n), "basis": (n, n), "axes": (n,), "path_c": (n,),
                  "path_sigma": (n,)}
        arrays = {}
        for key, shape in shapes.items():
            arrays[key] = np.array(state[key], np.float64)
            if arrays[key].shape != shape:
                raise ValueError(f"expected CMA-ES state {key!r} of shape {shape}, got {arrays[key].shape}")
        run = cls(arrays["mean"], float(state["sigma0"]), int(state["popsize"]), scale)
        for key, value in arrays.items():
            setattr(run, key, value)
        run.sigma = float(state["sigma"])
        run.generation = int(state["generation"])
        run.eigen_generation = int(state["eigen_generation"])
        run.best_history = np.asarray(state["best_history"], np.float64).tolist()
        run.median_history = np.asarray(state["median_history"], np.float64).tolist()
        run.last_range = float(state["last_range"])
        run.best_fitness = float(state["best_fitness"])
        run._transform = run.basis * run.axes
        return run
