"""Keyed random streams: the only source of randomness in the engine.

Every random decision draws from ``stream(seed, island, generation, purpose)``, a
fresh ``numpy.random.Generator`` (Philox, counter-based) whose state is a pure
function of those four keys.
Nothing carries generator state from one generation to the next, so a run gives
bit-identical results whatever the rank layout, the timing of migrations or a
checkpoint/restart in between, and checkpoints need no RNG state.

Kernels that draw per gene on large genomes use the counter-based generator of
:mod:`mpievo.kernels.random`, keyed the same way (:func:`counter_key`), and take
their blocks from the generator they were given (:func:`counter_blocks`).
"""

from __future__ import annotations

import numbers
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

#: purpose name -> code mixed into the seed (read-only; extend by passing an int).
PURPOSES = MappingProxyType({
    "init": 0,        # initial population of an island
    "breed": 1,       # ask(): parent selection and variation
    "algorithm": 2,   # algorithm set-up (e.g. CMA-ES internals, DE population)
    "emigrate": 3,    # choosing emigrants (random policy)
    "immigrate": 4,   # immigration policies that draw
    "problem": 5,     # shift and rotation of built-in problems
    "topology": 6,    # for the parallel layer: random migration partners
    "fidelity": 7,    # the rows of a generation's cheap scores (mpievo.evo.fidelity)
    "restart": 8,     # a portfolio's restart of a losing island (mpievo.rules.budget.losers)
})


def _non_negative_int(value, name: str) -> int:
    if type(value) is int and value >= 0:  # fast path: called every generation
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"expected a non-negative int for {name}, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"expected a non-negative int for {name}, got {value}")
    return int(value)


def purpose_code(purpose: str | int) -> int:
    """Return the integer code of ``purpose`` (a name of :data:`PURPOSES` or an int >= 0).

    Raises:
        ValueError: unknown purpose name.
        TypeError: neither str nor int.
    """
    if isinstance(purpose, str):
        if purpose not in PURPOSES:
            raise ValueError(f"expected a purpose among {sorted(PURPOSES)} or an int, got {purpose!r}")
        return PURPOSES[purpose]
    return _word(purpose, "purpose")


_TWO_64 = 2**64


def _key_and_counter(seed, island, generation, purpose) -> tuple[list[int], list[int]]:
    key = [_word(seed, "seed"), _word(island, "island")]
    counter = [0, 0, _word(generation, "generation"), purpose_code(purpose)]
    return key, counter


def _word(value, name: str) -> int:
    value = _non_negative_int(value, name)
    if value >= _TWO_64:
        raise ValueError(f"expected {name} < 2**64, got {value}")
    return value


def stream(seed: int, island: int, generation: int, purpose: str | int = "breed") -> np.random.Generator:
    """A generator keyed by ``(seed, island, generation, purpose)``.

    Philox is a counter-based generator: the key ``(seed, island)`` selects the
    stream family and the counter's high words ``(generation, purpose)`` a disjoint
    block of 2**128 draws, so distinct keys never share numbers and building one
    costs a few microseconds (no seed hashing).

    Args:
        seed: the run's seed (int, 0 <= seed < 2**64).
        island: island index (int >= 0).
        generation: generation number (int >= 0).
        purpose: what the draws are for: a name of :data:`PURPOSES` or an int >= 0.

    Returns:
        A new ``numpy.random.Generator``; equal keys give equal streams.

    Raises:
        TypeError, ValueError: a key that is not a non-negative int, or an unknown purpose.

    Example::

        rng = stream(seed=1, island=0, generation=5, purpose="breed")
        rng.random(2)                    # the same numbers for the same key, on any rank
    """
    key, counter = _key_and_counter(seed, island, generation, purpose)
    return np.random.Generator(np.random.Philox(counter=counter, key=key))


_MASK32 = 2**32 - 1


def _fold(value: int) -> int:
    """``value`` below 2**32 unchanged; above, its high half mixed into the low one."""
    return (value ^ ((value >> 32) * 0x9E3779B9)) & _MASK32


def counter_key(seed: int, island: int, generation: int,
                purpose: str | int = "breed") -> tuple[int, int, int, int]:
    """The stream key of the counter-based generator (:mod:`mpievo.kernels.random`) for
    the same four keys as :func:`stream`: Philox4x32 key ``(seed, island)`` and the
    counter's high words ``(generation, purpose)``, each a 32-bit word.

    Keys below 2**32 map one to one, so distinct keys never share numbers; a key
    of 2**32 or more is folded into 32 bits (``lo ^ hi * 0x9E3779B9``) and may then
    share its numbers with another key's.
    """
    key, counter = _key_and_counter(seed, island, generation, purpose)
    return _fold(key[0]), _fold(key[1]), _fold(counter[2]), _fold(counter[3])


def generation_word(generation: int) -> int:
    """The generation's word of :func:`counter_key` (validated as there), for a caller
    that keeps the other three of a stream it keys every generation."""
    return _fold(_word(generation, "generation"))


def counter_blocks(rng: np.random.Generator, blocks: int) -> tuple[tuple[int, int, int, int], int]:
    """Take the next ``blocks`` counter blocks of ``rng``'s stream for a counter-based kernel.

    For a generator from :func:`stream` (numpy Philox), the stream key is
    :func:`counter_key` of its keys and the first block is the index of the next
    Philox block the generator would use; the generator then skips ``blocks`` blocks,
    so later numpy draws and later kernels never see the same counters. Any other
    generator gives a key drawn from it (four 32-bit words) and first block 0.

    Returns:
        (stream key, first block index).
    """
    bit_generator = rng.bit_generator
    if not isinstance(bit_generator, np.random.Philox):
        key = tuple(int(k) for k in rng.integers(0, _MASK32, 4, dtype=np.uint64, endpoint=True))
        return key, 0
    state = bit_generator.state["state"]
    (seed, island), (position, high, generation, purpose) = (
        (int(k) for k in state["key"]), (int(c) for c in state["counter"]))
    if high:
        raise ValueError(f"expected a stream position below 2**64, got {high} * 2**64 + {position}")
    bit_generator.advance(blocks)
    key = (_fold(seed), _fold(island), _fold(generation), _fold(purpose))
    return key, position + 1


class StreamKeys(NamedTuple):
    """The keys of a :func:`stream`, not built yet: an algorithm whose generation draws
    only from the counter-based generator (the GA's compiled step) never pays for the
    numpy generator (a Philox built per generation, about 10 µs); one that needs it
    calls :meth:`generator`. An algorithm that declares ``takes_stream_keys = True``
    gets these from :meth:`~mpievo.evo.island.Island.ask` instead of a Generator."""

    seed: int
    island: int
    generation: int
    purpose: str | int = "breed"

    def generator(self) -> np.random.Generator:
        """The :func:`stream` of these keys."""
        return stream(*self)

    def counter_start(self) -> tuple[tuple[int, int, int, int], int]:
        """(stream key, first block) that :func:`counter_blocks` gives for a fresh
        :meth:`generator`, without building it."""
        return counter_key(*self), 1


class CounterStart:
    """Where a compiled step's counter-based draws start, as its kernel takes them: the
    stream key as four uint64 words and the first block as a uint64.

    ``rng`` is :class:`StreamKeys` (then only the generation's word is computed anew while
    seed, island and purpose stay those of the last call: a step pays no key derivation
    per generation) or a Generator, whose next ``blocks`` blocks it takes
    (:func:`counter_blocks`)."""

    def __init__(self):
        self._fixed, self._words = None, None

    def __call__(self, rng, blocks: int) -> tuple[tuple, np.uint64]:
        if not isinstance(rng, StreamKeys):
            key, base = counter_blocks(rng, blocks)
            return tuple(np.uint64(k) for k in key), np.uint64(base)
        fixed = (rng.seed, rng.island, rng.purpose)
        if fixed != self._fixed:
            key, base = rng.counter_start()
            self._fixed, self._words = fixed, (np.uint64(key[0]), np.uint64(key[1]), np.uint64(key[3]),
                                               np.uint64(base))
        k0, k1, k3, base = self._words
        return (k0, k1, np.uint64(generation_word(rng.generation)), k3), base


def as_generator(rng) -> np.random.Generator:
    """``rng`` itself, or the generator of :class:`StreamKeys`."""
    return rng.generator() if isinstance(rng, StreamKeys) else rng


def seed_int(rng: np.random.Generator) -> int:
    """Draw a 32-bit seed from ``rng`` for libraries that want an integer seed."""
    return int(rng.integers(1, 2**31 - 1))
