"""examples/es_finetune.py: ES fine-tunes every weight of its pretrained network on the new
task, from the pretrained weights, deterministically."""

import sys
from pathlib import Path

import numpy as np

from mpievo.comm.protocol import SelfComm

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import es_finetune  # noqa: E402


def test_es_finetunes_the_pretrained_network_on_the_new_task():
    before, after, genome = es_finetune.finetune(generations=40, comm=SelfComm())
    assert genome.shape == (es_finetune.DIM,) and genome.dtype == np.float32
    assert after < 0.5 * before, (before, after)
    again = es_finetune.finetune(generations=40, comm=SelfComm())[2]
    assert np.array_equal(genome, again)
