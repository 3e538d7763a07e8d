"""``mpievo bench genomes``: a tiny grid (1e3 and 1e5 genes) serially and on 2 ranks,
its numbers consistent, its checks able to fail, cells that do not fit skipped."""

import csv

import numpy as np
import pytest

from mpi_support import all_ranks_agree
from mpievo.cli.main import main as cli_main
from mpievo.comm.protocol import SelfComm
from mpievo.bench import genomes as bench
from mpievo.bench.genomes import GenomesCheckError, GenomesOptions, bench_genomes
from mpievo.bench.genomes_device import gpu_columns

DIMS = (1_000, 100_000)
TINY = GenomesOptions(dims=DIMS, generations=1, repeats=1)


def _rows(rows):
    return {(r["genome"], r["dim"]): r for r in rows}


def _consistency(rows) -> list[str]:
    """What is wrong with a grid's numbers (empty: nothing)."""
    by = _rows(rows)
    small, large = DIMS
    wrong = [f"{key}: {row.get('skipped') or row['problems']}" for key, row in by.items()
             if row.get("skipped") or row["problems"]]
    record = by[("dense", small)]["migrant_bytes"] - 4 * small
    if by[("seeded", small)]["migrant_bytes"] != by[("seeded", large)]["migrant_bytes"]:
        wrong.append("seeded bytes per migrant grow with the genome")
    for genome in ("dense", "delta"):   # float32 rows plus one record: linear in dim
        if [by[(genome, d)]["migrant_bytes"] for d in DIMS] != [4 * d + record for d in DIMS]:
            wrong.append(f"{genome} bytes per migrant are not 4 * dim + {record}")
    if not by[("seeded", large)]["checkpoint_bytes"] * 10 < by[("dense", large)]["checkpoint_bytes"]:
        wrong.append("a seeded checkpoint is not far smaller than a dense one at 1e5 genes")
    for row in by.values():
        if not (row["breed_gbs"] > 0 and row["migration_ms"] > 0 and row["peak_bytes"] >= row["data_bytes"]):
            wrong.append(f"{row['genome']} {row['dim']}: non-positive timing or a peak below the data")
    if not all(r["produce_gbs"] <= min(r["breed_gbs"], r["materialize_gbs"])
               for (genome, _), r in by.items() if genome == "seeded"):
        wrong.append("seeded: making whole children is faster than one of its parts")
    return wrong


def test_serial_grid_is_consistent_and_written(tmp_path):
    rows = bench_genomes(SelfComm(), TINY, out=tmp_path, log=lambda line: None)
    assert _consistency(rows) == []
    assert all(r["traffic_bytes"] == 0 for r in rows)   # both islands in this process
    with open(tmp_path / "genomes.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["genome"], int(r["dim"])) for r in table] == [(g, d) for d in DIMS for g in bench.GENOMES]
    assert "| seeded | 1e+05 |" in (tmp_path / "table.md").read_text()


@pytest.mark.mpi(min_size=2)
def test_two_rank_grid_sends_exactly_the_layout(world):
    from mpievo.comm import Communicator

    comm = Communicator(world)
    rows = bench_genomes(comm, TINY, log=lambda line: None)
    wrong = _consistency(rows)
    # one island per rank (ring of comm.size islands): each rank sends one edge of one
    # migrant per migration, its record and row plus the edge's 8-byte header
    wrong += [f"{r['genome']} {r['dim']}: sent {r['traffic_bytes']}" for r in rows
              if r["traffic_bytes"] != r["migrant_bytes"] + 8]
    same = comm.allgather_object(rows)
    all_ranks_agree(world, not wrong and all(s == same[0] for s in same), "; ".join(wrong))


def test_a_wrong_reported_fitness_fails_the_check(monkeypatch):
    # a fitness that differs on every call: the decoded best cannot repeat its value
    noise = np.random.default_rng(0)
    monkeypatch.setattr(bench.MergeDistance, "__call__", lambda self, genomes: noise.random(len(genomes)))
    with pytest.raises(GenomesCheckError, match="expected the decoded best's fitness"):
        bench_genomes(SelfComm(), GenomesOptions(dims=(1_000,), generations=1, repeats=1), log=lambda line: None)


def test_cells_that_do_not_fit_are_skipped_with_the_reason(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "available_bytes", lambda: 1 << 20)
    code = cli_main(["bench", "genomes", "--dims", "1e3", "--repeats", "1", "--generations", "1",
                     "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.count("skipped: needs about") == 3
    assert (tmp_path / "genomes.json").exists()


def test_estimate_grows_with_the_genome_but_not_for_seeded_rows():
    one, two = (bench.estimated_bytes(g, 10**8, GenomesOptions(), 2) for g in ("dense", "seeded"))
    assert one > two > 3 * 4 * 10**8   # both hold the bases; dense also archive and batch
    assert bench.record_bytes(100, np.float32) == bench.record_bytes(10**8, np.float64) == 32


_FAILING_RANK = """
from mpievo.comm import Communicator, abort_on_error
from mpievo.bench import genomes as bench

comm = Communicator()
if comm.rank == 1:
    def fail(self, genomes):
        raise RuntimeError("injected on rank 1")
    bench.MergeDistance.__call__ = fail
with abort_on_error():
    bench.bench_genomes(comm, bench.GenomesOptions(dims=(1000,), generations=1, repeats=1))
"""


def test_a_failing_rank_aborts_the_job_instead_of_hanging(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "fail.py"
    script.write_text(_FAILING_RANK)
    done = subprocess.run([sys.executable, "-m", "mpievo", "launch", "-n", "2", "--", sys.executable,
                           str(script)], capture_output=True, text=True, timeout=90)
    assert done.returncode != 0
    assert "mpievo: rank 1 failed: RuntimeError: injected on rank 1" in done.stdout + done.stderr


def test_the_device_option_parses_and_rejects_other_values(capsys):
    from mpievo.cli.main import build_parser

    assert build_parser().parse_args(["bench", "genomes", "--device", "cuda"]).device == "cuda"
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["bench", "genomes", "--device", "gpu"])
    assert done.value.code == 2
    assert "--device: expected one of cpu, cuda, got 'gpu'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"bench.genomes.device: expected one of \['cpu', 'cuda'\], got str 'gpu'"):
        GenomesOptions(device="gpu")


def test_device_cuda_without_a_gpu_is_refused(monkeypatch, capsys):
    from mpievo.evo import device

    monkeypatch.setattr(device, "cuda_usable", lambda: False)
    assert cli_main(["bench", "genomes", "--device", "cuda", "--dims", "1e3"]) == 2
    assert "--device cuda: expected a CUDA GPU (or NUMBA_ENABLE_CUDASIM=1), got none" in capsys.readouterr().err


def test_device_cells_that_do_not_fit_a_gpu_are_skipped(monkeypatch):
    # 1e9 float32 genomes (4 GB), 140 GB free on the GPU: one rank's dense islands (its two
    # archives and batches, the GA's box, the bases) fit, not two ranks'; two ranks' seeded
    # materialising fits
    monkeypatch.setattr(bench, "available_bytes", lambda: 1 << 50)
    monkeypatch.setattr(bench, "gpu_memory", lambda: (0, 140 * 10**9))
    cuda = GenomesOptions(device="cuda")
    assert bench._too_large(SelfComm(), "dense", 10**9, cuda, sharing=1) is None
    assert bench._too_large(SelfComm(), "seeded", 10**9, cuda, sharing=2) is None
    reason = bench._too_large(SelfComm(), "dense", 10**9, cuda, sharing=2)
    assert reason == "needs about 211.2 GB on a GPU (2 rank(s) on it), 80% of the 140.0 GB free"
    # the host keeps no archive for device islands: dense 1e9 fits a node it would not on the host
    monkeypatch.setattr(bench, "available_bytes", lambda: 60 * 10**9)
    assert bench._too_large(SelfComm(), "dense", 10**9, cuda, sharing=1) is None
    assert "on the node" in bench._too_large(SelfComm(), "dense", 10**9, GenomesOptions(), sharing=0)


def test_gpu_columns_are_the_peak_over_phases_against_the_use_before():
    columns = gpu_columns(SelfComm(), {"init": 5_000, "breed": 9_000, "check": 7_000}, 2_000, 123)
    assert columns == {"gpu_need_bytes": 123, "gpu_base_bytes": 2_000, "gpu_peak_bytes": 9_000,
                       "gpu_cell_bytes": 7_000, "gpu_phases": {"init": 5_000, "breed": 9_000, "check": 7_000}}
    # the simulator tells no memory: only the estimate
    assert gpu_columns(SelfComm(), {"init": None}, None, 123) == {"gpu_need_bytes": 123}


def test_release_pending_frees_the_memory_managers_queued_frees(monkeypatch):
    # numba-cuda queues device-memory frees in the memory manager, streams' and events' in
    # the context: a cell must start with both flushed, or the last cell's genomes are
    # freed during it and its GPU column reads negative (seen on an H100)
    from numba import cuda

    from mpievo.bench import genomes_device as bench_genomes_device

    flushed = []

    class Queue:
        def __init__(self, name):
            self.name = name

        def clear(self):
            flushed.append(self.name)

    class Context:
        deallocations = Queue("context")

        class memory_manager:  # noqa: N801 (an attribute, as numba-cuda names it)
            deallocations = Queue("memory manager")

    monkeypatch.setattr(cuda, "current_context", lambda: Context())
    bench_genomes_device.release_pending()
    assert flushed == ["memory manager", "context"]
    # a foreign memory manager without the queue, and the simulator's context without any
    Context.memory_manager = object()
    flushed.clear()
    bench_genomes_device.release_pending()
    assert flushed == ["context"]


def test_an_encoding_the_islands_refuse_is_skipped_with_their_reason(monkeypatch, tmp_path):
    from mpievo.evo import device

    # the engine's own refusal: engine.device 'cuda' where numba sees no GPU
    monkeypatch.setattr(device, "cuda_usable", lambda: False)
    reason = bench._refusal(SelfComm(), "seeded", GenomesOptions(device="cuda"))
    assert reason.startswith("expected a CUDA GPU for engine.device 'cuda', got none")
    assert bench._refusal(SelfComm(), "seeded", GenomesOptions()) is None
    row = bench._cell_or_skip(SelfComm(), "delta", 1_000, GenomesOptions(device="cuda"), tmp_path, reason, 1)
    assert row == {"genome": "delta", "dim": 1_000, "skipped": f"refused: {reason}"}
