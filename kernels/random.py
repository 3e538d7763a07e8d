"""Counter-based random numbers: Philox4x32-10, for host (Numba) and CUDA kernels.

A kernel computes the random numbers of its element ``i`` from ``(key, base + i)``
alone -- no generator state, no buffer of draws -- so any thread can make any
element's numbers, in any order, and get the same ones.

Philox4x32-10 (Salmon et al., SC'11; the generator of cuRAND's ``Philox4_32_10``)
maps a 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key ``(k0, k1)`` to four
32-bit words. The engine keys it like its numpy streams
(:func:`mpievo.evo.streams.counter_key`): key ``(seed, island)``, counter
``(i, j, generation, purpose)`` where ``(i, j)`` are the low and high words of a
64-bit block index. Here a *stream key* is the 4-tuple ``(k0, k1, c2, c3)`` of
uint64 values below 2**32, and :func:`block` makes the four words of block
``index``.

Words to numbers, using only integer operations, ``+ - *``, ``sqrt`` and exact
int-to-float conversions (no libm, no libdevice transcendental):

* :func:`uniform_word` -- ``(w >> 8) * 2**-24`` in [0, 1), float32.
* :func:`log_unit` -- ``ln(((w >> 8) + 1) * 2**-24)``, the log of a uniform in
  (0, 1] (Cephes' float32 logarithm on the mantissa, exponent from a leading-zero
  count).
* :func:`normal_pair` -- two independent standard normals (float32) from two words
  by Box-Muller: radius ``sqrt(-2 ln u)`` from the first word, and a uniform point
  ``(cos t, sin t)`` on the circle from the second: ``t`` uniform in [0, pi/4)
  (24 bits, Cephes' float32 sine and cosine polynomials), then one of the eight
  symmetries of the square (3 bits: swap, negate x, negate y). The 24-bit radius
  cuts the tails at ``|z| < 5.77`` (probability 8e-9).

Host and device. Each function is written once, as a template whose free names
(``U``, ``F``, ``mul``, ``clz``, ``sqrt``, ...) are bound per target: Numba on the
host, Numba CUDA (products through libdevice ``fmul_rn``, so the GPU compiler cannot
contract ``a * b + c`` into an FMA with another rounding), and the CUDA simulator
(numpy scalars). The integer words are bit-identical everywhere. The floats come
from the same IEEE operations in the same order (``sqrt`` is correctly rounded in
each), so they are expected to be bit-identical as well; the tests check that in the
simulator and allow 2 ulps against a real device, which this project's CI has not.

Importing this module never touches CUDA: :func:`device_functions` and the test
kernels compile on first use.
"""

from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros

from .cuda.reduce import bind_globals, compile_kernel, simulator_enabled

ROUNDS = 10
#: Philox4x32 multipliers and Weyl key increments (Random123)
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF

_U = np.uint64
_F = np.float32
# constants of the templates, as numpy scalars so that no target promotes them
_CONSTANTS = {
    "ROUNDS": ROUNDS, "M0": _U(PHILOX_M0), "M1": _U(PHILOX_M1), "W0": _U(PHILOX_W0),
    "W1": _U(PHILOX_W1), "M32": _U(MASK32), "S32": _U(32), "S8": _U(8), "M24": _U(0xFFFFFF),
    "S29": _U(29), "ONE": _U(1), "TWO": _U(2), "FOUR": _U(4), "TWENTY_FOUR": _U(24), "THIRTY_ONE": _U(31),
    "F_UNIT": _F(2.0 ** -24), "F_ONE": _F(1.0), "F_HALF": _F(0.5), "F_MINUS_TWO": _F(-2.0),
    "F_SQRT2": _F(math.sqrt(2.0)), "F_TWENTY_FOUR": _F(24.0),
    # Cephes logf: ln 2 split in two for accuracy, and the polynomial on [sqrt(.5), sqrt(2))
    "LN2_HI": _F(0.693359375), "LN2_LO": _F(-2.12194440e-4),
    "L0": _F(7.0376836292e-2), "L1": _F(-1.1514610310e-1), "L2": _F(1.1676998740e-1),
    "L3": _F(-1.2420140846e-1), "L4": _F(1.4249322787e-1), "L5": _F(-1.6668057665e-1),
    "L6": _F(2.0000714765e-1), "L7": _F(-2.4999993993e-1), "L8": _F(3.3333331174e-1),
    # Cephes sinf/cosf polynomials on [0, pi/4]; the angle is 24 bits times pi/4 * 2**-24
    "ANGLE_UNIT": _F(math.pi / 4) * _F(2.0 ** -24),
    "S0": _F(-1.9515295891e-4), "S1": _F(8.3321608736e-3), "S2": _F(-1.6666654611e-1),
    "C0": _F(2.443315711809948e-5), "C1": _F(-1.388731625493765e-3), "C2": _F(4.166664568298827e-2),
}


# ------------------------------------------------------------------ templates
# Free names (U, F, mul, clz, sqrt and the constants above) are bound per target.

def _block(index, k0, k1, c2, c3):
    # Philox4x32-10 of counter (index low, index high, c2, c3) under key (k0, k1).
    # Every value stays below 2**32 except the 32x32-bit products (below 2**64).
    c0 = index & M32  # noqa: F821
    c1 = index >> S32  # noqa: F821
    for _ in range(ROUNDS):  # noqa: F821
        p0 = M0 * c0  # noqa: F821
        p1 = M1 * c2  # noqa: F821
        c0, c1, c2, c3 = (p1 >> S32) ^ c1 ^ k0, p1 & M32, (p0 >> S32) ^ c3 ^ k1, p0 & M32  # noqa: F821
        k0 = (k0 + W0) & M32  # noqa: F821
        k1 = (k1 + W1) & M32  # noqa: F821
    return c0, c1, c2, c3


def _uniform_word(w):
    return F(w >> S8) * F_UNIT  # noqa: F821 (exact)


def _log_unit(w):
    m = (w >> S8) + ONE  # noqa: F821  -- u = m * 2**-24 in (0, 1]
    top = THIRTY_ONE - U(clz(m))  # noqa: F821  -- highest set bit, 0 .. 24
    f = mul(F(m << (TWENTY_FOUR - top)), F_UNIT)  # noqa: F821  -- m / 2**top in [1, 2), exact
    e = F(top) - F_TWENTY_FOUR  # noqa: F821
    big = f > F_SQRT2  # noqa: F821
    f = mul(f, F_HALF) if big else f  # noqa: F821
    e = e + F_ONE if big else e  # noqa: F821
    x = f - F_ONE  # noqa: F821
    z = mul(x, x)  # noqa: F821
    p = mul(mul(mul(mul(L0, x) + L1, x) + L2, x) + L3, x) + L4  # noqa: F821
    p = mul(mul(mul(mul(p, x) + L5, x) + L6, x) + L7, x) + L8  # noqa: F821
    y = mul(mul(p, x), z) + mul(LN2_LO, e) - mul(F_HALF, z)  # noqa: F821
    return x + y + mul(LN2_HI, e)  # noqa: F821


def _normal_pair(w_radius, w_angle):
    r = sqrt(mul(F_MINUS_TWO, log_unit(w_radius)))  # noqa: F821
    t = mul(F(w_angle & M24), ANGLE_UNIT)  # noqa: F821
    t2 = mul(t, t)  # noqa: F821
    s = t + mul(mul(t, t2), mul(mul(S0, t2) + S1, t2) + S2)  # noqa: F821
    c = F_ONE - mul(F_HALF, t2) + mul(mul(t2, t2), mul(mul(C0, t2) + C1, t2) + C2)  # noqa: F821
    bits = w_angle >> S29  # noqa: F821  -- swap, negate x, negate y
    x = s if bits & ONE else c  # noqa: F821
    y = c if bits & ONE else s  # noqa: F821
    x = -x if bits & TWO else x  # noqa: F821
    y = -y if bits & FOUR else y  # noqa: F821
    return mul(r, x), mul(r, y)  # noqa: F821


# --------------------------------------------------------------------- host
def _host_mul(a, b):
    return a * b


def _host_clz(x):
    return leading_zeros(np.uint32(x))


def _host_sqrt(x):
    return math.sqrt(x)


def _bind_all(compile_, names: dict) -> dict:
    """The templates compiled by ``compile_`` with ``names`` (and each other) bound."""
    names = dict(_CONSTANTS, **names)
    names["log_unit"] = compile_(bind_globals(_log_unit, **names))
    bound = {"block": compile_(bind_globals(_block, **names)),
             "uniform_word": compile_(bind_globals(_uniform_word, **names)),
             "log_unit": names["log_unit"],
             "normal_pair": compile_(bind_globals(_normal_pair, **names))}
    return bound


_inline = numba.njit(nogil=True)
_HOST = _bind_all(_inline, {"U": np.uint64, "F": np.float32, "mul": _inline(_host_mul),
                            "clz": _inline(_host_clz), "sqrt": _inline(_host_sqrt)})

#: ``block(index, k0, k1, c2, c3) -> (w0, w1, w2, w3)``: the four words of block
#: ``index`` (uint64 below 2**64) of stream key ``(k0, k1, c2, c3)`` (host, inlined).
block = _HOST["block"]
#: ``uniform_word(w) -> float32`` in [0, 1) from the top 24 bits of a word.
uniform_word = _HOST["uniform_word"]
#: ``log_unit(w) -> float32``: ln of the uniform ``((w >> 8) + 1) * 2**-24`` in (0, 1].
log_unit = _HOST["log_unit"]
#: ``normal_pair(w_radius, w_angle) -> (float32, float32)``: two standard normals.
normal_pair = _HOST["normal_pair"]


def check_key(key) -> tuple[int, int, int, int]:
    """``key`` as a tuple of four ints in [0, 2**32) (a stream key, see the module docstring)."""
    words = tuple(int(k) for k in key)
    if len(words) != 4 or not all(0 <= k <= MASK32 for k in words):
        raise ValueError(f"expected a stream key of four ints in [0, 2**32), got {key!r}")
    return words


@numba.njit(nogil=True, cache=True)
def _fill_words(out, base, k0, k1, c2, c3):
    for i in range(out.shape[0]):
        w0, w1, w2, w3 = block(base + np.uint64(i), k0, k1, c2, c3)
        out[i, 0] = w0
        out[i, 1] = w1
        out[i, 2] = w2
        out[i, 3] = w3


@numba.njit(nogil=True, cache=True)
def _fill_normals(out, base, k0, k1, c2, c3):
    for i in range(out.shape[0]):
        _, w1, w2, _ = block(base + np.uint64(i), k0, k1, c2, c3)
        out[i, 0], out[i, 1] = normal_pair(w1, w2)


def words(key, base: int, n: int) -> np.ndarray:
    """Blocks ``base .. base + n - 1`` of stream ``key`` as an (n, 4) uint32 array."""
    out = np.empty((n, 4), np.uint32)
    _fill_words(out, np.uint64(base), *(np.uint64(k) for k in check_key(key)))
    return out


def normals(key, base: int, n: int) -> np.ndarray:
    """The :func:`normal_pair` of words 1 and 2 of blocks ``base .. base + n - 1``, (n, 2) float32."""
    out = np.empty((n, 2), np.float32)
    _fill_normals(out, np.uint64(base), *(np.uint64(k) for k in check_key(key)))
    return out


# ------------------------------------------------------------------- device
def _sim_mul(a, b):
    return np.float32(a) * np.float32(b)


def _sim_clz(x):
    return 32 - int(x).bit_length()


def _gpu_clz(x):
    return libdevice.clz(int32(x))  # noqa: F821


@functools.lru_cache(maxsize=1)
def device_functions() -> dict:
    """The templates as CUDA device functions: ``{"block", "uniform_word", "log_unit",
    "normal_pair"}`` with the host functions' signatures (compiled on first call)."""
    from numba import cuda

    device = cuda.jit(device=True)
    if simulator_enabled():
        names = {"U": np.uint64, "F": np.float32, "mul": _sim_mul, "clz": _sim_clz, "sqrt": np.sqrt}
    else:
        from numba import types as nbt
        from numba.cuda import libdevice

        names = {"U": nbt.uint64, "F": nbt.float32, "mul": libdevice.fmul_rn, "sqrt": math.sqrt,
                 "clz": device(bind_globals(_gpu_clz, libdevice=libdevice, int32=nbt.int32))}
    return _bind_all(device, names)


def _words_kernel(out, base, k0, k1, c2, c3):
    start = cuda.grid(1)  # noqa: F821
    for i in range(start, out.shape[0], cuda.gridsize(1)):  # noqa: F821
        w0, w1, w2, w3 = block(base + U(i), k0, k1, c2, c3)  # noqa: F821
        out[i, 0] = w0
        out[i, 1] = w1
        out[i, 2] = w2
        out[i, 3] = w3


def _normals_kernel(out, base, k0, k1, c2, c3):
    start = cuda.grid(1)  # noqa: F821
    for i in range(start, out.shape[0], cuda.gridsize(1)):  # noqa: F821
        _, w1, w2, _ = block(base + U(i), k0, k1, c2, c3)  # noqa: F821
        z0, z1 = normal_pair(w1, w2)  # noqa: F821
        out[i, 0] = z0
        out[i, 1] = z1


@functools.lru_cache(maxsize=None)
def device_kernel(name: str):
    """``"words"`` or ``"normals"``: a CUDA kernel ``kernel[grid, block](out, base, k0, k1,
    c2, c3)`` filling ``out`` like :func:`words` / :func:`normals` (uint64 scalars)."""
    template = {"words": _words_kernel, "normals": _normals_kernel}[name]
    fns = device_functions()
    return compile_kernel(template, U=np.uint64, block=fns["block"], normal_pair=fns["normal_pair"])
