"""A model is a genome, without copies: :class:`FlatParameters`.

The module's parameters are laid out in one flat buffer (FSDP's flat-parameter layout)
and each parameter's ``.data`` is re-pointed to a view of it, on the model's device and
in its dtype. The buffer *is* the genome: the engine reads it without a copy
(:meth:`FlatParameters.genome`: a numpy view of a CPU buffer; an object with a
``__cuda_array_interface__`` over a CUDA one), and writing a child into the model is
one copy into the buffer (:meth:`FlatParameters.write`), no genome-sized allocation.

What is a gene:

* every parameter with ``requires_grad`` (by default), in ``named_parameters`` order;
* tied weights (one ``Parameter`` reachable under two names, e.g. GPT-2's ``wte`` and
  ``lm_head``) are stored once, under their first name; :attr:`FlatParameters.aliases`
  lists the others. Re-pointing ``.data`` keeps the ``Parameter`` objects, so ties,
  hooks and optimiser references survive;
* frozen parameters (``requires_grad=False``) are excluded by default: they keep
  their own storage and values, as a fine-tune that froze them means. Pass
  ``include_frozen=True`` to make them genes too;
* buffers (batch-norm statistics, causal masks, rotary tables) are never genes: they
  stay the model's own.

All genes must share one device and one dtype (float32, float64, float16 or
bfloat16). A bfloat16 buffer is seen by numpy as ``ml_dtypes.bfloat16`` (through an
int16 view: numpy has no bfloat16 of its own), by CUDA consumers as ``<u2`` bits.
"""

from __future__ import annotations

import numpy as np
import torch

#: torch dtypes a flat buffer may have, and how numpy sees them
GENE_DTYPES = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
               torch.float16: np.dtype(np.float16), torch.bfloat16: None}  # None: ml_dtypes.bfloat16


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """How numpy sees a buffer of torch ``dtype`` (bfloat16: ``ml_dtypes.bfloat16``).

    Raises:
        TypeError: a dtype that cannot be a gene.

    Example::

        numpy_dtype(torch.bfloat16)             # dtype(bfloat16), from ml_dtypes
    """
    if dtype not in GENE_DTYPES:
        raise TypeError(f"expected parameters of dtype float32, float64, float16 or bfloat16, got {dtype}")
    if dtype == torch.bfloat16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return GENE_DTYPES[dtype]


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view (no copy) of a CPU ``tensor`` of a gene dtype.

    Example::

        as_numpy(torch.arange(3, dtype=torch.float32))      # array([0., 1., 2.], dtype=float32), shared
    """
    if tensor.device.type != "cpu":
        raise ValueError(f"expected a CPU tensor for a numpy view, got one on {tensor.device}")
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(numpy_dtype(torch.bfloat16))
    numpy_dtype(tensor.dtype)
    return tensor.numpy()


class CudaView:
    """A ``__cuda_array_interface__`` (v3) over a contiguous tensor's memory, for the
    engine's device arrays (Numba, CuPy). torch exports one itself except for
    bfloat16, which this gives as ``<u2`` bits (as :mod:`mpievo.comm.device.buffers` views
    it); ``owner`` keeps the memory alive.

    Example::

        view = CudaView(torch.zeros(4, dtype=torch.bfloat16, device="cuda"))
        view.__cuda_array_interface__["typestr"]      # '<u2': bfloat16 as its bits
    """

    def __init__(self, tensor: torch.Tensor):
        if not tensor.is_contiguous():
            raise ValueError("expected a contiguous tensor for a device view, got a strided one")
        self.owner = tensor
        typestr = "<u2" if tensor.dtype == torch.bfloat16 else numpy_dtype(tensor.dtype).str
        self.__cuda_array_interface__ = {"shape": tuple(tensor.shape), "typestr": typestr,
                                         "data": (tensor.data_ptr(), False), "strides": None,
                                         "version": 3, "stream": None}


def _is_device_array(obj) -> bool:
    return hasattr(obj, "__cuda_array_interface__") or getattr(obj, "__cuda_ndarray__", False)


class FlatParameters:
    """``model``'s genes in one flat buffer, the parameters views into it (module docstring).

    Args:
        model: a ``torch.nn.Module``; its parameters are re-pointed in place (values kept).
        include_frozen: also make ``requires_grad=False`` parameters genes.

    Attributes:
        flat: the 1-D buffer the parameters point into (a tensor on the model's device, in
            its dtype; one of two after :meth:`double_buffer`).
        names: the genes' parameters, in buffer order (tied weights once).
        aliases: for a tied parameter, its other names.
        offsets, shapes: where each of ``names`` lies in ``flat``.
        dim: genes (``flat.numel()``).

    Raises:
        ValueError: no parameter to lay out, or parameters on several devices.
        TypeError: parameters of several dtypes, or of a dtype that cannot be a gene.

    Example::

        model = torch.nn.Linear(3, 2)
        flat = FlatParameters(model)            # 8 genes: weight (6) then bias (2)
        genome = flat.read()                    # a copy of the genes
        flat.write(genome * 0.5)                # the model's parameters change in place
    """

    def __init__(self, model: torch.nn.Module, *, include_frozen: bool = False):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"expected a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.include_frozen = bool(include_frozen)
        params, self.names, self.aliases = [], [], {}
        first_name: dict[int, str] = {}
        for name, param in model.named_parameters(remove_duplicate=False):
            if not (param.requires_grad or self.include_frozen):
                continue
            if id(param) in first_name:
                self.aliases.setdefault(first_name[id(param)], []).append(name)
                continue
            first_name[id(param)] = name
            params.append(param)
            self.names.append(name)
        if not params:
            raise ValueError(f"expected a module with at least one {'' if include_frozen else 'trainable '}"
                             f"parameter, got none in {type(model).__name__}")
        devices = {p.device for p in params}
        if len(devices) > 1:
            raise ValueError(f"expected every gene on one device, got {sorted(map(str, devices))}")
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise TypeError(f"expected every gene of one dtype, got {sorted(map(str, dtypes))} "
                            "(cast the model first, e.g. model.to(torch.bfloat16))")
        self.dtype = params[0].dtype
        numpy_dtype(self.dtype)
        self.device = params[0].device
        self.shapes = [tuple(p.shape) for p in params]
        sizes = [p.numel() for p in params]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.dim = int(self.offsets[-1])
        self.flat = torch.empty(self.dim, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            for param, start, size in zip(params, self.offsets, sizes):
                view = self.flat[start:start + size].view(param.shape)
                view.copy_(param.data)
                param.data = view       # same Parameter object: ties and references survive
        self._params = params
        self._host = as_numpy(self.flat) if self.device.type == "cpu" else None
        # the genome buffers (a second one once double_buffer() asked for it) and which the
        # parameters point into
        self._buffers = [self.flat]
        self._active = 0

    def __repr__(self) -> str:
        return (f"FlatParameters({type(self.model).__name__}, {len(self.names)} tensors, dim={self.dim}, "
                f"{self.dtype}, {self.device})")

    @property
    def numpy_dtype(self) -> np.dtype:
        """The genes' dtype as numpy sees it."""
        return numpy_dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.dim * self.flat.element_size()

    def segment(self, name: str) -> slice:
        """Where parameter ``name`` (or a tied alias of it) lies in the genome."""
        for index, own in enumerate(self.names):
            if name == own or name in self.aliases.get(own, ()):
                return slice(int(self.offsets[index]), int(self.offsets[index + 1]))
        raise KeyError(f"expected the name of a gene parameter, got {name!r} (genes: {self.names[:4]}...)")

    def genome(self):
        """The buffer as the engine's array, without a copy: a numpy view on the CPU, a
        :class:`CudaView` on a GPU. Writing to it writes the model's weights."""
        if self._host is not None:
            return self._host
        return CudaView(self.flat)

    def double_buffer(self) -> tuple[np.ndarray, np.ndarray]:
        """Two host genome buffers the model can run from: the buffer it has, and a second
        one of the same size (made on first call). Writing a genome into either, then
        :meth:`write` of that very array, points the parameters at it (no copy), so a
        child can be made in one while the model runs from the other
        (:mod:`mpievo.evo.pipeline`).

        Raises:
            ValueError: a model on a device (the buffers are host buffers).

        Example::

            flat = FlatParameters(torch.nn.Linear(3, 2))
            first, second = flat.double_buffer()
            second[:] = 0.5
            flat.write(second)                  # the model now runs from `second`: no copy
        """
        if self.device.type != "cpu":
            raise ValueError(f"expected a model on the CPU for two host genome buffers, got one on {self.device}")
        if len(self._buffers) == 1:
            self._buffers.append(torch.empty_like(self._buffers[0]))
        first, second = (as_numpy(buffer) for buffer in self._buffers)
        return first, second

    def _activate(self, index: int) -> None:
        """Point every gene parameter at buffer ``index`` (its values are the model's now)."""
        if index == self._active:
            return
        buffer = self._buffers[index]
        with torch.no_grad():
            for param, start, stop, shape in zip(self._params, self.offsets, self.offsets[1:], self.shapes):
                param.data = buffer[start:stop].view(shape)
        self.flat, self._host, self._active = buffer, as_numpy(buffer), index

    def _buffer_of(self, genome: np.ndarray) -> int | None:
        """The index of the buffer ``genome`` is (the whole of it), else None."""
        if len(self._buffers) == 1 or genome.size != self.dim:
            return None
        address = genome.__array_interface__["data"][0]
        for index, buffer in enumerate(self._buffers):
            if buffer.data_ptr() == address:
                return index
        return None

    def read(self) -> np.ndarray:
        """A host copy of the genes (the model's current genome)."""
        if self._host is not None:
            return self._host.copy()
        return as_numpy(self.flat.cpu())

    def check_genome(self, genome) -> None:
        """Raises ValueError for a genome of another length (before anything is written)."""
        shape = tuple(genome.__cuda_array_interface__["shape"]) if _is_device_array(genome) \
            else np.shape(genome)
        if shape not in ((self.dim,), (1, self.dim)):
            raise ValueError(f"expected a genome of {self.dim} genes for {type(self.model).__name__}, "
                             f"got shape {shape}")

    def write(self, genome) -> None:
        """Put ``genome`` into the model: one copy into the buffer, cast to the model's
        dtype, no genome-sized allocation on the host path (nothing at all when
        ``genome`` already is the buffer; when it is the other of :meth:`double_buffer`'s,
        the parameters are pointed at it instead of copying). A device array (``__cuda_array_interface__``)
        is wrapped by torch without a copy and copied on the device.

        Raises:
            ValueError: a genome of another length.
        """
        self.check_genome(genome)
        if _is_device_array(genome):
            source = torch.as_tensor(genome, device=self.device).reshape(-1)
            with torch.no_grad():
                self.flat.copy_(source.view(self.dtype) if source.dtype == torch.uint16 else source)
            return
        genome = np.asarray(genome).reshape(-1)
        index = self._buffer_of(genome)
        if index is not None:       # one of double_buffer()'s: the model runs from it
            self._activate(index)
            return
        if self._host is not None:
            if not np.shares_memory(genome, self._host):
                copy_releasing_gil(genome, self._host)
            return
        host = np.ascontiguousarray(genome, self.numpy_dtype)
        with torch.no_grad():       # host genome -> device buffer: one transfer
            self.flat.copy_(from_numpy(host))


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A tensor over ``array``'s memory (no copy; ``ml_dtypes.bfloat16`` becomes bfloat16).

    Example::

        from_numpy(np.zeros(3, np.float32))     # tensor([0., 0., 0.]) over the same memory
    """
    if array.dtype == numpy_dtype(torch.bfloat16):
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def copy_releasing_gil(source: np.ndarray, target: np.ndarray) -> None:
    """``target[:] = source`` cast as :meth:`FlatParameters.write` casts (numpy's, unsafe),
    a half-precision row copied as its bits (numpy releases the GIL for those, not
    always for ``ml_dtypes`` types), so another thread runs meanwhile.

    Example::

        copy_releasing_gil(np.ones(3, np.float64), np.empty(3, np.float32))
    """
    if source.dtype == target.dtype and source.dtype.itemsize == 2:
        np.copyto(target.view(np.uint16), source.view(np.uint16))
    else:
        np.copyto(target, source, casting="unsafe")


def as_flat(model, include_frozen: bool = False) -> FlatParameters:
    """``model``'s FlatParameters (made, or ``model`` itself when it already is one)."""
    return model if isinstance(model, FlatParameters) else FlatParameters(model, include_frozen=include_frozen)
