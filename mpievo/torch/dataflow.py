"""Data-flow-space merges: which layer of which source runs at each step of the forward
pass (Akiba et al., *Evolutionary Optimization of Model Merging Recipes*, 2024, "DFS").

The candidate layers are every source's layers in order (source 0's layers, then source
1's, ...), that sequence repeated ``repeats`` times: ``T`` slots. A genome
(:class:`DataFlowSpace`) has, per slot, a binary gene "runs" (the slot's layer is in the
path) and a continuous gene "scale" (its input is multiplied by it, in ``SCALE_BOX``);
the run genes are the problem's integer genes (``Problem(..., integer=...)``: GA and DE
islands breed them continuously and round them, CMA-ES keeps a margin on them). The path
is the running slots in slot order; the embeddings, the final norm and the head are
source 0's.

The merged module (:class:`DataFlowModel`) reuses the sources' layers (their modules,
no copy of a weight): a causal LM of source 0's class whose blocks are the path's blocks,
each behind its input scale. Written out (:func:`save_dataflow`) it is a plain model of
that class with ``n_layer`` = the path's length and the chosen layers' weights copied; a
block's input scale is folded into the output projections of its attention and MLP:
a pre-norm residual block has ``B(s h) = s B'(h)`` with ``B'``'s two output projections
divided by ``s`` (the norms see ``s h`` as ``h``), so each written block's projections
are divided by the product of the scales up to it and the final norm removes the
product. ``from_pretrained`` loads it; its outputs equal the merged module's up to the
norms' epsilon.

GPT-2 models (``transformer.h`` blocks, ``n_layer``) are supported; sources must share
the architecture (width, heads, vocabulary, ...), not the layer count.

Combined with a parameter-space merge (Sakana's order): first search a recipe
(:class:`~.recipes.RecipeProblem`), then the data flow over the recipe's merge plus the
sources, starting from the merge's own path (:meth:`DataFlowSpace.identity_genome`).

Example::

    problem = DataFlowProblem([expert_a, expert_b], accuracy, repeats=2)
    result = mpievo.minimize(problem, budget=400, islands=2, algorithm="ga")
    problem.space.decode(result.x)         # {"path": [[0, 0, 1.0], [1, 1, 0.93], ...]}
    save_dataflow(problem, result.x, "merged-dfs")
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ..evo.problems import Problem
from .problem import score_each

#: box of a slot's input scale (kept away from 0: a block's norm then sees its input as is)
SCALE_BOX = (0.5, 1.5)
#: config keys that must agree between sources (besides the model type)
SHARED_KEYS = ("n_embd", "n_head", "vocab_size", "n_positions", "n_inner", "activation_function",
               "layer_norm_epsilon", "scale_attn_weights", "reorder_and_upcast_attn", "add_cross_attention")


def _gpt2_parts(model, label: str):
    """``(transformer, blocks)`` of a GPT-2 causal LM, else a ValueError naming ``label``."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind != "gpt2" or not hasattr(getattr(model, "transformer", None), "h"):
        raise ValueError(f"{label}: expected a GPT-2 causal LM (model_type 'gpt2', transformer.h blocks), "
                         f"got {type(model).__name__} (model_type {kind!r})")
    if getattr(config, "scale_attn_by_inverse_layer_idx", False):
        raise ValueError(f"{label}: expected scale_attn_by_inverse_layer_idx False (a layer's attention "
                         f"would depend on its position), got True")
    return model.transformer, model.transformer.h


def check_sources(models: Sequence[torch.nn.Module]) -> list[int]:
    """The layer count of each source, after checking that they share one architecture.

    Raises:
        ValueError: no source, a source that is not a GPT-2 causal LM, or one whose
            architecture differs from source 0's (the key and both values named).

    Example::

        check_sources([expert_a, expert_b])       # [4, 4]
    """
    models = list(models)
    if not models:
        raise ValueError("sources: expected at least one model, got none")
    first = models[0].config
    for index, model in enumerate(models):
        _gpt2_parts(model, f"source {index}")
        for key in SHARED_KEYS:
            mine, theirs = getattr(first, key, None), getattr(model.config, key, None)
            if mine != theirs:
                raise ValueError(f"source {index}: expected the architecture of source 0 ({key} = {mine!r}), "
                                 f"got {key} = {theirs!r}")
    return [len(model.transformer.h) for model in models]


@dataclass
class DataFlowSpace:
    """The genes of a data-flow merge of sources with ``layers[s]`` layers each, repeated
    ``repeats`` times: ``T = sum(layers) * repeats`` slots, the T "runs" genes (binary,
    the problem's integer genes) then the T "scale" genes (with ``scales``; else every
    scale is 1).

    Attributes:
        slots: ``(source, layer)`` of each slot, in order.
        names, lower, upper: one label per gene and the box.
        integer: the indices of the run genes.

    Example::

        space = DataFlowSpace([2, 2], repeats=1)     # 4 slots: s0 l0, s0 l1, s1 l0, s1 l1
        genome = space.encode([(0, 0), (1, 1, 0.9)])
        space.decode(genome)                         # {'method': 'dataflow', 'path': [[0, 0, 1.0], [1, 1, 0.9]]}
    """

    layers: list[int]
    repeats: int = 1
    scales: bool = True
    slots: list[tuple[int, int]] = field(init=False)
    names: list[str] = field(init=False)
    lower: np.ndarray = field(init=False)
    upper: np.ndarray = field(init=False)

    def __post_init__(self):
        if not self.layers or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1
                                  for n in self.layers):
            raise ValueError(f"layers: expected a layer count >= 1 per source, got {self.layers!r}")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, (int, np.integer)) or self.repeats < 1:
            raise ValueError(f"repeats: expected an int >= 1, got {self.repeats!r}")
        self.layers = [int(n) for n in self.layers]
        one = [(s, layer) for s, count in enumerate(self.layers) for layer in range(count)]
        self.slots = one * int(self.repeats)
        labels = [f"slot {t} (source {s} layer {layer})" for t, (s, layer) in enumerate(self.slots)]
        t = len(self.slots)
        self.names = [f"{label}/runs" for label in labels]
        self.lower, self.upper = np.zeros(t), np.ones(t)
        if self.scales:         # then one input scale per slot
            self.names += [f"{label}/scale" for label in labels]
            self.lower = np.concatenate([self.lower, np.full(t, SCALE_BOX[0])])
            self.upper = np.concatenate([self.upper, np.full(t, SCALE_BOX[1])])

    @property
    def dim(self) -> int:
        return len(self.names)

    @property
    def integer(self) -> np.ndarray:
        return np.arange(len(self.slots))

    def decode(self, genome) -> dict:
        """``{"method": "dataflow", "path": [[source, layer, scale], ...]}``: the slots whose
        run gene rounds to 1, in slot order."""
        genome = np.asarray(genome, np.float64).reshape(-1)
        if genome.shape != (self.dim,):
            raise ValueError(f"expected a data-flow genome of {self.dim} genes, got shape {genome.shape}")
        t = len(self.slots)
        scale = genome[t:] if self.scales else np.ones(t)
        path = [[s, layer, float(scale[i])] for i, (s, layer) in enumerate(self.slots) if genome[i] >= 0.5]
        return {"method": "dataflow", "path": path}

    def encode(self, path) -> np.ndarray:
        """The genome of ``path`` (``(source, layer)`` or ``(source, layer, scale)`` entries;
        each takes the first free slot of that layer after the previous entry's slot).

        Raises:
            ValueError: a source or layer index beyond the sources (named), a scale outside
                ``SCALE_BOX``, or a path the slots cannot hold in order.
        """
        t = len(self.slots)
        genome = np.concatenate([np.zeros(t), np.ones(t)])
        position = 0
        for entry in path:
            source, layer = int(entry[0]), int(entry[1])
            scale = float(entry[2]) if len(entry) > 2 else 1.0
            if not 0 <= source < len(self.layers):
                raise ValueError(f"path: expected a source in 0..{len(self.layers) - 1}, got {source}")
            if not 0 <= layer < self.layers[source]:
                raise ValueError(f"path: expected a layer of source {source} in 0..{self.layers[source] - 1}, "
                                 f"got {layer}")
            if not SCALE_BOX[0] <= scale <= SCALE_BOX[1] or (scale != 1.0 and not self.scales):
                box = f"in [{SCALE_BOX[0]}, {SCALE_BOX[1]}]" if self.scales else "of 1 (scales=False)"
                raise ValueError(f"path: expected a scale {box}, got {scale}")
            try:
                slot = self.slots.index((source, layer), position)
            except ValueError:
                raise ValueError(f"path: expected at most {self.repeats} passes over the layers (repeats), got "
                                 f"source {source} layer {layer} after slot {position - 1}") from None
            genome[slot], genome[t + slot] = 1.0, scale
            position = slot + 1
        return genome[:self.dim]

    def identity_genome(self, source: int = 0) -> np.ndarray:
        """The path of ``source``'s own layers in order, scales 1 (source 0's: source 0 itself;
        another's runs its layers between source 0's embeddings and head)."""
        return self.encode([(source, layer) for layer in range(self.layers[source])])


class _ScaledBlock(torch.nn.Module):
    """A source's block behind an input scale (the block itself, not a copy)."""

    def __init__(self, block: torch.nn.Module, scale: float):
        super().__init__()
        self.block, self.scale = block, float(scale)

    def forward(self, hidden_states, *args, **kwargs):
        if self.scale != 1.0:
            hidden_states = hidden_states * self.scale
        return self.block(hidden_states, *args, **kwargs)


class DataFlowModel(torch.nn.Module):
    """The merged module of a data-flow path over ``sources`` (module docstring): source
    0's embeddings, final norm and head around the path's blocks; no weight copied. It
    starts in eval mode (its ``train()`` would set the sources' modules it holds).
    ``set_path(path)`` changes the path (``[(source, layer, scale), ...]``); calling it
    runs source 0's forward pass (``model(input_ids=...).logits``).

    Example::

        model = DataFlowModel([expert_a, expert_b])
        model.set_path([(0, 0, 1.0), (1, 1, 0.8), (0, 1, 1.0)])
        logits = model(input_ids=ids).logits
    """

    def __init__(self, sources: Sequence[torch.nn.Module]):
        super().__init__()
        self.layers = check_sources(sources)
        self.sources = list(sources)           # a plain list: not submodules, not copied
        head = self.sources[0]
        config = copy.deepcopy(head.config)
        config.n_layer, config.use_cache = 0, False
        with torch.device("meta"):             # only the shell: its parts are source 0's
            shell = type(head)(config)
        shell.transformer.wte, shell.transformer.wpe = head.transformer.wte, head.transformer.wpe
        shell.transformer.ln_f, shell.lm_head = head.transformer.ln_f, head.lm_head
        shell.transformer.drop = head.transformer.drop
        stray = [name for name, t in [*shell.named_parameters(), *shell.named_buffers()] if t.is_meta]
        if stray:
            raise ValueError(f"source 0: expected every tensor of {type(head).__name__} outside its blocks to be "
                             f"wte, wpe, ln_f or lm_head, got {stray}")
        self.shell = shell
        self.path: list[tuple[int, int, float]] = []
        self.eval()          # as the sources are meant to run (train() would reach into them)

    def set_path(self, path) -> None:
        """Run ``path`` (``(source, layer, scale)`` entries) from now on.

        Raises:
            ValueError: a source or layer index beyond the sources (named).
        """
        blocks = []
        for source, layer, scale in path:
            if not 0 <= source < len(self.layers) or not 0 <= layer < self.layers[source]:
                raise ValueError(f"path: expected (source, layer) within sources of {self.layers} layers, "
                                 f"got ({source}, {layer})")
            blocks.append(_ScaledBlock(self.sources[source].transformer.h[layer], scale))
        self.shell.transformer.h = torch.nn.ModuleList(blocks)
        self.shell.config.n_layer = len(blocks)
        self.path = [(int(s), int(layer), float(scale)) for s, layer, scale in path]

    def forward(self, *args, **kwargs):
        kwargs["use_cache"] = False      # blocks keep their sources' layer_idx: a cache would mix them
        return self.shell(*args, **kwargs)


class DataFlowProblem(Problem):
    """``evaluate(model) -> score`` of the :class:`DataFlowModel` a data-flow genome makes.

    Args:
        sources: the models whose layers the path takes (GPT-2 causal LMs of one
            architecture; source 0 gives embeddings, final norm and head).
        evaluate: ``evaluate(model) -> float``, called under ``torch.no_grad()`` in eval mode.
        repeats: passes over every source's layers (``T = layers x repeats`` slots).
        scales: a scale gene per slot (True), or only the run genes, every scale 1.
        start: generation 0's first genome, the others its neighbours (a few run genes
            flipped, the scales moved a little): a path (``[(source, layer[, scale]), ...]``),
            a source index (its own path), or None (uniform: runs 0/1, scales in the box).
        maximize, name: as for :class:`~.problem.ModelProblem`.

    Attributes:
        space: the :class:`DataFlowSpace`; ``model``: the :class:`DataFlowModel`.

    Example::

        problem = DataFlowProblem([merged, expert_a, expert_b], accuracy, repeats=2, start=0)
        result = mpievo.minimize(problem, budget=300, islands=2, algorithm="ga")
        save_dataflow(problem, result.x, "merged-dfs")
    """

    def __init__(self, sources: Sequence[torch.nn.Module], evaluate: Callable[[torch.nn.Module], float], *,
                 repeats: int = 1, scales: bool = True, start=0, maximize: bool = True, name: str | None = None):
        if not callable(evaluate):
            raise TypeError(f"expected a callable evaluate(model) -> float, got {type(evaluate).__name__}")
        self.model = DataFlowModel(sources)
        self.space = DataFlowSpace(self.model.layers, repeats, scales)
        self.score = evaluate
        if start is None:
            first = None
        elif isinstance(start, (int, np.integer)) and not isinstance(start, bool):
            if not 0 <= start < len(self.model.layers):
                raise ValueError(f"start: expected a source in 0..{len(self.model.layers) - 1}, got {start}")
            first = self.space.identity_genome(int(start))
        else:
            first = self.space.encode(start)
        self._first = first
        self.row_dtype = np.dtype(np.float64)     # islands keep these genomes in float64
        super().__init__(self._evaluate_batch, self.space.dim, self.space.lower, self.space.upper,
                         maximize=maximize, batched=True, integer=self.space.integer,
                         initial=None if first is None else self._known_first,
                         name=name or f"data-flow merge of {len(self.model.layers)} sources")

    def _known_first(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The start, then its neighbours: each run gene flipped with probability ``1/T``
        (at least one), each scale moved by ``N(0, 0.1)`` (random paths score near 0)."""
        t = len(self.space.slots)
        genomes = np.tile(self._first, (n, 1))
        flips = rng.random((n, t)) < 1.0 / t
        flips[np.arange(n), rng.integers(t, size=n)] = True
        genomes[:, :t] = np.where(flips, 1.0 - genomes[:, :t], genomes[:, :t])
        genomes[:, t:] += 0.1 * rng.standard_normal((n, self.space.dim - t))
        genomes[0] = self._first
        return np.clip(genomes, self.space.lower, self.space.upper)

    def materialize(self, genome) -> dict:
        """Set the model's path to ``genome``'s; returns the decoded path."""
        decoded = self.space.decode(genome)
        self.model.set_path(decoded["path"])
        return decoded

    def _evaluate_batch(self, genomes: np.ndarray) -> np.ndarray:
        return score_each(self.model, self.score, genomes, self.materialize)


def written_model(model: DataFlowModel) -> torch.nn.Module:
    """A plain model of source 0's class with the path's layers copied (``n_layer`` = the
    path's length), each block's input scale folded into its output projections
    (module docstring).

    Example::

        model.set_path([(0, 0, 1.0), (1, 1, 0.8)])
        plain = written_model(model)          # a GPT2LMHeadModel with n_layer 2, the same logits
    """
    head = model.sources[0]
    config = copy.deepcopy(head.config)
    config.n_layer = len(model.path)
    out = type(head)(config).to(dtype=head.dtype).eval()
    state = {f"transformer.{name}.{key}": value for name in ("wte", "wpe", "ln_f")
             for key, value in getattr(head.transformer, name).state_dict().items()}
    state.update({f"lm_head.{key}": value for key, value in head.lm_head.state_dict().items()})
    product = 1.0
    for index, (source, layer, scale) in enumerate(model.path):
        product *= scale
        block = model.sources[source].transformer.h[layer].state_dict()
        for key, value in block.items():
            if key.split(".")[-2:-1] == ["c_proj"] and product != 1.0:
                value = value / product          # attn.c_proj and mlp.c_proj: weight and bias
            state[f"transformer.h.{index}.{key}"] = value
    missing, unexpected = out.load_state_dict(state, strict=False)
    missing = [key for key in missing if key != "lm_head.weight"]    # tied to wte
    if missing or unexpected:
        raise ValueError(f"expected the written model's tensors to match its blocks, got missing {missing}, "
                         f"unexpected {unexpected}")
    if getattr(config, "tie_word_embeddings", True):
        out.tie_weights()
    return out


def save_dataflow(problem: DataFlowProblem, genome, directory, score: float | None = None,
                  files_from=None) -> Path:
    """Write the data-flow merge of ``genome`` as a Hugging Face directory that
    ``from_pretrained`` loads (:func:`written_model`), with ``mpievo_merge.json`` (the path,
    the genome, ``score``) and, as ``mpievo merge`` does, the tokenizer and the other files
    (generation config, special tokens) of the directory ``files_from``; None: of the first
    source loaded from a directory (its ``name_or_path``), none where no source was.

    Raises:
        ValueError: ``files_from`` given but not a directory.

    Example::

        out = save_dataflow(problem, result.x, "merged-dfs", score=result.fun)
        GPT2LMHeadModel.from_pretrained(out)      # n_layer = the path's length
        AutoTokenizer.from_pretrained(out)        # the first source's tokenizer
    """
    from .hf import save_merged
    from .mergekit_apply import copy_side_files

    if files_from is not None and not Path(files_from).is_dir():
        raise ValueError(f"files_from: expected a model directory, got {str(files_from)!r} (not a directory)")
    if files_from is None:
        found = (getattr(source, "name_or_path", "") for source in problem.model.sources)
        files_from = next((path for path in found if path and Path(path).is_dir()), None)
    recipe = problem.materialize(genome)
    recipe["sources_layers"] = list(problem.model.layers)
    out = save_merged(written_model(problem.model), directory, recipe=recipe, genome=genome, score=score)
    if files_from is not None:
        copy_side_files(out, files_from, files_from)
    return out
