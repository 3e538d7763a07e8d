"""Fast device math for a GPU island's mutation (``engine.device_math = "fast"``).

The default (``"exact"``) mutation kernels give the host's bits: Box-Muller through
Cephes polynomials on integer-built floats, every product rounded on its own
(libdevice ``fmul_rn``), so the compiler cannot fuse a multiply and an add. That
costs most of the dense mutation's time. The fast mode keeps the same random mapping
(the same Philox words feed the same genes, the mask words pick the same genes) and
replaces the arithmetic:

* normals -- Box-Muller with the hardware's approximate functions: radius
  ``sqrt(-2 ln u)`` with ``u = ((w1 >> 8) + 1) * 2**-24`` in (0, 1], angle
  ``t = (w2 >> 8) * 2pi * 2**-24``, the pair ``(r cos t, r sin t)``; compiled with
  ``fastmath`` (``__logf``, ``__sinf``, ``__cosf``, approximate ``sqrt`` and division,
  flush to zero);
* products -- plain ``*``, which the compiler may contract with an add into an FMA.

A fast run repeats exactly on the same GPU model and driver (the same program on the
same inputs), but not against the host or another GPU model. The normals are standard
normals to the precision of ``__logf`` / ``__sinf`` (a few ulps; the 24-bit radius
cuts the tails at ``|z| < 5.77`` as in the exact mode); the tests compare their
moments with the host's exact normals. Under the simulator the same formulas run in
numpy float32. Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .reduce import bind_globals, simulator_enabled

#: engine.device_math values: "exact" (the host's bits) or "fast" (this module)
DEVICE_MATH = ("exact", "fast")

_F = np.float32
_CONSTANTS = {"S8": np.uint64(8), "ONE": np.uint64(1), "F_UNIT": _F(2.0 ** -24),
              "F_MINUS_TWO": _F(-2.0), "ANGLE_UNIT": _F(2.0 * math.pi * 2.0 ** -24)}


def check_device_math(math_mode: str) -> str:
    """``math_mode`` when it is one of :data:`DEVICE_MATH`."""
    if math_mode not in DEVICE_MATH:
        raise ValueError(f"expected device math among {DEVICE_MATH}, got {math_mode!r}")
    return math_mode


def _fast_normal_pair(w_radius, w_angle):
    u = F((w_radius >> S8) + ONE) * F_UNIT  # noqa: F821  -- in (0, 1]
    r = sqrt(F_MINUS_TWO * log(u))  # noqa: F821
    t = F(w_angle >> S8) * ANGLE_UNIT  # noqa: F821  -- in [0, 2pi)
    return r * cos(t), r * sin(t)  # noqa: F821


def _product(a, b):
    return a * b


def _sim_log(x):
    return np.log(np.float32(x))


def _sim_sqrt(x):
    return np.sqrt(np.float32(x))


def _sim_cos(x):
    return np.cos(np.float32(x))


def _sim_sin(x):
    return np.sin(np.float32(x))


@functools.lru_cache(maxsize=1)
def fast_functions() -> dict:
    """``{"normal_pair", "mul"}``: the fast mode's device functions (compiled on first call)."""
    from numba import cuda

    if simulator_enabled():
        names = dict(_CONSTANTS, F=np.float32, log=_sim_log, sqrt=_sim_sqrt, cos=_sim_cos, sin=_sim_sin)
    else:
        from numba import types as nbt

        names = dict(_CONSTANTS, F=nbt.float32, log=math.log, sqrt=math.sqrt, cos=math.cos, sin=math.sin)
    device = cuda.jit(device=True, fastmath=True)
    return {"normal_pair": device(bind_globals(_fast_normal_pair, **names)),
            "mul": device(bind_globals(_product))}
