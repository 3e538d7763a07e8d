"""run.blas_threads reaches torch's intra-op pool (mpievo/parallel/threads.py): starting
Numba's OpenMP layer used to reset the count torch reads, so a torch fitness ran on all
cores per rank. Each case runs in a fresh process: thread pools are process state."""

import subprocess
import sys

import pytest

pytest.importorskip("torch")

LIMIT = """
import contextlib, sys
{imports}
from mpievo.parallel.threads import limit_blas_threads
{before}
with contextlib.ExitStack() as stack:
    limit_blas_threads(1, stack)
    {inside}
    print(torch.get_num_threads())
print(torch.get_num_threads())
"""


def _threads(imports="import torch", before="torch.set_num_threads(2)", inside="pass") -> list[int]:
    code = LIMIT.format(imports=imports, before=before, inside=inside)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [int(line) for line in done.stdout.split()]


def test_limit_reaches_torch_and_is_restored():
    assert _threads() == [1, 2]

