"""mpievo.plan: the cost model of the parallel schemes (``mpievo plan``).

* :mod:`.traffic` -- every message a scheme sends, from the layout alone (exact bytes).
* :mod:`.timing` -- those messages and the engine's work turned into seconds.
* :mod:`.calibrate` -- the model's constants measured on this machine (``mpievo plan --calibrate``).
* :mod:`.local` -- children bred where they are evaluated, pipelined (the model-sized path).
* :mod:`.scenario` -- the design study's scenario.
* :mod:`.measured` -- schemes run at several rank counts against the model (``mpievo plan --measure``).
* :mod:`.workloads` -- the workload vocabulary shared with ``mpievo bench schemes``: a
  fitness cost per child at a genome size, and one measured run of a scheme on it.

Imports nothing from :mod:`mpievo.bench` (the benchmarks import the model).
"""
