"""A node's shared memory: the MPI-3 window (``window``), collectives among a node's
(``collectives``), one array per node (``array``) and the communicator's shared arrays
(``buffers``)."""
