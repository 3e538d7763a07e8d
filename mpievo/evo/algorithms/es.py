"""Evolution strategies of the OpenAI-ES family on an island (``engine.algorithm = "es"``).

A Gaussian search distribution ``N(mean, sigma^2 I)`` whose mean follows a stochastic
gradient estimate (Salimans et al. 2017, "Evolution Strategies as a Scalable Alternative
to Reinforcement Learning"; Qiu et al. 2025, "Evolution Strategies at Scale: LLM
Fine-Tuning Beyond Reinforcement Learning", for full-parameter fine-tuning):

* **Antithetic pairs**: generation ``t`` draws ``popsize / 2`` noise vectors ``z_j`` and
  asks for ``mean + sigma z_j`` (member ``2j``) and ``mean - sigma z_j`` (member ``2j+1``).
* **Seeds, not noise**: ``z_j`` comes from the counter-based generator keyed by
  ``(seed, island, generation, "breed")`` and the pair (:mod:`mpievo.kernels.es_noise`),
  so the update is rebuilt from the key and the ``popsize`` fitness values alone, block
  by block in place, with no genome-sized temporary (an island, which holds its members
  anyway, keeps the generation's noise up to :data:`NOISE_CACHE_BYTES` instead of
  drawing it again: the same bits); every rank that holds the mean computes the same
  bits (the replicated scheme: only the fitness travels, 8 bytes per member).
* **Fitness shaping**: ``centered_ranks`` (utilities ``rank / (P-1) - 1/2``, the best
  ``+1/2``; Salimans), ``zscore`` (``(f - mean) / std``; ES at Scale) or ``none`` (raw
  fitness, negated).
* **Optimizer on the mean**: ``adam`` (default, as OpenAI-ES) or ``sgd`` with momentum
  (``es_momentum = 0``: the plain step of ES at Scale), gradient ``-1/(P sigma) sum_i u_i
  eps_i + weight_decay * mean`` (L2 as Salimans' ``l2coeff``).
* **Low-rank noise** (``noise = "lowrank"``, ``engine.es_noise``): on each weight matrix of
  a model's genome a rank-``rank`` term ``U V^T / sqrt(rank)`` instead of a normal per
  gene (EGGROLL), from one short compact noise vector per pair
  (:mod:`mpievo.kernels.es_lowrank`); the update is the sum of those terms.
* **On the device** (``engine.device = "cuda"``, full noise): the mean, the moments and
  the members stay on the GPU; :mod:`mpievo.kernels.cuda.es_noise` makes the members and
  rebuilds the update from the key there, the host's bits.
* **Schedules**: ``sigma_t = max(sigma_min, sigma * sigma_decay^t)`` and likewise the
  learning rate (``t`` = updates so far), as estool's ``sigma_decay``/``sigma_limit``.

Regimes (both documented in docs/guides/evolution-strategies.md): the defaults (population
30, sigma 0.02, learning rate 0.01, Adam, centred ranks) follow Salimans for numeric
problems and small networks; for fine-tuning a large language model ES at Scale uses
population 30, sigma 1e-3, learning rate ~5e-4, z-scores and a plain step
(``es_optimizer = "sgd"``, ``es_momentum = 0``).

Box: members are clipped into the problem's box (the update still uses their noise);
the mean is clipped after each update. The mean starts at the archive's best member
(the problem's starting genomes, e.g. a merged model). Immigrants (:meth:`ES.migrate_in`): the best replaces the
mean, and resets the optimizer's moments, only when it is better than every member of
the last generation (the mean itself is never evaluated).

``state_dict``: the mean, the optimizer's moments and the update count; with the keyed
noise that is everything, so a resumed run continues bit for bit.

Example::

    from mpievo.evo import Island, EngineConfig
    island = Island(0, "sphere", EngineConfig(algorithm="es", population=2, es_sigma=0.05))
    island.run(100)
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import es_lowrank, es_noise
from .. import operators as ops

SHAPINGS = ("centered_ranks", "zscore", "none")
NOISES = ("full", "lowrank")
OPTIMIZERS = ("adam", "sgd")
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8
#: the island path keeps a generation's noise ((popsize / 2) x dim float32) for its update
#: up to this size, instead of drawing it a second time from the key (the same bits)
NOISE_CACHE_BYTES = 256 << 20


def centered_ranks(fitness: np.ndarray) -> np.ndarray:
    """Utilities of minimised ``fitness``: ``(P-1-rank) / (P-1) - 1/2`` (ties by position),
    the best ``+0.5``, the worst ``-0.5`` (Salimans et al. 2017).

    Example::

        centered_ranks(np.array([3.0, 1.0, 2.0]))     # array([-0.5, 0.5, 0.])
    """
    fitness = np.asarray(fitness, np.float64)
    n = len(fitness)
    ranks = np.empty(n)
    ranks[np.argsort(fitness, kind="stable")] = np.arange(n)
    return (n - 1 - ranks) / max(n - 1, 1) - 0.5


def zscores(fitness: np.ndarray) -> np.ndarray:
    """Utilities of minimised ``fitness``: ``-(f - mean) / std`` (non-finite values count as
    the worst finite one; all equal: zeros) (ES at Scale).

    Example::

        zscores(np.array([1.0, 3.0]))                 # array([ 1., -1.])
    """
    f = np.array(fitness, np.float64)
    finite = np.isfinite(f)
    if not finite.any():
        return np.zeros(len(f))
    f[~finite] = f[finite].max()
    std = f.std()
    return np.zeros(len(f)) if std == 0 else -(f - f.mean()) / std


def shape_fitness(fitness: np.ndarray, shaping: str) -> np.ndarray:
    """Utilities (higher is better) of minimised ``fitness`` under ``shaping``.

    Example::

        shape_fitness(np.array([2.0, 1.0]), "centered_ranks")   # array([-0.5, 0.5])
    """
    if shaping == "centered_ranks":
        return centered_ranks(fitness)
    if shaping == "zscore":
        return zscores(fitness)
    if shaping == "none":
        f = np.asarray(fitness, np.float64)
        return np.where(np.isfinite(f), -f, 0.0)
    raise ValueError(f"expected shaping among {list(SHAPINGS)}, got {shaping!r}")


def _positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not value > 0:
        raise ValueError(f"expected {name} > 0, got {value!r}")
    return float(value)


def _fraction(value, name: str, high_open: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not (0 <= value < 1 if high_open else 0 < value <= 1):
        raise ValueError(f"expected {name} in {'[0, 1)' if high_open else '(0, 1]'}, got {value!r}")
    return float(value)


class ES:
    """OpenAI-ES island algorithm (see the module docstring).

    Args:
        popsize: members per generation, an even int >= 2 (antithetic pairs).
        sigma: the noise's standard deviation (absolute, in genome units), > 0.
        learning_rate: the optimizer's step, > 0.
        optimizer: ``adam`` or ``sgd`` (with ``momentum``).
        momentum: SGD momentum in [0, 1).
        shaping: ``centered_ranks``, ``zscore`` or ``none``.
        weight_decay: L2 coefficient added to the gradient (>= 0).
        sigma_decay, lr_decay: factors per update in (0, 1] (1: constant).
        sigma_min, lr_min: floors of the schedules (>= 0).
        bias_correction: Adam's bias correction of its moments (Kingma and Ba; OpenAI's
            ES code); False: without, as EvoX's OpenES (early steps up to ~3x larger).
        noise: ``full`` (a normal per gene) or ``lowrank`` (per weight matrix of a model's
            genome a rank-``rank`` term ``U V^T / sqrt(rank)``, full noise elsewhere;
            :func:`model_matrices`).
        rank: the low-rank noise's rank, >= 1 and at most each matrix's smaller side.

    Raises:
        ValueError: "expected X, got Y" for any bad setting, before any work.

    Example::

        es = ES(popsize=30, sigma=1e-3, learning_rate=5e-4, optimizer="sgd", momentum=0.0,
                shaping="zscore")       # the ES at Scale regime for language models
    """

    name = "es"
    takes_stream_keys = True

    def __init__(self, *, popsize: int = 30, sigma: float = 0.02, learning_rate: float = 0.01,
                 optimizer: str = "adam", momentum: float = 0.9, shaping: str = "centered_ranks",
                 weight_decay: float = 0.0, sigma_decay: float = 1.0, sigma_min: float = 0.0,
                 lr_decay: float = 1.0, lr_min: float = 0.0, bias_correction: bool = True, noise: str = "full",
                 rank: int = 4):
        if isinstance(popsize, bool) or not isinstance(popsize, (int, np.integer)) or popsize < 2 or popsize % 2:
            raise ValueError(f"expected popsize to be an even int >= 2 (antithetic pairs), got {popsize!r}")
        self.popsize = int(popsize)
        self.sigma = _positive(sigma, "sigma")
        self.learning_rate = _positive(learning_rate, "learning_rate")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"expected optimizer among {list(OPTIMIZERS)}, got {optimizer!r}")
        if shaping not in SHAPINGS:
            raise ValueError(f"expected shaping among {list(SHAPINGS)}, got {shaping!r}")
        self.optimizer, self.shaping = optimizer, shaping
        self.momentum = _fraction(momentum, "momentum")
        if isinstance(weight_decay, bool) or not float(weight_decay) >= 0:
            raise ValueError(f"expected weight_decay >= 0, got {weight_decay!r}")
        self.weight_decay = float(weight_decay)
        self.sigma_decay = _fraction(sigma_decay, "sigma_decay", high_open=False)
        self.lr_decay = _fraction(lr_decay, "lr_decay", high_open=False)
        for value, name in ((sigma_min, "sigma_min"), (lr_min, "lr_min")):
            if isinstance(value, bool) or not float(value) >= 0:
                raise ValueError(f"expected {name} >= 0, got {value!r}")
        self.sigma_min, self.lr_min = float(sigma_min), float(lr_min)
        if not isinstance(bias_correction, (bool, np.bool_)):
            raise ValueError(f"expected bias_correction to be a bool, got {bias_correction!r}")
        self.bias_correction = bool(bias_correction)
        if noise not in NOISES:
            raise ValueError(f"expected noise among {list(NOISES)}, got {noise!r}")
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
            raise ValueError(f"expected rank to be an int >= 1, got {rank!r}")
        self.noise, self.rank = noise, int(rank)
        self._layout = self._device = None

    @classmethod
    def from_config(cls, config) -> "ES":
        return cls(popsize=config.es_popsize, sigma=config.es_sigma, learning_rate=config.es_learning_rate,
                   optimizer=config.es_optimizer, momentum=config.es_momentum, shaping=config.es_shaping,
                   weight_decay=config.es_weight_decay, sigma_decay=config.es_sigma_decay,
                   sigma_min=config.es_sigma_min, lr_decay=config.es_lr_decay, lr_min=config.es_lr_min,
                   bias_correction=config.es_adam_bias_correction, noise=config.es_noise, rank=config.es_rank)

    # --- schedules -------------------------------------------------------------------
    def current_sigma(self) -> float:
        """Sigma of the next generation: ``max(sigma_min, sigma * sigma_decay ** updates)``."""
        return max(self.sigma_min, self.sigma * self.sigma_decay ** self.updates)

    def current_learning_rate(self) -> float:
        """The next update's learning rate: ``max(lr_min, learning_rate * lr_decay ** updates)``."""
        return max(self.lr_min, self.learning_rate * self.lr_decay ** self.updates)

    # --- protocol --------------------------------------------------------------------
    def check_problem(self, problem, on_device: bool = False) -> None:
        """Refuse low-rank noise on ``problem`` before any work: on a device island, on a
        genome without weight matrices, or with ``rank`` above a matrix's smaller side
        ("expected X, got Y").

        Example::

            ES(noise="lowrank", rank=8).check_problem(model_problem)
        """
        if on_device and self.noise != "full":
            raise ValueError(_DEVICE_NOISE.format(self.noise))
        if self.noise == "lowrank":
            es_lowrank.lowrank_layout(problem.dim, model_matrices(problem), self.rank)

    def init(self, problem, archive, rng) -> None:
        self.archive = archive
        low, high = ops.box_arrays(problem.lower, problem.upper, archive.dtype)
        matrices = model_matrices(problem) if self.noise == "lowrank" else None
        self.start(archive.genomes[archive.best_index()], low, high, matrices)

    def start(self, mean: np.ndarray, low, high, matrices=None) -> None:
        """Begin at ``mean`` (its dtype is the members'; the state is float64 for float64
        genomes, else float32) inside the box ``[low, high]``; no archive needed.
        ``matrices``: with low-rank noise, the genome's ``(offset, rows, cols)`` weight
        matrices (:func:`model_matrices`).

        Example::

            es.start(np.zeros(1000, np.float32), -np.inf, np.inf)
        """
        self._device = _device_kernels(mean, self.noise)
        mean = mean if self._device is not None else np.asarray(mean)
        if self.noise == "lowrank":
            self._layout = es_lowrank.lowrank_layout(len(mean), [] if matrices is None else matrices, self.rank)
        self.dim = mean.shape[0]
        self.dtype = np.dtype(mean.dtype)
        self.state_dtype = np.float64 if self.dtype == np.float64 else np.float32
        self.stride = es_noise.pair_stride(self.dim)
        velocity = self.optimizer == "adam" or self.momentum > 0     # plain SGD keeps no moment
        sizes = (self.dim if velocity else 0, self.dim if self.optimizer == "adam" else 0)
        if self._device is not None:       # the state and the box (one value per gene) on the device
            self._low, self._high = (self._device.place(np.broadcast_to(np.asarray(b, self.dtype), (self.dim,)))
                                     for b in (low, high))
            self.mean = self._device.copy(mean)
            self.moment1, self.moment2 = (self._device.zeros(n, self.state_dtype) for n in sizes)
        else:
            self._low, self._high = low, high
            self.mean = mean.astype(self.state_dtype)
            self.moment1, self.moment2 = (np.zeros(n, self.state_dtype) for n in sizes)
        self.updates = 0
        self.last_best = np.inf
        self._batch = self._noise = None
        self._pending = None

    def clip(self, x: np.ndarray) -> None:
        """Clip genomes ``x`` into the box in place."""
        np.clip(x, self._low, self._high, out=x)

    def ask(self, rng) -> np.ndarray:
        """The generation's ``popsize`` members (antithetic pairs), rows of the archive's dtype."""
        key, base = rng.counter_start()
        sigma = self.current_sigma()
        if self._device is not None:        # full noise, drawn again by the update (none kept)
            if self._batch is None:
                self._batch = self._device.empty((self.popsize, self.dim), self.dtype)
            self._device.members(self._batch, self.mean, sigma, key, base, self._low, self._high)
            self._pending = (key, base, sigma)
            return self._batch
        if self._batch is None:
            self._batch = np.empty((self.popsize, self.dim), self.dtype)
            width = self._layout[2] if self._layout is not None else self.dim    # low-rank: always kept
            keep = self._layout is not None or (self.popsize // 2) * width * 4 <= NOISE_CACHE_BYTES
            self._noise = np.empty((self.popsize // 2, width), np.float32) if keep else None
        if self._layout is not None:
            es_lowrank.lowrank_members(self._batch, self._noise, self.mean, sigma, key, base, self._layout[0],
                                       self._layout[1], self.rank)
        else:
            es_noise.members(self._batch, self.mean, sigma, key, base, self._noise)
        self.clip(self._batch)
        self._pending = (key, base, sigma)
        return self._batch

    def member_into(self, out: np.ndarray, member: int, key, base: int, sigma: float, start: int = 0) -> None:
        """Write genes ``start .. start + len(out)`` of ``member`` (not clipped) into ``out``:
        a whole row, or one tensor of a model in place, from the generation's key alone.

        Example::

            es.member_into(row, 3, key, base, es.current_sigma())   # mean - sigma z_1
        """
        if self._layout is not None:
            raise ValueError("expected full noise to build one member at a time, got es_noise 'lowrank'")
        stop = start + len(out)
        es_noise.perturb(out, self.mean[start:stop], sigma, -1.0 if member % 2 else 1.0, key, base,
                         pair=member // 2, stride=self.stride, start=start)

    def coefficients(self, fitness: np.ndarray, sigma: float) -> np.ndarray:
        """Per pair ``j``: ``(u_2j - u_2j+1) / (popsize * sigma)``, the weight of ``z_j`` in the
        ascent direction ``1/(P sigma) sum_i u_i eps_i`` (``u`` the shaped utilities).

        Example::

            c = es.coefficients(fitness, es.current_sigma())      # (popsize // 2,)
        """
        fitness = np.asarray(fitness, np.float64)
        if fitness.shape != (self.popsize,):
            raise ValueError(f"expected the fitness of {self.popsize} members, got shape {fitness.shape}")
        utilities = shape_fitness(fitness, self.shaping)
        return (utilities[0::2] - utilities[1::2]) / (self.popsize * sigma)

    def tell(self, genomes, fitness: np.ndarray) -> None:
        if self._pending is None:
            raise RuntimeError("expected ask() before tell(), got no pending batch")
        key, base, sigma = self._pending
        self.update(np.asarray(fitness, np.float64), key, base, sigma, self._noise)

    def update(self, fitness: np.ndarray, key, base: int, sigma: float, noise=None) -> None:
        """The mean's step from the members' ``fitness`` and the generation's key, rebuilt
        block by block in place (the same bits on every rank holding the same mean);
        ``noise``: the generation's noise kept by :meth:`ask` (the same bits), else None.

        Example::

            es.update(fitness, key, base, sigma)     # after evaluating the members of ``key``
        """
        coeffs = self.coefficients(fitness, sigma)
        lr = self.current_learning_rate()
        self.updates += 1
        sums = None
        if self._layout is not None:             # the low-rank terms, from the compact noise ask() kept
            if noise is None:
                raise ValueError("expected the compact noise ask() kept for es_noise 'lowrank', got None")
            sums = es_lowrank.lowrank_sums(coeffs, noise, self.dim, self._layout[0], self._layout[1], self.rank)
            noise = None
        if self._device is not None:       # the host's bits, the clip fused into the step
            box = (self._low, self._high)
            if self.optimizer == "adam":
                self._device.adam_update(self.mean, self.moment1, self.moment2, coeffs, key, base, *box,
                                         decay=self.weight_decay, lr=lr, beta1=_ADAM_BETAS[0], beta2=_ADAM_BETAS[1],
                                         eps=_ADAM_EPS, step=self.updates if self.bias_correction else None)
            else:
                self._device.sgd_update(self.mean, self.moment1, coeffs, key, base, *box, decay=self.weight_decay,
                                        lr=lr, momentum=self.momentum)
        elif self.optimizer == "adam":
            es_noise.adam_update(self.mean, self.moment1, self.moment2, coeffs, key, base, stride=self.stride,
                                 start=0, decay=self.weight_decay, lr=lr, beta1=_ADAM_BETAS[0],
                                 beta2=_ADAM_BETAS[1], eps=_ADAM_EPS,
                                 step=self.updates if self.bias_correction else None, noise=noise, sums=sums)
        else:
            es_noise.sgd_update(self.mean, self.moment1, coeffs, key, base, stride=self.stride, start=0,
                                decay=self.weight_decay, lr=lr, momentum=self.momentum, noise=noise, sums=sums)
        if self._device is None:
            np.clip(self.mean, self._low, self._high, out=self.mean)
        finite = fitness[np.isfinite(fitness)]
        self.last_best = float(finite.min()) if len(finite) else np.inf
        self._pending = None

    def migrate_in(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """The best immigrant becomes the mean (moments reset) when better than every
        member of the last generation."""
        fitness = np.asarray(fitness, np.float64)
        if not len(fitness):
            return
        best = int(np.argmin(fitness))
        if fitness[best] < self.last_best:
            if self._device is not None:
                self._device.assign(self.mean, genomes[best])
                self._device.fill_zero(self.moment1)
                self._device.fill_zero(self.moment2)
            else:
                self.mean[:] = np.asarray(genomes[best], self.state_dtype)
                self.moment1[:] = 0
                self.moment2[:] = 0
            self.last_best = float(fitness[best])

    def best(self) -> tuple[np.ndarray, float]:
        i = self.archive.best_index()
        return self.archive.row(i), float(self.archive.fitness[i])

    def state_dict(self) -> dict:
        """The mean, the moments (host arrays, a device island's too) and the counters."""
        host = (lambda a: a.copy()) if self._device is None else self._device.to_host
        return {"mean": host(self.mean), "moment1": host(self.moment1), "moment2": host(self.moment2),
                "updates": int(self.updates), "last_best": float(self.last_best)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` exactly.

        Raises:
            ValueError: missing keys or arrays of another shape.
        """
        missing = [key for key in ("mean", "moment1", "moment2", "updates", "last_best") if key not in state]
        if missing:
            raise ValueError(f"expected ES state keys {missing}, got a state with keys {sorted(state)}")
        for name in ("mean", "moment1", "moment2"):
            want = len(getattr(self, name))
            got = np.shape(state[name])
            if got != (want,):
                raise ValueError(f"expected ES {name} of shape ({want},), got {got}")
            if self._device is not None:
                self._device.assign(getattr(self, name), np.asarray(state[name], self.state_dtype))
            else:
                getattr(self, name)[:] = np.asarray(state[name], self.state_dtype)
        self.updates = int(state["updates"])
        self.last_best = float(state["last_best"])
        self._pending = None


_DEVICE_NOISE = ("es_noise: expected 'full' on the device (engine.device 'cuda'), got {!r} (low-rank noise runs "
                 "on a host island, or in LowRankPopulation on a model's device)")


def _device_kernels(mean, noise: str):
    """:mod:`mpievo.kernels.cuda.es_noise` (imported here, never at import time) when ``mean``
    is a device array (a device island's), else None.

    Raises:
        ValueError: low-rank noise or a genome dtype other than float32/float64 on the device.
    """
    if not (getattr(mean, "__cuda_ndarray__", False) or hasattr(mean, "__cuda_array_interface__")):
        return None
    if noise != "full":
        raise ValueError(_DEVICE_NOISE.format(noise))
    if np.dtype(mean.dtype) not in (np.float32, np.float64):
        raise ValueError(f"expected float32 or float64 genomes for ES on the device, got {np.dtype(mean.dtype)}")
    from mpievo.kernels.cuda import es_noise as cuda_es_noise

    return cuda_es_noise


def model_matrices(problem) -> list[tuple[int, int, int]]:
    """``(offset, rows, cols)`` of every 2-D tensor in ``problem``'s genome: a
    :class:`~mpievo.torch.ModelProblem`'s weight matrices (its ``flat`` layout); none for
    other problems.

    Example::

        model_matrices(ModelProblem(torch.nn.Linear(3, 2), score))   # [(0, 2, 3)]
    """
    flat = getattr(problem, "flat", None)
    if flat is None:
        return []
    return [(int(offset), int(shape[0]), int(shape[1])) for offset, shape in zip(flat.offsets, flat.shapes)
            if len(shape) == 2]
