"""Wires: how a region of a buffer travels through MPI and is combined: host arrays
(``host``), float32 sent as float16/bfloat16 (``cast``), device buffers (``device``)."""
