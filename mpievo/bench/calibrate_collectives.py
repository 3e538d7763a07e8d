"""Calibration: which algorithm is fastest at which size, on this machine and layout.

Every candidate algorithm of a case is timed in interleaved rounds at each size (so
that drift in machine load hits all alike; each timing is the lower quartile of its
rounds), the whole sweep is repeated, and the winner at each size is the fastest
median over the sweeps; every timed result is checked against the numpy reference. Cases: all-reduce float32 sum, all-reduce
float32 max (the ``allreduce:maxmin`` table: floating max/min carry their NaN
handling), reduce-scatter float32 sum, all-gather and broadcast float32. The ring
and chain segments and the shared-window piece are calibrated first, the same way,
at 64 MiB. Candidates are the algorithms the layout offers: ``shm`` on one node,
``hierarchical`` on several.
"""

from __future__ import annotations

import json
import os

import numpy as np
from mpi4py import MPI

from ..comm import selection
from .collectives import Case, check_outputs, time_alternating
from ..comm.communicator import Communicator
from ..comm.nodes import layout_key

#: (table key, collective, dtype, op) of every calibrated case
CASES = (
    ("allreduce", "allreduce", "float32", "sum"),
    (f"allreduce:{selection.MAXMIN}", "allreduce", "float32", "max"),
    ("reduce_scatter", "reduce_scatter", "float32", "sum"),
    ("allgather", "allgather", "float32", None),
    ("broadcast", "broadcast", "float32", None),
)
DEFAULT_SIZES = [256 << i for i in range(19)]  # 256 B .. 64 MiB
#: rounds are summarised by their lower quartile: a round in which a rank lost its core
#: to another process is slow whatever ran, so on a shared machine the median of the
#: rounds mixes in the load; the lower quartile follows the algorithms' own speed
QUANTILE = 0.25
#: option -> (collective, algorithm, candidate sizes in bytes) of the segment calibrations
SEGMENTS = {
    "segment_bytes": ("allreduce", "ring", [256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20]),
    "copy_segment_bytes": ("allgather", "ring", [512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20]),
    "shm_piece_bytes": ("allreduce", "shm", [64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20]),
}


def candidates(collective: str, single_node: bool) -> list[str]:
    """The algorithms of ``collective`` that the layout offers."""
    absent = "hierarchical" if single_node else "shm"
    return [a for a in selection.ALGORITHMS[collective] if a != absent]


def calibrate(sizes=None, target_s: float = 0.05, repeats: int = 3, report=print) -> dict:
    """Calibrate every case over ``sizes`` for this layout (under mpiexec).

    Returns:
        ``{"collectives": {key: {layout: [[max_bytes, algorithm], ..., [None, alg]]}},
        "segment_bytes": .., "copy_segment_bytes": .., "shm_piece_bytes": ..}``.

    Raises:
        ValueError: ``repeats`` < 1.
        WrongResultError: an algorithm returned a wrong result (every rank).
    """
    if repeats < 1:
        raise ValueError(f"expected repeats >= 1, got {repeats}")
    sizes = DEFAULT_SIZES if sizes is None else sorted(sizes)
    native = MPI.COMM_WORLD.Dup()
    say = report if native.Get_rank() == 0 else (lambda *_: None)
    try:
        probe = Communicator()
        single, key = len(probe.nodes) == 1, layout_key(probe.size, len(probe.nodes))
        probe.free()
        options = {}
        for option, (collective, algorithm, choices) in SEGMENTS.items():
            if algorithm in candidates(collective, single):
                options[option] = _calibrate_segment(native, option, collective, algorithm, choices,
                                                     target_s, repeats, say)
        rules = {name: {key: calibrate_case(native, collective, dtype, op, candidates(collective, single),
                                            sizes, options=options, target_s=target_s, repeats=repeats,
                                            say=say)}
                 for name, collective, dtype, op in CASES}
    finally:
        native.Free()
    return {"collectives": rules, **options}


def _sweeps(native, pairs, labels, collective, dtype, op, sizes, repeats: int, target_s: float) -> np.ndarray:
    """Median seconds over ``repeats`` sweeps of every (communicator, algorithm) pair, shape
    (len(sizes), len(pairs)); in a sweep the pairs are interleaved at each size, and every
    timed result is checked."""
    times = np.empty((repeats, len(sizes), len(pairs)))
    for sweep in range(repeats):
        for i, nbytes in enumerate(sizes):
            cases = [Case(comm, native, collective, nbytes, dtype, op, algorithm) for comm, algorithm in pairs]
            times[sweep, i] = time_alternating(native, [case.ours for case in cases], target_s=target_s,
                                               quantile=QUANTILE)
            for case, label in zip(cases, labels):
                check_outputs(native, case, f"calibration {case.spec.label()} ({label})", with_native=False)
    return np.median(times, axis=0)


def calibrate_case(native, collective: str, dtype, op, algorithms, sizes, *, options=None,
                   target_s: float, repeats: int, say=lambda *_: None) -> list:
    """The fastest of ``algorithms`` for one case at each size, as selection rules.

    Each candidate runs on a communicator where the environment forces it, called
    without ``algorithm=``: so it runs the way an automatic choice of it would
    (``native`` through the direct MPI call). ``options``: Communicator keywords.
    """
    comms = [_forced(collective, a, options or {}) for a in algorithms]
    try:
        medians = _sweeps(native, [(c, None) for c in comms], algorithms, collective, dtype, op,
                          sizes, repeats, target_s)
    finally:
        for c in comms:
            c.free()
    winners = []
    what = collective if op is None else f"{collective}:{op}"
    for nbytes, row in zip(sizes, medians):
        best = algorithms[int(np.argmin(row))]
        winners.append((nbytes, best))
        say(f"{what:<19}{nbytes:>11} " + " ".join(f"{a}={t * 1e3:.4f}ms" for a, t in zip(algorithms, row))
            + f" -> {best}")
    return merge_rules(winners)


def _forced(collective: str, algorithm: str, options: dict) -> Communicator:
    """A communicator on which every call of ``collective`` runs ``algorithm``."""
    name = f"MPIEVO_{collective.upper()}_ALGORITHM"
    previous = os.environ.get(name)
    os.environ[name] = algorithm  # read once, when the communicator is made
    try:
        return Communicator(**options)
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


def _calibrate_segment(native, option, collective, algorithm, choices, target_s, repeats, say) -> int:
    """The fastest ``option`` among ``choices`` for ``algorithm`` at 64 MiB."""
    comms = [Communicator(**{option: seg}) for seg in choices]
    try:
        op = "sum" if collective in ("allreduce", "reduce_scatter") else None
        row = _sweeps(native, [(c, algorithm) for c in comms], [f"{algorithm}, {option}={seg}" for seg in choices],
                      collective, "float32", op, [64 << 20], repeats, target_s)[0]
    finally:
        for c in comms:
            c.free()
    best = choices[int(np.argmin(row))]
    say(f"{collective} {algorithm} {option}: "
        + " ".join(f"{s >> 10}KiB={t * 1e3:.2f}ms" for s, t in zip(choices, row)) + f" -> {best}")
    return int(best)


def merge_rules(winners) -> list:
    """[(size, algorithm)] ascending -> [[max_bytes, algorithm], ..., [None, last]].

    A lone winner between two runs of the same other algorithm is noise and is merged.
    """
    algs = [a for _, a in winners]
    for i in range(1, len(algs) - 1):
        if algs[i - 1] == algs[i + 1] != algs[i]:
            algs[i] = algs[i - 1]
    rules = []
    for i, (nbytes, alg) in enumerate(zip([s for s, _ in winners], algs)):
        if i + 1 < len(algs) and algs[i + 1] == alg:
            continue
        rules.append([nbytes, alg])
    rules[-1][0] = None
    return rules


def merge_tuning(table: dict, update: dict) -> dict:
    """Merge one layout's calibration into a tuning table (returns a new dict)."""
    merged = json.loads(json.dumps(table)) if table else {"collectives": {}}
    for collective, per in update["collectives"].items():
        merged.setdefault("collectives", {}).setdefault(collective, {}).update(per)
    for option in SEGMENTS:
        if option in update:
            merged[option] = update[option]
    return merged
