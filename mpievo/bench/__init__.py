"""mpievo.bench: every ``mpievo bench ...`` benchmark (nothing here runs in a job).

* :mod:`.checks` -- the one timing and result-check module (:class:`WrongResultError`).
* :mod:`.collectives`, :mod:`.collectives_verify` -- mpievo's collectives vs the MPI library's.
* :mod:`.calibrate_collectives` -- the collectives' selection table (``mpievo bench calibrate``).
* :mod:`.engine`, :mod:`.engine_vs_pygmo`, :mod:`.de_vs_pygmo` -- one island vs pygmo (GA and jDE),
  weak scaling, migration cost.
* :mod:`.gpu`, :mod:`.gpu_engine` -- device kernels, all-reduce and islands.
* :mod:`.schemes`, :mod:`.schemes_report` -- the parallel schemes side by side, against :mod:`mpievo.plan`.
* :mod:`.bbob`, :mod:`.bbob_report` -- jobs on COCO's BBOB suite.
* :mod:`.genomes` (with ``genomes_*`` and :mod:`.merge_distance`, its fitness on a GPU) --
  dense, delta and seeded genomes.
* :mod:`.models` -- models as genomes (``mpievo bench models``; needs the ``torch`` extra).
"""
