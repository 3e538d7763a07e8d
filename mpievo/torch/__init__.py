"""PyTorch and Hugging Face models as mpievo genomes (optional extra ``torch``).

* :mod:`.flat` -- a model's parameters in one flat buffer, the genome, without copies
  (:class:`FlatParameters`).
* :mod:`.problem` -- ``evaluate(model) -> score`` as a Problem over whole-weight genomes,
  dense or delta, the source models as its bases (:class:`ModelProblem`).
* :mod:`.merge` -- merge methods (linear, task arithmetic, SLERP, TIES, DARE) and the
  standard merges as plain functions (:func:`average`, :func:`task_arithmetic`,
  :func:`ties`, :func:`dare`, :func:`slerp`).
* :mod:`.recipes` -- merge recipes as small float64 genomes (:class:`RecipeProblem`).
* :mod:`.dataflow` -- data-flow-space merges: the path of the forward pass through the
  sources' layers as a genome (:class:`DataFlowProblem`, :func:`save_dataflow`).
* :mod:`.hf` -- Hugging Face directories in (checked before loading) and out
  (:func:`load_model`, :func:`hf_bases`, :func:`save_merged`, :func:`save_best`).

Importing this package imports torch; nothing else in mpievo does. The user guide is
docs/guides/merging.md.
"""

from __future__ import annotations

from .flat import CudaView, FlatParameters, as_numpy, from_numpy, numpy_dtype
from .hf import hf_bases, inspect_sources, load_model, save_best, save_merged
from .merge import average, dare, merge_into, slerp, task_arithmetic, ties
from .problem import ModelProblem, model_bases
from .recipes import RecipeProblem, RecipeSpace, layer_groups

__all__ = ["CudaView", "FlatParameters", "ModelProblem", "RecipeProblem", "RecipeSpace", "as_numpy", "average",
           "dare", "from_numpy", "hf_bases", "inspect_sources", "layer_groups", "load_model", "merge_into",
           "model_bases", "numpy_dtype", "save_best", "save_merged", "slerp", "task_arithmetic", "ties"]

# mergekit's methods as whole-model merges; mergekit YAML in and out: .mergekit_config, .mergekit_apply,
# .mergekit_export (docs/guides/merging.md, section 9)
from .merge import breadcrumbs, della, model_stock, passthrough  # noqa: E402

__all__ += ["breadcrumbs", "della", "model_stock", "passthrough"]

# cheaper fitness: scores on rows of the validation data (mpievo.evo.fidelity; merging guide, "Cheaper fitness")
from .fidelity import row_scores  # noqa: E402

__all__ += ["row_scores"]

# data-flow-space merges: which source layer runs at each step of the forward pass (merging guide, "Data-flow merges")
from .dataflow import DataFlowModel, DataFlowProblem, DataFlowSpace, save_dataflow  # noqa: E402

__all__ += ["DataFlowModel", "DataFlowProblem", "DataFlowSpace", "save_dataflow"]
