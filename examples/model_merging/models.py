"""Small numpy MLPs on scikit-learn's bundled 8x8 digits, and the parents to merge.

A model is one flat float32 vector of its parameters (weights then bias of each
layer), so a batch of models is an (n, P) array: the genomes of the merging jobs.

The parents share a base model and are fine-tuned on different parts of the task
(each sees mostly its own digits), the setting of evolutionary model merging: models
fine-tuned from one base stay in one basin, so their weights can be mixed. Base and
parents are trained once per :class:`ZooSpec` and cached on disk (``$MERGE_CACHE``, else
a per-user folder in the temporary directory) under a hash of the spec and the
data, so later runs and every rank of a run load them.
"""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: part of the cache key: bump when training or the cached file changes
TRAINING_VERSION = 2
INPUTS, CLASSES = 64, 10


@dataclass(frozen=True)
class Split:
    """Inputs in [0, 1] (m, 64) float32, labels (m,) int64 and their one-hot (m, 10)
    float32, as numpy arrays or (:meth:`to`) on a GPU."""

    x: np.ndarray
    y: np.ndarray
    onehot: np.ndarray

    @classmethod
    def of(cls, x, y) -> "Split":
        return cls(x, y, (y[:, None] == np.arange(CLASSES)).astype(np.float32))

    def to(self, xp) -> "Split":
        """The same split as arrays of the array module ``xp`` (numpy or cupy)."""
        return Split(*(xp.asarray(a) for a in (self.x, self.y, self.onehot)))


@dataclass(frozen=True)
class Splits:
    """Training (60%), fitness (20%: what the evolution sees) and test (20%: what the
    report shows) parts of the digits."""

    train: Split
    fitness: Split
    test: Split


def digits_splits(seed: int = 0) -> Splits:
    """The 1797 digits bundled with scikit-learn (no download), shuffled with ``seed``
    and split 60/20/20."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int64)
    a, b = int(0.6 * len(y)), int(0.8 * len(y))
    return Splits(Split.of(x[:a], y[:a]), Split.of(x[a:b], y[a:b]), Split.of(x[b:], y[b:]))


class Architecture:
    """A ReLU MLP ``sizes[0] -> ... -> sizes[-1]``; parameter tensors W1, b1, W2, b2, ..."""

    def __init__(self, sizes):
        self.sizes = tuple(int(s) for s in sizes)
        self.shapes = [shape for fan_in, fan_out in zip(self.sizes, self.sizes[1:])
                       for shape in ((fan_in, fan_out), (fan_out,))]
        ends = np.cumsum([int(np.prod(shape)) for shape in self.shapes])
        self.slices = [slice(int(end - np.prod(shape)), int(end)) for shape, end in zip(self.shapes, ends)]
        self.n_params = int(ends[-1])

    def tensors(self, thetas):
        """Views ``(n, *shape)`` of each parameter tensor of an (n, P) batch."""
        return [thetas[:, s].reshape(len(thetas), *shape) for s, shape in zip(self.slices, self.shapes)]

    def init(self, rng: np.random.Generator) -> np.ndarray:
        """He-initialised weights, zero biases, as one (P,) float32 vector."""
        parts = [rng.standard_normal(shape) * np.sqrt(2.0 / shape[0]) if len(shape) == 2 else np.zeros(shape)
                 for shape in self.shapes]
        return np.concatenate([p.ravel() for p in parts]).astype(np.float32)

    def logits(self, thetas, x):
        """(n, m, classes) logits of n models on (m, inputs) inputs; numpy or cupy alike."""
        tensors = self.tensors(thetas)
        h = x
        for layer in range(0, len(tensors), 2):
            h = h @ tensors[layer] + tensors[layer + 1][:, None, :]
            if layer + 2 < len(tensors):
                h = h * (h > 0)
        return h


def scores(arch: Architecture, thetas, split: Split):
    """(accuracy, mean cross-entropy), each (n,), of n models on ``split``; numpy or
    cupy alike (numpy's functions dispatch to cupy arrays)."""
    logits = arch.logits(thetas, split.x)
    top = logits.max(axis=2, keepdims=True)
    log_norm = np.log(np.exp(logits - top).sum(axis=2)) + top[..., 0]
    picked = (logits * split.onehot).sum(axis=2)
    accuracy = (logits.argmax(axis=2) == split.y).mean(axis=1)
    return accuracy, (log_norm - picked).mean(axis=1)


def gradient(arch: Architecture, theta: np.ndarray, x: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    """Gradient of the mean cross-entropy of one model (P,) on a minibatch (backprop)."""
    tensors = [t[0] for t in arch.tensors(theta[None])]
    weights = tensors[0::2]
    activations = [x]
    for layer, (w, b) in enumerate(zip(weights, tensors[1::2])):
        h = activations[-1] @ w + b
        activations.append(np.maximum(h, 0) if layer + 1 < len(weights) else h)
    logits = activations.pop()
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    delta = (probs / probs.sum(axis=1, keepdims=True) - onehot) / len(x)
    grads = []
    for layer in reversed(range(len(weights))):
        grads[:0] = [activations[layer].T @ delta, delta.sum(axis=0)]
        if layer:
            delta = (delta @ weights[layer].T) * (activations[layer] > 0)
    return np.concatenate([g.ravel() for g in grads])


def train(arch: Architecture, theta: np.ndarray, split: Split, *, epochs: int, lr: float, batch: int,
          rng: np.random.Generator) -> np.ndarray:
    """Plain minibatch SGD on the cross-entropy; returns the new (P,) float32 vector."""
    theta = theta.astype(np.float32)
    for _ in range(epochs):
        order = rng.permutation(len(split.y))
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            theta -= np.float32(lr) * gradient(arch, theta, split.x[rows], split.onehot[rows])
    return theta


# --------------------------------------------------------------------- the parents
@dataclass(frozen=True)
class ZooSpec:
    """How the parents are made.

    A shared base model trains on ``base_share`` of the training data for
    ``base_epochs``; each parent then fine-tunes a copy for ``epochs`` on its part:
    every training digit in ``parts[k]`` and a ``minority`` share of the others.
    """

    hidden: tuple = (32,)
    parts: tuple = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9), (1, 3, 5, 7, 9))
    minority: float = 0.05
    base_share: float = 0.1
    base_epochs: int = 5
    epochs: int = 20
    lr: float = 0.05
    batch: int = 32
    seed: int = 0


def part_of(split: Split, digits, minority: float, rng: np.random.Generator) -> Split:
    """The rows of ``split`` whose label is in ``digits``, and a ``minority`` share of the rest."""
    mine = np.isin(split.y, digits)
    keep = mine | (rng.random(len(mine)) < minority)
    return Split(split.x[keep], split.y[keep], split.onehot[keep])


def train_models(spec: ZooSpec, splits: Splits) -> np.ndarray:
    """(1 + k, P) float32: the shared base of ``spec``, then the k parents fine-tuned
    from it (deterministic)."""
    arch = Architecture((INPUTS, *spec.hidden, CLASSES))
    rng = np.random.default_rng(spec.seed)
    settings = dict(lr=spec.lr, batch=spec.batch, rng=rng)
    base = train(arch, arch.init(rng), part_of(splits.train, (), spec.base_share, rng),
                 epochs=spec.base_epochs, **settings)
    return np.stack([base] + [train(arch, base, part_of(splits.train, digits, spec.minority, rng),
                                    epochs=spec.epochs, **settings) for digits in spec.parts])


class Zoo:
    """The data, the shared base and the parents of one :class:`ZooSpec`, loaded on
    first use.

    Attributes:
        spec: the spec.
        arch: the parents' :class:`Architecture`.
    """

    def __init__(self, spec: ZooSpec = ZooSpec(), cache_dir: str | Path | None = None):
        self.spec = spec
        self.arch = Architecture((INPUTS, *spec.hidden, CLASSES))
        self._cache_dir = cache_dir
        self._splits = None
        self._models = None

    @property
    def splits(self) -> Splits:
        if self._splits is None:
            self._splits = digits_splits(self.spec.seed)
        return self._splits

    @property
    def models(self) -> np.ndarray:
        """(1 + k, P) float32: the base, then the parents; from the cache, else trained
        and cached."""
        if self._models is None:
            path = self.cache_path()
            if path.exists():
                self._models = np.load(path)
            else:
                self._models = train_models(self.spec, self.splits)
                _save_atomic(path, self._models)
        return self._models

    @property
    def base(self) -> np.ndarray:
        """(P,) float32: the pre-trained model the parents were fine-tuned from."""
        return self.models[0]

    @property
    def parents(self) -> np.ndarray:
        """(k, P) float32 parents."""
        return self.models[1:]

    def cache_path(self) -> Path:
        """``<cache dir>/models-<hash of spec, training version and data>.npy``."""
        folder = (self._cache_dir or os.environ.get("MERGE_CACHE")
                  or Path(tempfile.gettempdir()) / f"mpievo-merging-{getpass.getuser()}")
        train = self.splits.train
        key = hashlib.sha256(json.dumps([dataclasses.asdict(self.spec), TRAINING_VERSION]).encode()
                             + train.x.tobytes() + train.y.tobytes()).hexdigest()[:16]
        return Path(folder) / f"models-{key}.npy"


def _save_atomic(path: Path, array: np.ndarray) -> None:
    """Write through a private temporary file and a rename, so that ranks training the
    same parents at once never read a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as handle:
        np.save(handle, array)
    os.replace(handle.name, path)
