"""mpievo.rules: the MPI-free rules of an island run, below the job config.

* :mod:`.mapping` -- block placement of N logical islands on P ranks.
* :mod:`.topology` -- ring, bidirectional ring, torus, fully connected, seeded random
  per epoch, user graph, unconnected: ``neighbours(n_islands, ...) -> list[list[int]]``.
* :mod:`.adaptive` -- migration interval from measured diversity.
* :mod:`.budget` -- evaluation shares: rounds of R evaluations per island, budget shares.
* :mod:`.schedule` -- :class:`MigrationSchedule`: a topology and its interval rule.

Pure functions and small data classes: no MPI, no communicator. :mod:`mpievo.config`
validates jobs against them, and :mod:`mpievo.parallel` runs them.
"""
