"""``mpievo plan``: the cost model's bytes against real runs, its time, and the design scenario."""

import json
import pickle

import numpy as np
import pytest

from mpievo.cli.main import main as cli_main
from mpievo.plan.scenario import GPUS, ITEMSIZE, NODES, PARAMS, Scenario, figures, layout
from mpievo.plan.timing import Constants, Cost, Link, model_rows, predict_seconds
from mpievo.plan.traffic import Layout, run_states, traffic
from mpievo.plan.workloads import SCHEMES, SchemesOptions, Workload, measure

CONSTANTS = {"source": "test", "cores": 64, "engine": {"100": {"row_s": 0.0, "breed_s": 0.0}},
             "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12}}


@pytest.mark.mpi
def test_bytes_are_exact_for_every_scheme_in_a_real_run(world):
    """Every scheme run for real on this stage's ranks (P = 1, 2 and 4 in tests/run.sh; at
    P = 1 every scheme is the island run), its bytes predicted by the model. Whether the
    model's time holds on a machine is what `mpievo bench schemes` checks (a benchmark)."""
    size = world.Get_size()
    options = SchemesOptions(ps=(1,), islands=4, costs_ms=(0.0,), dims=(100,), budget=128, fast_factor=1,
                             sweeps=1)
    constants = Constants.from_dict(CONSTANTS)
    for scheme in SCHEMES if size > 1 else ("island",):
        row = measure(Workload(0.0, "none", 100), scheme, options)
        assert model_rows([row], options.interval, constants) == [], (scheme, size)
        assert (row["generations"], row["evaluations"]) == (3, 128)     # a migration at generation 2
        migration = row["bytes_per_generation_by_purpose"].get("migration", 0)
        if scheme == "island" and size > 1 or scheme == "hybrid" and size >= 4:
            assert migration > 0, (scheme, size)
        if scheme == "replicated" and size > 1:
            assert row["model_bytes_per_generation"] > 0


@pytest.mark.mpi(min_size=2)
def test_evaluator_breeding_bytes_are_exact_in_a_real_run(world):
    """hybrid with run.breed = "evaluator" at the counter kernels' size, run for real: the
    model's bytes (generation 0's rows, then counts and fitness only). At 2 ranks only:
    rows of 1e5 genes cost seconds at 4 ranks on 2 cores, and the groups' bytes at 4 are
    the by-hand test's."""
    from mpievo.evo.operators import COUNTER_DIM

    size = world.Get_size()
    if size != 2:
        pytest.skip("at 2 ranks only (see the docstring)")
    options = SchemesOptions(ps=(1,), islands=size, costs_ms=(0.0,), dims=(COUNTER_DIM,), large_dim=COUNTER_DIM,
                             large_budget=4 * size, sweeps=1)
    row = measure(Workload(0.0, "none", COUNTER_DIM), "hybrid_evaluator", options)
    assert model_rows([row], options.interval, Constants.from_dict(CONSTANTS)) == []
    sent = row["bytes_per_generation_by_purpose"]["evaluation"] * row["generations"]
    first = size * COUNTER_DIM * 4          # generation 0: one row of each island's 2 shipped, then no rows
    assert first < sent < first + 1024 and "breeding" in row["bytes_per_generation_by_purpose"]


def test_evaluator_breeding_bytes_by_hand():
    """A bred batch: each non-leader rank sends its block's counts and fitness (8 bytes
    each), no rows; generation 0 and a cut batch as the model says."""
    base = dict(ranks=4, islands=2, dim=10, capacity=4, batch=4, ranks_per_island=4, generations=2)
    bred, led = (traffic(Layout("hybrid", breed=b, **base)) for b in ("evaluator", "leader"))
    later = [m for m in bred.messages if m.purpose == "evaluation" and m.nbytes == 16]
    assert len(later) == 2 * 2 * 3 and all(m.dst == 0 for m in later)    # 2 generations x 2 islands x 3 ranks
    first = [m for m in led.messages if m.purpose == "evaluation"][:9]       # generation 0's first batch: rows
    assert bred.messages[:9] == first
    # a batch cut to 2 of its 4 rows: rank 1 sends counts and fitness, ranks 2 and 3 counts only
    cut = traffic(Layout("hybrid", breed="evaluator", **dict(base, generations=None, budget=12)))
    assert [m.nbytes for m in cut.messages if m.purpose == "evaluation" and m.nbytes < 100][-3:] == [16, 8, 8]


def test_island_migration_bytes_by_hand():
    lay = Layout("island", ranks=2, islands=4, dim=10, capacity=8, batch=8, interval=2, emigrants=3,
                 generations=4)
    t = traffic(lay)
    # ring 0>1>2>3>0 over ranks {0,1},{2,3}: edges 1>2 and 3>0 cross; 2 migrations
    per_edge = (8 + 32 * 3) + 3 * 10 * 4 + 8 * (8 + 1)
    assert t.migrations == [2, 4]
    assert t.by_purpose() == {"migration": 2 * 2 * per_edge}


def test_centralized_sends_every_block_but_the_leaders():
    lay = Layout("centralized", ranks=4, islands=2, dim=10, capacity=8, batch=6, generations=1)
    genomes = sum(m.nbytes for m in traffic(lay).messages if m.nbytes % 40 == 0 and m.src == 0)
    # generation 0: 8 rows -> blocks 2,2,2,2; generation 1: 6 rows -> 2,2,1,1; per island
    assert genomes == 2 * (6 + 4) * 40


def test_master_worker_blocks_and_summons_by_hand():
    lay = Layout("master_worker", ranks=3, islands=1, dim=10, capacity=9, batch=10, generations=1)

    def sent(obj):      # send_object: a header of 8 bytes per part, the pickle, its arrays' data
        buffers = []
        body = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        return 8 * (1 + len(buffers)) + len(body) + sum(b.raw().nbytes for b in buffers)

    # 2 workers: blocks of ceil(rows / 8) = 2 rows out, their fitness back; 9 rows, then 10
    blocks = sum(sent(("evaluate", np.zeros((n, 10), np.float32))) + sent(np.zeros(n))
                 for n in [2, 2, 2, 2, 1] + [2] * 5)
    # the workers serve the whole run: each is summoned once, at its end, with the last state
    summons = 2 * sent(("release", {"kind": "finish", "reason": "generations",
                                    "run_state": run_states(lay, 1)[1][-1]}))
    assert traffic(lay).by_purpose() == {"evaluation": blocks + summons}


def test_master_worker_steady_waits_only_where_its_queue_drains_in_the_model():
    constants = Constants.from_dict(CONSTANTS)
    shape = dict(ranks=3, islands=2, dim=100, capacity=2, batch=2, generations=3)
    generational, steady = (predict_seconds(Layout("master_worker", evaluation=e, **shape), constants,
                                            Cost(0.01, "sleep"))["wall_s"] for e in ("generational", "steady"))
    # 2 workers, 2 rows per island: the same 0.02 s per generation either way (sleep: no variance) ...
    assert generational == pytest.approx(steady) == pytest.approx(4 * 0.02)
    shape["generations"] = 8
    vary = [predict_seconds(Layout("master_worker", evaluation=e, **shape), constants, Cost(0.01, "vary"))
            ["wall_s"] for e in ("generational", "steady")]
    assert vary[1] < 0.95 * vary[0]     # ... but steady never waits for one island's slower row


def test_time_of_a_sleep_workload_by_hand():
    constants = Constants.from_dict(CONSTANTS)
    lay = Layout("island", ranks=2, islands=4, dim=100, capacity=8, batch=8, interval=2, generations=3)
    # each rank evaluates 2 islands x 8 rows per generation, generation 0 included
    assert predict_seconds(lay, constants, Cost(0.01, "sleep"))["wall_s"] == pytest.approx(4 * 16 * 0.01)
    hybrid = Layout("hybrid", ranks=4, islands=2, dim=100, capacity=8, batch=8, ranks_per_island=2,
                    generations=3)
    # a group of 2 splits each batch 4 + 4: each leader waits 1 island x 4 rows per generation
    assert predict_seconds(hybrid, constants, Cost(0.01, "sleep"))["wall_s"] == pytest.approx(4 * 4 * 0.01)


def test_scenario_table(capsys):
    assert cli_main(["plan", "--scenario", "design", "--inter-node-gbps", "25"]) == 0
    out = capsys.readouterr().out
    for line in ("| centralized, mpievo", "| hybrid, mpievo seeded genomes (recipes of 800 B", "inter-node 25 Gb/s",
                 "| centralized, the study's assertion | 96 GB", "| hybrid, the study's assertion | 0.01 GB",
                 "Where the study's figures"):
        assert line in out
    # steady state of mpievo's centralized: 7 of each batch's 8 children shipped, 4 islands
    t = traffic(layout("centralized"))
    later = sum(m.nbytes for m in t.messages if m.nbytes == PARAMS * ITEMSIZE) - 4 * 15 * PARAMS * ITEMSIZE
    assert later / t.generations == 4 * 7 * PARAMS * ITEMSIZE
    # seeded hybrid: between nodes only one migration, 4 ring edges of 2 recipes (records,
    # recipes of 8 * (4 bases + 3 * 32 terms) bytes, hashes)
    assert traffic(layout("hybrid", seeded=True)).by_link()["inter"] == 4 * ((8 + 32 * 2) + 2 * 800 + 8 * 17)
    # its leaders breed recipes; each GPU materialises its own child before evaluating it
    seeded = figures(layout("hybrid", seeded=True), Scenario().constants(seeded=True))
    dense = figures(layout("hybrid"), Scenario().constants())
    assert seeded["utilisation"] > 10 * dense["utilisation"] and seeded["bytes"] < 1e5
    assert Scenario(inter_gbps=25).constants().inter.bandwidth_Bps == 25e9 / 8
    assert NODES * GPUS == layout("hybrid").ranks
    # the new path's rows next to today's, and its placements side by side
    rows = out.splitlines()
    for today, new in (("| hybrid, mpievo (dense genomes", "| hybrid, new path: dense"),
                       ("| hybrid, mpievo seeded genomes", "| hybrid, new path: seeded")):
        at = [i for i, line in enumerate(rows) if line.startswith(today)]
        assert at and rows[at[0] + 1].startswith(new), (today, new)
    assert sum(line.startswith(("| dense | ", "| seeded | ")) for line in rows) == 8       # 4 placements each
    assert "(chosen)" in out and "- dense: " in out and "- seeded: " in out
    # under today's rows, the projections: one at 2 islands per node of the study's batch for each genome,
    # and the smallest configurations that reach the targets
    projected = [line for line in rows if line.startswith("| projection, ")]
    assert [line.split(" of batch ")[0] for line in projected[:1]] == ["| projection, dense, 2 islands per node"]
    assert any("seeded, 2 islands per node of batch 8" in line and "reaches 97 %" in line for line in projected)
    assert any("dense" in line and "reaches 95 %" in line for line in projected)
    assert sum(line.startswith(("| dense, 2 islands | ", "| seeded, 2 islands | ")) for line in rows) == 8
    assert "The projected rows (marked projection" in out


@pytest.mark.heavy
def test_calibrate_and_layout_table(tmp_path, capsys):
    """The smallest real calibration (one genome size, 1 and 2 ranks; the default measures
    three sizes at 1, 2 and 4 ranks, minutes): every constant measured, then used."""
    out = tmp_path / "cal.json"
    assert cli_main(["plan", "--calibrate", "--dims", "1e2", "--calibrate-ranks", "1,2", "--out", str(out)]) == 0
    cal = json.loads(out.read_text())
    assert cal["intra"]["latency_s"] > 0 and cal["intra"]["bandwidth_Bps"] > 0
    assert sorted(cal["engine"]) == ["100"]
    assert all(v["row_s"] > 0 and v["breed_s"] > 0 and v["init_s"] >= 0 and v["record_s"] > 0
               for v in cal["engine"].values())
    assert {p: set(by) for p, by in cal["loop"].items()} == {"1": {"island"}, "2": set(SCHEMES)}
    assert all(v["run_s"] >= 0 and v["step_s"] >= 0 for by in cal["loop"].values() for v in by.values())
    # ranks side by side, measured in the 2-rank job
    assert {p: sorted(by) for p, by in cal["contention"].items()} == {"2": ["100"]}
    assert all(f >= 1.0 for by in cal["contention"].values() for f in by.values())
    with pytest.raises(SystemExit):
        cli_main(["plan", "--calibrate", "--dims", "1e2,x"])
    capsys.readouterr()
    assert cli_main(["plan", "--constants", str(out), "--cost-ms", "5"]) == 0
    table = capsys.readouterr().out
    assert all(f"| {s} |" in table for s in ("island", "hybrid", "centralized", "replicated"))
    assert cli_main(["plan"]) == 2
    assert Link(1e-6, 1e9).seconds(1000, 2) == pytest.approx(3e-6)
