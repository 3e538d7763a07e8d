"""The wire form of a point-to-point object (no MPI here: one-process runs use it too).

A message is a pickle (protocol 5) without the data of the object's contiguous arrays,
and those data as raw buffers beside it (out of band), so they are sent straight from
the arrays and received into the memory the unpickled arrays keep.
"""

from __future__ import annotations

import pickle

import numpy as np


def dumps_out_of_band(obj) -> tuple[np.ndarray, list[np.ndarray]]:
    """``obj``'s pickle without its contiguous arrays' data, and those data as uint8
    views of the arrays themselves (not copied)."""
    buffers: list = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return np.frombuffer(data, np.uint8), [np.frombuffer(b.raw(), np.uint8) for b in buffers]


def message_bytes(obj) -> int:
    """What sending ``obj`` point to point moves: its header (8 bytes, and 8 per
    out-of-band buffer), its pickle and its arrays' data."""
    body, buffers = dumps_out_of_band(obj)
    return 8 * (1 + len(buffers)) + body.nbytes + sum(b.nbytes for b in buffers)
