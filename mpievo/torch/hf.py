"""Hugging Face checkpoints in and out: source models from local directories, the best
merged model written back as one.

* :func:`inspect_sources` refuses, before anything is loaded or bred, sources that
  cannot be merged: a missing directory, architectures that differ, tensors whose
  names or shapes differ (naming the file and the tensor), a dtype the engine does not
  take (genes are float32, float64, float16 or bfloat16), and (with
  :func:`check_memory`) models too large for the memory the settings leave.
* :func:`load_model` loads one directory with ``transformers`` (``local_files_only``:
  nothing is downloaded).
* :func:`hf_bases` makes the sources the bases of genomes in a model's flat layout, in
  its dtype, loaded when first used: once per node under MPI
  (:mod:`mpievo.parallel.shared_bases`), tensor by tensor from the
  safetensors files (:func:`fill_from_files`: read into the row, nothing mapped; sharded checkpoints through their
  ``model.safetensors.index.json``, a missing shard or a truncated file named).
* :func:`save_merged` writes a model with ``save_pretrained`` (``from_pretrained``
  loads it) and, beside it, ``mpievo_merge.json``: the recipe or genome that made it;
  :func:`save_best` does so for the best genome of a finished run.

Tensor headers are read from ``*.safetensors`` files (the shapes are checked without
loading a weight); a directory without them is checked by loading its model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..evo.genomes import BaseModels, checksum
from ..kernels.host import BFLOAT16
from ..parallel.memory import genomes_estimate
from .casting import read_cast
from .flat import FlatParameters
from .problem import ModelProblem, bases_dtype, fill_genome
from .recipes import RecipeProblem

#: the numpy dtype of each safetensors dtype a gene may have (the engine's float32/float64,
#: or half types cast once)
FILE_DTYPES = {"F32": np.dtype(np.float32), "F64": np.dtype(np.float64), "F16": np.dtype(np.float16),
               "BF16": BFLOAT16}
#: the file written beside a merged model
RECIPE_FILE = "mpievo_merge.json"


@dataclass(frozen=True)
class SourceInfo:
    """What :func:`inspect_sources` found: the architecture, ``{tensor: (shape, dtype)}``
    of the first source (every other agrees), and the parameters' bytes per source."""

    paths: tuple[Path, ...]
    architecture: str
    tensors: dict
    numel: int


#: the index file of a sharded safetensors checkpoint
INDEX_FILE = "model.safetensors.index.json"


def checkpoint_files(directory: Path) -> list[Path] | None:
    """The safetensors files of a model directory: the shards its
    ``model.safetensors.index.json`` names, else every ``*.safetensors`` file (None: none).

    Raises:
        FileNotFoundError: a shard the index names that is not there (both named).
        ValueError: an index file that is not JSON with a ``weight_map``.

    Example:
        >>> checkpoint_files(Path("/nonexistent")) is None
        True
    """
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"expected a JSON index with a 'weight_map' in {index}, got {err!r}") from None
        files = [directory / name for name in dict.fromkeys(weight_map.values())]
        missing = [file for file in files if not file.is_file()]
        if missing:
            raise FileNotFoundError(f"expected every shard named in {index}, got {missing[0]} missing"
                                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        return files
    files = sorted(directory.glob("*.safetensors"))
    return files or None


def _open(file: Path):
    """``safe_open(file)`` (memory-mapped), a corrupt or truncated file named.

    Raises:
        ValueError: a file whose header does not parse or whose data it does not cover.
    """
    from safetensors import safe_open

    try:
        return safe_open(str(file), "pt")
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error type
        raise ValueError(f"expected a readable safetensors file, got {file} ({err}; truncated or "
                         "corrupt? copy it again)") from None


def _tensor_headers(directory: Path) -> dict[str, tuple[tuple[int, ...], str, Path]] | None:
    """``{name: (shape, dtype, file)}`` from the directory's safetensors files (None: none)."""
    files = checkpoint_files(directory)
    if files is None:
        return None
    headers = {}
    for file in files:
        with _open(file) as handle:
            for name in handle.keys():
                part = handle.get_slice(name)
                headers[name] = (tuple(part.get_shape()), part.get_dtype(), file)
    return headers


def _architecture(directory: Path) -> str:
    config = directory / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"expected a Hugging Face model directory with config.json, got {directory} "
                                "without one")
    data = json.loads(config.read_text())
    return ",".join(data.get("architectures") or [data.get("model_type", "unknown")])


def inspect_sources(paths: Sequence[str | os.PathLike]) -> SourceInfo:
    """Check that ``paths`` are Hugging Face directories of one architecture with the same
    tensors (names, shapes) of gene dtypes, reading headers only.

    Raises:
        FileNotFoundError: a missing directory or config.json.
        ValueError: no source, or architectures / tensor names / shapes that differ (the
            file and the tensor named).
        TypeError: a tensor of a dtype the engine does not take (file and tensor named).

    Example::

        info = inspect_sources(["experts/a", "experts/b"])   # ValueError naming the file on a mismatch
    """
    paths = tuple(Path(p) for p in paths)
    if not paths:
        raise ValueError("expected at least one source model directory, got none")
    first_arch, first = None, None
    for path in paths:
        if not path.is_dir():
            raise FileNotFoundError(f"expected a source model directory, got {path} (missing)")
        arch = _architecture(path)
        if first_arch is not None and arch != first_arch:
            raise ValueError(f"expected every source of architecture {first_arch} (as {paths[0]}), "
                             f"got {arch} in {path / 'config.json'}")
        headers = _tensor_headers(path)
        if headers is None:
            headers = _loaded_headers(path)
        for name, (shape, dtype, file) in headers.items():
            if dtype not in FILE_DTYPES:
                raise TypeError(f"expected tensors of dtype {sorted(FILE_DTYPES)} (what the engine takes), "
                                f"got {dtype} for {name!r} in {file}")
        if first is not None:
            _compare(first, headers, paths[0], path)
        first_arch, first = first_arch or arch, first or headers
    numel = sum(int(np.prod(shape)) for shape, _, _ in first.values())
    return SourceInfo(paths, first_arch, {n: (s, d) for n, (s, d, _) in first.items()}, numel)


def _loaded_headers(path: Path) -> dict:
    """Headers of a directory without safetensors (a ``pytorch_model.bin``): its model, loaded."""
    import torch

    codes = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16"}
    file = path / "pytorch_model.bin"
    return {name: (tuple(t.shape), codes.get(t.dtype, str(t.dtype)), file)
            for name, t in load_model(path).state_dict().items()}


def _compare(first: dict, other: dict, first_path: Path, path: Path) -> None:
    for name, (shape, _, file) in other.items():
        if name not in first:
            raise ValueError(f"expected the tensors of {first_path}, got an extra tensor {name!r} in {file}")
        if shape != first[name][0]:
            raise ValueError(f"expected tensor {name!r} of shape {first[name][0]} (as in {first[name][2]}), "
                             f"got {shape} in {file}")
    missing = sorted(set(first) - set(other))
    if missing:
        raise ValueError(f"expected tensor {missing[0]!r} (as in {first[missing[0]][2]}), got none in {path}")


def available_memory() -> int:
    """Bytes of memory this node can still give (``MemAvailable``; total memory elsewhere)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_estimate(numel: int, sources: int, *, archive_rows: int = 0, ranks_per_node: int = 1,
                    bases_itemsize: int = 4, gene_itemsize: int = 4, row_itemsize: int = 4,
                    model_buffers: int = 1) -> int:
    """Bytes a node needs: the sources once (``bases_itemsize`` per gene: a half model's
    stay in their dtype); per rank ``archive_rows`` rows of ``row_itemsize`` (archive and
    batch), the delta row box and ``model_buffers`` model buffers (``gene_itemsize``; two
    with pipelined evaluation); the best genome once:
    :func:`mpievo.parallel.memory.genomes_estimate`, what ``mpievo bench models`` prints.

    Example:
        >>> memory_estimate(1000, 3, archive_rows=6, ranks_per_node=2, bases_itemsize=2,
        ...                 gene_itemsize=2, row_itemsize=2)
        64000
    """
    return genomes_estimate(numel, sources=sources, bases_itemsize=bases_itemsize, rows_per_rank=archive_rows,
                            row_itemsize=row_itemsize, genome_itemsize=gene_itemsize,
                            ranks_per_node=ranks_per_node, block_rows=model_buffers)


def check_memory(needed: int, available: int | None = None, *, what: str = "the merge",
                 detail: str = "sources, models and archives") -> None:
    """Raises MemoryError when ``needed`` bytes exceed ``available`` (default: this node's),
    naming both and what the estimate counts (``detail``)."""
    available = available_memory() if available is None else int(available)
    if needed > available:
        raise MemoryError(f"expected {what} to fit in the {available / 2**30:.2f} GiB of memory available, "
                          f"got an estimate of {needed / 2**30:.2f} GiB ({detail}; "
                          "use fewer sources or ranks per node, a smaller engine.capacity, or delta genomes)")


def load_model(path: str | os.PathLike, *, dtype=None, device=None):
    """The model in Hugging Face directory ``path`` (``from_pretrained`` with
    ``local_files_only=True``), in eval mode, of the class its config names (else a
    causal LM).

    Raises:
        FileNotFoundError: a missing directory.

    Example::

        model = load_model("experts/base", dtype=torch.bfloat16)   # local directory, eval mode
    """
    import transformers

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"expected a model directory, got {path} (missing)")
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    names = getattr(config, "architectures", None) or []
    cls = getattr(transformers, names[0], None) if names else None
    cls = cls or transformers.AutoModelForCausalLM
    kwargs = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = cls.from_pretrained(path, **kwargs).eval()
    return model if device is None else model.to(device)


def hf_bases(paths: Sequence[str | os.PathLike], flat: FlatParameters, *, check: bool = True,
             archive_rows: int = 0, row_itemsize: int | None = None, ranks_per_node: int = 1,
             available: int | None = None, model_buffers: int = 2) -> BaseModels:
    """The models in ``paths`` as the bases of genomes of ``flat``'s layout, in ``flat``'s
    dtype (bfloat16 and float16 sources stay 2 bytes a gene), loaded on first use: once
    per node under MPI, straight into the node's shared array. A directory of safetensors
    files (sharded with ``model.safetensors.index.json`` or not) is read tensor by tensor
    from the files into its row (nothing beyond a small cast buffer is held besides the bases);
    one without them, or whose tensor names differ from the model's, is loaded with
    :func:`load_model`, copied into its row and freed.

    With ``check`` (the default) the sources are inspected (corrupt or truncated files and
    missing shards named) and the node's memory estimated (:func:`memory_estimate` with
    ``archive_rows`` rows of ``row_itemsize`` bytes a gene per rank, default the genes'
    own: the archive capacity plus the batch of every island of a rank, and
    ``model_buffers`` model buffers per rank: two, as a CPU :class:`~mpievo.torch.ModelProblem`
    pipelines by default; one with ``pipeline=False`` or on a device) before anything is loaded.

    Raises:
        as :func:`inspect_sources` and :func:`check_memory`.

    Example::

        flat = FlatParameters(load_model("experts/base"))
        bases = hf_bases(["experts/base", "experts/a"], flat, archive_rows=16 + 4)
        bases.shape                             # (2, genes)
    """
    paths = [Path(p) for p in paths]
    dtype = bases_dtype(flat)
    if check:
        info = inspect_sources(paths)
        itemsize = flat.flat.element_size()
        need = memory_estimate(info.numel, len(paths), archive_rows=archive_rows, ranks_per_node=ranks_per_node,
                               bases_itemsize=dtype.itemsize, gene_itemsize=itemsize,
                               row_itemsize=itemsize if row_itemsize is None else row_itemsize,
                               model_buffers=model_buffers)
        check_memory(need, available, detail=f"{len(paths)} sources of {info.numel:,} genes in {dtype.name}, and "
                                             f"per rank of {ranks_per_node}: {archive_rows} archive and batch rows, "
                                             f"the row box and {model_buffers} model buffer(s); the best genome once")

    def load(out: np.ndarray) -> None:
        for row, path in zip(out, paths):
            if not fill_from_files(path, flat, row):
                fill_genome(load_model(path), flat, row, label=str(path))

    load.__qualname__ = "hf:" + ",".join(str(p) for p in paths)
    return BaseModels(load, shape=(len(paths), flat.dim), dtype=dtype, reference=load.__qualname__)


def fill_from_files(directory: str | os.PathLike, flat: FlatParameters, out: np.ndarray) -> bool:
    """Fill the row ``out`` (``flat``'s layout) from ``directory``'s safetensors files, each
    tensor read straight into its place (:func:`~mpievo.torch.casting.read_cast`: cast to ``out``'s dtype through
    a small buffer; nothing memory-mapped, so loading holds no more than the row); False
    (nothing written) when the directory has no safetensors files or lacks a gene tensor under its name or a
    tied alias (then load the model instead).

    Raises:
        FileNotFoundError: a shard its index names that is missing.
        ValueError: a corrupt or truncated file, or a tensor of another shape (named).

    Example:
        >>> # fill_from_files("ft-a", flat, bases_row)
    """
    directory = Path(directory)
    headers = _tensor_headers(directory)     # every file's header checked by safetensors
    if headers is None:
        return False
    found = []
    for name, shape in zip(flat.names, flat.shapes):
        name = next((n for n in (name, *flat.aliases.get(name, ())) if n in headers), None)
        if name is None:
            return False
        if headers[name][0] != shape:
            raise ValueError(f"expected tensor {name!r} of shape {shape}, got {headers[name][0]} in "
                             f"{headers[name][2]}")
        found.append(name)
    by_file: dict[Path, list[int]] = {}
    for index, name in enumerate(found):
        by_file.setdefault(headers[name][2], []).append(index)
    for file, indices in by_file.items():
        spans = _data_spans(file)
        with open(file, "rb", buffering=0) as handle:
            for index in indices:
                name = found[index]
                code, begin, end = spans[name]
                if code not in FILE_DTYPES:
                    raise TypeError(f"expected a float tensor {name!r}, got {code} in {file}")
                start, stop = flat.offsets[index], flat.offsets[index + 1]
                if end - begin != (stop - start) * FILE_DTYPES[code].itemsize:
                    raise ValueError(f"expected {stop - start} values of {code} for {name!r}, got "
                                     f"{end - begin} bytes in {file}")
                read_cast(handle, begin, FILE_DTYPES[code], out[start:stop], file)
    return True


def _data_spans(file: Path) -> dict[str, tuple[str, int, int]]:
    """``{tensor: (dtype code, first byte, end byte)}`` of a safetensors file, the bytes
    from the file's start (its header: an 8-byte length, then JSON with ``data_offsets``
    relative to the data after it)."""
    with open(file, "rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(size))
    start = 8 + size
    return {name: (entry["dtype"], start + entry["data_offsets"][0], start + entry["data_offsets"][1])
            for name, entry in header.items() if name != "__metadata__"}


def save_merged(model, directory: str | os.PathLike, *, recipe: dict | None = None, genome=None,
                score: float | None = None, max_genome_genes: int = 100_000) -> Path:
    """Write ``model`` as a Hugging Face directory (``save_pretrained``, safetensors) and
    ``mpievo_merge.json`` beside it: ``recipe`` (a :meth:`RecipeSpace.decode` dict), the
    ``genome`` (its genes when at most ``max_genome_genes``, else its length and
    checksum: the weights in the directory are that genome) and ``score``.

    Returns:
        The directory.

    Example::

        ties(flat, genomes[0], genomes[1:], density=0.5)
        save_merged(flat.model, "merged-ties", recipe={"method": "ties", "density": 0.5})
    """
    directory = Path(directory)
    model.save_pretrained(directory)
    note: dict = {"recipe": recipe, "score": score}
    if genome is not None:
        genome = np.asarray(genome)
        note["genome_dim"] = int(genome.size)
        note["genome_checksum"] = checksum(genome)
        if genome.size <= max_genome_genes:
            note["genome"] = genome.astype(np.float64).reshape(-1).tolist()
    (directory / RECIPE_FILE).write_text(json.dumps(note, indent=1) + "\n")
    return directory


def save_best(problem: ModelProblem | RecipeProblem, result, directory: str | os.PathLike) -> Path:
    """Write the best model of a finished run of ``problem`` as a Hugging Face directory:
    its genome written into (whole weights) or merged into (a recipe) ``problem.model``,
    then :func:`save_merged` with the recipe, genome and score. ``result`` is what
    :func:`mpievo.minimize` returns (``x``, ``fun``) or a run's result (``best_genome``,
    ``best_fitness``: on rank 0 only, so call this there).

    Raises:
        TypeError: a problem that is neither a ModelProblem nor a RecipeProblem.
        ValueError: a result without a best genome (e.g. a rank other than 0 under MPI),
            or a genome of another length.

    Example::

        result = mpievo.minimize(problem, budget=400, islands=4)
        save_best(problem, result, "merged")    # then load_model("merged")
    """
    if not isinstance(problem, (ModelProblem, RecipeProblem)):
        raise TypeError(f"expected a ModelProblem or RecipeProblem, got {type(problem).__name__}")
    genome = result.x if hasattr(result, "x") else getattr(result, "best_genome", None)
    score = result.fun if hasattr(result, "fun") else getattr(result, "best_fitness", None)
    if genome is None:
        raise ValueError(f"expected a result with a best genome, got none in {type(result).__name__} "
                         "(a run's result holds it on rank 0)")
    recipe = None
    if isinstance(problem, RecipeProblem):
        recipe = problem.materialize(genome)       # checks the recipe's length first
    else:
        problem.flat.write(genome)                 # checks the genome's length first
    out = save_merged(problem.model, directory, recipe=recipe, genome=genome,
                      score=None if score is None else float(score))
    if isinstance(problem, RecipeProblem):         # the recipe as a mergekit YAML too
        from .mergekit_export import write_recipe_yaml
        write_recipe_yaml(problem, genome, out, score)
    return out
