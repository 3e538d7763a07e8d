"""mpievo.bench: ``mpievo bench ...`` benchmarks (nothing here runs in a job).

* :mod:`.models` -- models as genomes (``mpievo bench models``; needs the ``torch`` extra).
"""
