"""A fitness over models as an mpievo Problem over flat genomes: :class:`ModelProblem`.

``evaluate(model) -> score`` becomes a batch fitness over genomes of
:class:`~.flat.FlatParameters` layout: each row is written into the model's flat buffer
(one copy) and the model is run under ``torch.no_grad()`` in eval mode. The source
models are the problem's bases (:func:`model_bases`), so ``engine.genome = "delta"``
works as for any problem (under MPI the bases are loaded once per node into shared
memory by :mod:`mpievo.parallel.shared_bases`); a delta genome is materialised as
``base + delta`` straight into the flat buffer (:meth:`ModelProblem.genome_block`), with
no block of the encoding's own and no copy after. With ``pipeline`` (the default on a
CPU model) the problem lends two such buffers (:meth:`ModelProblem.genome_blocks`):
while the model runs on one child, a helper thread makes the next into the other
(:mod:`mpievo.evo.pipeline`; dense, delta and seeded genomes; same values).

Example::

    problem = ModelProblem(model, lambda m: accuracy(m, val), sources=[expert_a, expert_b])
    result = mpievo.minimize(problem, config={"engine": {"genome": "delta"}}, budget=200)
    problem.flat.write(result.x)          # the best genome, now the model's weights
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from ..evo.genomes import BaseModels
from ..evo.pipeline import pipelined_rows, settle_rows
from ..evo.problems import Problem
from .flat import FlatParameters, as_flat, as_numpy, copy_releasing_gil


def _gene_tensors(model: torch.nn.Module, flat: FlatParameters, label: str) -> list[torch.Tensor]:
    """``model``'s tensors for ``flat``'s genes, by name, checked against the layout.

    Raises:
        ValueError: a missing gene tensor or one of another shape, naming ``label`` and it.
    """
    params = dict(model.named_parameters(remove_duplicate=False))
    tensors = []
    for name, shape in zip(flat.names, flat.shapes):
        tensor = params.get(name)
        if tensor is None:
            raise ValueError(f"{label}: expected a tensor {name!r} of shape {shape}, got none")
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{label}: expected tensor {name!r} of shape {shape}, got {tuple(tensor.shape)}")
        tensors.append(tensor)
    return tensors


def fill_genome(model: torch.nn.Module, flat: FlatParameters, out: np.ndarray, label: str = "model") -> None:
    """Write ``model``'s genes (in ``flat``'s layout) into the host row ``out``, tensor by
    tensor (no genome-sized temporary), cast to ``out``'s dtype."""
    with torch.no_grad():
        for tensor, start, stop in zip(_gene_tensors(model, flat, label), flat.offsets[:-1], flat.offsets[1:]):
            host = tensor.detach().reshape(-1).cpu()
            out[start:stop] = as_numpy(host).astype(out.dtype, copy=False)


def bases_dtype(flat: FlatParameters) -> np.dtype:
    """The dtype the bases keep for ``flat``'s genes: the genes' own (bfloat16 and float16
    sources stay 2 bytes a gene in the node's shared memory)."""
    return flat.numpy_dtype


def model_bases(models: Sequence[torch.nn.Module], flat: FlatParameters) -> BaseModels:
    """``models`` (in memory, same architecture as ``flat``'s) as the bases of genomes of
    ``flat``'s layout, filled on first use (once per node under MPI).

    Raises:
        ValueError: no model, or a model whose tensors differ from the layout (named).

    Example::

        flat = FlatParameters(model)
        bases = model_bases([expert_a, expert_b], flat)      # in-memory modules of one architecture
        problem = ModelProblem(flat, score, sources=bases)
    """
    models = list(models)
    if not models:
        raise ValueError("expected at least one source model, got none")
    for index, model in enumerate(models):
        _gene_tensors(model, flat, f"source model {index}")   # refuse before anything runs

    def load(out: np.ndarray) -> None:
        for row, model in zip(out, models):
            fill_genome(model, flat, row)

    load.__qualname__ = f"{len(models)} in-memory {type(flat.model).__name__} models"
    return BaseModels(load, shape=(len(models), flat.dim), dtype=bases_dtype(flat))


class ModelProblem(Problem):
    """``evaluate(model) -> score`` over genomes of ``model``'s flat parameters.

    Args:
        model: the model the genomes are written into (re-pointed in place, see
            :class:`~.flat.FlatParameters`), or its FlatParameters.
        evaluate: ``evaluate(model) -> float``, called under ``torch.no_grad()``.
        sources: the source models (in-memory modules of ``model``'s architecture) or
            :class:`BaseModels` (e.g. :func:`mpievo.torch.hf.hf_bases`): the problem's
            bases, and every island's starting genomes (cycled; with ``initial=False``
            uniform in the box; a callable ``initial(rng, n) -> (n, dim)`` genomes
            instead, e.g. from ``problem.bases.array``).
        lower, upper: the box; default ``±2 max|w|`` over ``model`` and the in-memory
            sources (BaseModels sources are not read before the run, where they load
            once per node: pass the box when their weights reach further).
        maximize: larger scores are better (default True).
        include_frozen: see :class:`~.flat.FlatParameters`.
        pipeline: make the next child (copy, materialise) on a helper thread into a
            second model buffer while the model runs on this one (default True; it
            costs one more genome of memory per rank; CPU models only, ignored on a
            device). The attribute of the same name switches it later.
        name: label for messages.

    Example::

        model = torch.nn.Linear(3, 1)
        X, y = torch.randn(64, 3), torch.randn(64, 1)

        def score(model):                       # larger is better (maximize=True)
            return -float(((model(X) - y) ** 2).mean())

        problem = ModelProblem(model, score)
        result = mpievo.minimize(problem, budget=2_000, islands=2)
        save_best(problem, result, "best-model")   # or problem.flat.write(result.x)
    """

    def __init__(self, model: torch.nn.Module, evaluate: Callable[[torch.nn.Module], float], *,
                 sources=None, lower=None, upper=None, maximize: bool = True,
                 include_frozen: bool = False, initial: bool | Callable = True, pipeline: bool = True,
                 name: str | None = None):
        if not callable(evaluate):
            raise TypeError(f"expected a callable evaluate(model) -> float, got {type(evaluate).__name__}")
        if not isinstance(pipeline, bool):
            raise TypeError(f"pipeline: expected True or False, got {pipeline!r}")
        self.pipeline = pipeline
        self.flat = as_flat(model, include_frozen)
        model = self.flat.model
        self.model = model
        self.score = evaluate
        in_memory = [] if sources is None or isinstance(sources, BaseModels) else list(sources)
        if in_memory:
            sources = model_bases(in_memory, self.flat)
        if sources is not None and sources.dim != self.flat.dim:
            raise ValueError(f"expected bases of {self.flat.dim} genes for {type(model).__name__}, "
                             f"got {sources.dim} ({sources.reference})")
        if lower is None or upper is None:      # from modules in memory: the bases stay unloaded
            reach = 2.0 * largest_weight([model, *in_memory])
            lower = -reach if lower is None else lower
            upper = reach if upper is None else upper
        start = self._source_genomes if (initial is True and sources is not None) else None
        if callable(initial):
            start = initial
        super().__init__(self._evaluate_batch, self.flat.dim, lower, upper, maximize=maximize,
                         name=name or getattr(evaluate, "__name__", "model fitness"), batched=True,
                         initial=start, device=self.flat.device.type == "cuda", bases=sources)

    def _source_genomes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Generation 0: the sources, cycled from a random one (no genome is drawn)."""
        bases = self.bases.array
        first = int(rng.integers(bases.shape[0]))
        return bases[(first + np.arange(n)) % bases.shape[0]]

    def genome_block(self, dtype) -> np.ndarray | None:
        """The model's flat buffer as a ``(1, dim)`` host block where an encoding can
        materialise a genome in place (``dtype`` must be the model's), else None."""
        host = self.flat.genome()
        if isinstance(host, np.ndarray) and host.dtype == np.dtype(dtype):
            return host.reshape(1, -1)
        return None

    def model_buffers(self, dtype) -> int:
        """How many genome-sized host buffers the model runs from for genes of ``dtype``:
        2 where evaluation pipelines (:meth:`genome_blocks`), else 1 (what the memory
        estimates count; nothing is allocated).

        Example::

            ModelProblem(torch.nn.Linear(3, 1), score).model_buffers(np.float32)    # 2 on the CPU
        """
        pipelines = self.pipeline and self.flat.device.type == "cpu" and np.dtype(dtype) == self.flat.numpy_dtype
        return 2 if pipelines else 1

    def genome_blocks(self, dtype) -> tuple[np.ndarray, np.ndarray] | None:
        """Two ``(1, dim)`` host blocks the model can run from, for pipelined evaluation
        (:mod:`mpievo.evo.pipeline`): the model's buffer and a second one (made on first
        call); None without ``pipeline``, on a device, or for a ``dtype`` not the model's.

        Example::

            problem = ModelProblem(torch.nn.Linear(3, 1), score)
            first, second = problem.genome_blocks(problem.flat.numpy_dtype)
        """
        if self.model_buffers(dtype) == 1:
            return None
        return tuple(block.reshape(1, -1) for block in self.flat.double_buffer())

    def evaluates_deferred_rows(self) -> bool:
        """Whether evaluation makes (copies) the children on the pipeline's helper thread,
        so that breeding may defer their rows to it (:mod:`mpievo.evo.pipeline`)."""
        return self.genome_blocks(self.flat.numpy_dtype) is not None

    def _evaluate_batch(self, genomes) -> np.ndarray:
        rows = genomes.shape[0] if hasattr(genomes, "shape") else len(genomes)
        pipelines = rows > 1 and isinstance(genomes, np.ndarray)
        blocks = self.genome_blocks(self.flat.numpy_dtype) if pipelines else None
        return score_each(self.model, self.score, genomes, self.flat.write, blocks=blocks)


def largest_weight(models) -> float:
    """max |w| over the parameters of ``models``, a tensor at a time (at least 1e-3)."""
    largest = 1e-3
    for model in models:
        for param in model.parameters():
            largest = max(largest, float(param.detach().max()), -float(param.detach().min()))
    return largest


def score_each(model: torch.nn.Module, score: Callable, genomes, put: Callable, blocks=None) -> np.ndarray:
    """``score(model)`` after ``put(genome)`` for each genome of a batch, in eval mode and
    under ``torch.no_grad()`` (the model's training flag restored after). With two host
    ``blocks`` the model runs from (:meth:`ModelProblem.genome_blocks`), genome ``i + 1``
    is copied into one on a helper thread while the model runs on genome ``i`` in the
    other (:func:`~mpievo.evo.pipeline.pipelined_rows`), after breeding it there when its
    row is deferred (:class:`~mpievo.evo.pipeline.DeferredRows`; without ``blocks`` every
    row is bred first)."""
    rows = genomes.shape[0] if hasattr(genomes, "shape") else len(genomes)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if blocks is not None:
                def use(index: int, slot: int) -> float:
                    put(blocks[slot])
                    return float(score(model))

                # copied as FlatParameters.write copies, GIL released
                return pipelined_rows(genomes, lambda i, slot: copy_releasing_gil(genomes[i], blocks[slot][0]), use)
            settle_rows(genomes)
            values = np.empty(rows)
            for index in range(rows):
                put(genomes[index])
                values[index] = float(score(model))
    finally:
        model.train(was_training)
    return values
