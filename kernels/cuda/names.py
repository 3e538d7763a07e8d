"""Names of kernel specialisations: one name per template and set of bound globals.

The CUDA kernels are module-level templates whose free names (``cuda``, ``load``,
``combine``, ``term``, constants, ...) are bound per specialisation by
:func:`mpievo.kernels.cuda.reduce.bind_globals`. Numba's disk cache files a kernel under
its module, ``__qualname__`` and first line, and keys it by the argument types and
the bytecode: the bound globals are not part of the key. Two specialisations of one
template with the same argument types (a sum and a max of float32 arrays, the sphere
and the Rastrigin reductions) would then share one cache entry, and a process could
load the other's kernel. So every bound copy is renamed
``<template qualname>__<digest>``, the digest a hash of what the names are bound to:
a separate cache entry per specialisation, and a new one when a bound constant or
the code of a bound device function changes (Numba's own stamp sees only the
template's file).

The digest is built from values, never from object ids, so it is the same in every
process (a second process finds the first one's kernels).
"""

from __future__ import annotations

import hashlib
import types

import numpy as np

#: hex digits of the digest kept in a name (64 bits: collisions are not a concern)
DIGEST_DIGITS = 16


def code_digest(code: types.CodeType) -> str:
    """sha256 of a code object's bytecode, names and constants (nested code included)."""
    h = hashlib.sha256()
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        h.update(code_digest(const).encode() if isinstance(const, types.CodeType)
                 else f"{type(const).__name__}:{const!r}".encode())
    return h.hexdigest()


def fingerprint(value) -> str:
    """A process-independent description of a value bound into a kernel template.

    Modules by name; Python functions by module, qualname and code (a bound copy's
    qualname already carries its own digest); compiled functions (Numba dispatchers,
    the simulator's kernels) by the function they wrap; numbers with their type;
    types and Numba types by name.

    Raises:
        TypeError: any other value (its description could depend on the process).
    """
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    if isinstance(value, types.FunctionType):
        return f"function {value.__module__}.{value.__qualname__} {code_digest(value.__code__)}"
    wrapped = getattr(value, "py_func", None) or getattr(value, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType):
        return f"{type(value).__name__}({fingerprint(wrapped)})"
    if isinstance(value, (types.BuiltinFunctionType, np.ufunc)):
        return f"builtin {getattr(value, '__module__', None)}.{value.__name__}"
    if isinstance(value, (bool, int, float, complex, str, np.generic)) or value is None:
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, type):
        return f"type {value.__module__}.{value.__qualname__}"
    if isinstance(value, tuple):
        return "(" + ", ".join(fingerprint(v) for v in value) + ")"
    if type(value).__module__.split(".")[0] == "numba" and " at 0x" not in repr(value):
        return f"{type(value).__name__} {value!r}"   # a Numba type (float64, uint64, ...)
    raise TypeError(f"expected a module, function, compiled function, number, type or Numba type "
                    f"to bind into a kernel, got {type(value).__module__}.{type(value).__qualname__}")


def specialization_name(template, names: dict) -> str:
    """``<template qualname>__<digest of names>``: the qualname of a bound copy."""
    h = hashlib.sha256()
    for key in sorted(names):
        h.update(f"{key}={fingerprint(names[key])};".encode())
    return f"{template.__qualname__}__{h.hexdigest()[:DIGEST_DIGITS]}"
