"""Average "gradients" of mixed shapes and dtypes across ranks with mpievo's collectives.

Run:  mpievo launch -n 4 -- python examples/collectives_demo.py
"""

import numpy as np

from mpievo.comm import Communicator, abort_on_error


def main() -> None:
    comm = Communicator(timeout=60)
    rng = np.random.default_rng(comm.rank)
    grads = [rng.standard_normal((256, 128)).astype(np.float32),
             rng.standard_normal(128).astype(np.float32),
             rng.integers(0, 10, size=(7,)).astype(np.int64)]
    expected = [np.mean([np.random.default_rng(r).standard_normal((256, 128)).astype(np.float32)
                         for r in range(comm.size)], axis=0)]
    with comm.purpose("gradients"):
        comm.allreduce_buckets(grads[:2], op="mean", bucket_bytes=64 << 10)
        comm.allreduce(grads[2], grads[2], op="sum")
    error = float(np.max(np.abs(grads[0] - expected[0])))
    best = comm.allreduce(np.array([error]), op="max")[0]
    big = np.full(1 << 22, comm.rank + 1.0, np.float32)  # 16 MiB: the bandwidth regime
    comm.allreduce(big, big)
    if comm.rank == 0:
        print(f"{comm.size} ranks: max |mean - reference| = {best:.2e}, "
              f"bytes sent by rank 0: {comm.traffic}")
        print(f"nodes {comm.nodes}: a 16 MiB all-reduce runs {comm.algorithm_for('allreduce', big.nbytes)!r}, "
              f"sum correct: {bool(np.all(big == comm.size * (comm.size + 1) / 2))}")


if __name__ == "__main__":
    with abort_on_error():
        main()
