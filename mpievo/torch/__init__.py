"""PyTorch and Hugging Face models as mpievo genomes (optional extra ``torch``).

* :mod:`.flat` -- a model's parameters in one flat buffer, the genome, without copies
  (:class:`FlatParameters`).

Importing this package imports torch; nothing else in mpievo does.
"""

from __future__ import annotations

from .flat import CudaView, FlatParameters, as_numpy, from_numpy, numpy_dtype

__all__ = ["CudaView", "FlatParameters", "as_numpy", "from_numpy", "numpy_dtype"]
