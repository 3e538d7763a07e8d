"""The cost model's time terms by hand: engine interpolation, loop costs, cores, the bound."""

import pytest

from mpievo.bench.schemes_report import format_table
from mpievo.plan.traffic import Layout, bench_layout
from mpievo.plan.calibrate import loop_costs, loop_lengths
from mpievo.plan.timing import Constants, Cost, predict_seconds, time_outliers

ZERO = {"row_s": 0.0, "breed_s": 0.0, "init_s": 0.0, "record_s": 0.0}


def constants(cores=64, engine=None, loop=None) -> Constants:
    return Constants.from_dict({"cores": cores, "engine": engine or {"100": ZERO},
                                "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12}, "loop": loop or {}})


def test_engine_costs_interpolate_in_log_space_and_scale_per_gene_outside():
    c = constants(engine={"100": dict(ZERO, row_s=1e-5, breed_s=2e-5),
                          "1000000": dict(ZERO, row_s=1e-1, breed_s=2e-3)})
    assert c.child(10_000)["row_s"] == pytest.approx(1e-3)      # halfway in log dim: geometric mean
    assert c.child(10_000)["breed_s"] == pytest.approx(2e-4)
    assert c.child(100)["row_s"] == 1e-5
    assert c.child(10_000_000)["row_s"] == pytest.approx(1.0)   # above: per gene from 1e6
    assert c.child(10)["breed_s"] == pytest.approx(2e-6)        # below: per gene from 1e2


def test_initial_genomes_and_records_are_counted():
    c = constants(engine={"100": dict(ZERO, init_s=1e-3, record_s=1e-2)})
    lay = Layout("island", ranks=1, islands=2, dim=100, capacity=4, batch=4, interval=2, generations=3)
    # 2 islands x 4 initial genomes; records of 2 islands at generation 0, at the last and at the end
    assert predict_seconds(lay, c)["wall_s"] == pytest.approx(8 * 1e-3 + 3 * 2 * 1e-2)


def test_loop_costs_come_from_two_run_lengths():
    """Synthetic runs whose walls are the model's plus 3 ms + 1 ms per generation are
    decomposed back into run_s and step_s, per scheme and for one rank."""
    engine = {"100": dict(ZERO, row_s=1e-4, breed_s=1e-4)}
    rows = []
    for scheme, ranks in (("island", 1), ("hybrid", 2), ("master_worker_steady", 2)):
        for g in loop_lengths(100):
            row = {"scheme": scheme, "ranks": ranks, "ranks_per_island": ranks if scheme == "hybrid" else 1,
                   "islands": 4, "dim": 100, "capacity": 8, "budget": 4 * 8 * (g + 1), "generations": g}
            model = predict_seconds(bench_layout(row, interval=2), constants(engine=engine), loop=False)
            rows += [dict(row, wall_s=model["wall_s"] + 3e-3 + 1e-3 * g + noise) for noise in (1e-3, 0, 4e-4)]
    loop = loop_costs(rows, {"cores": 64, "engine": engine, "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12}})
    assert {p: set(by) for p, by in loop.items()} == {"1": {"island"}, "2": {"hybrid", "master_worker_steady"}}
    for by in loop.values():      # the fastest of each length's 3 runs: other work only adds time
        for costs in by.values():
            assert costs == {"run_s": pytest.approx(3e-3), "step_s": pytest.approx(1e-3)}


def test_loop_costs_are_taken_at_the_rank_count_else_stretched_from_the_nearest():
    loop = {"1": {"island": {"run_s": 0.5, "step_s": 0.25}}, "2": {"island": {"run_s": 1.0, "step_s": 0.5}},
            "4": {"island": {"run_s": 3.0, "step_s": 0.75}}}
    c = constants(cores=2, loop=loop)
    one, two, four, eight = (Layout("island", ranks=p, islands=8, dim=100, capacity=8, batch=8, generations=2)
                             for p in (1, 2, 4, 8))
    assert predict_seconds(one, c)["wall_s"] == pytest.approx(0.5 + 2 * 0.25)
    assert predict_seconds(two, c)["wall_s"] == pytest.approx(1.0 + 2 * 0.5)
    assert predict_seconds(four, c)["wall_s"] == pytest.approx(3.0 + 2 * 0.75)
    # 8 ranks on 2 cores: twice 4 ranks' oversubscription
    assert predict_seconds(eight, c)["wall_s"] == pytest.approx(2 * (3.0 + 2 * 0.75))
    del loop["4"]
    assert predict_seconds(four, constants(cores=2, loop=loop))["wall_s"] == pytest.approx(2 * (1.0 + 2 * 0.5))
    steady = Layout("master_worker", ranks=2, islands=4, dim=100, capacity=8, batch=8, generations=2,
                    evaluation="steady")
    assert predict_seconds(steady, c)["wall_s"] == pytest.approx(0.0, abs=1e-6)   # not calibrated


def test_a_steady_run_on_shared_cores_takes_at_least_its_cpu_work_over_the_cores():
    """4 ranks on 2 cores, steady: the master breeds while 3 workers evaluate, so every
    rank is busy; the cores still do every child's breeding and row, 1 ms and 4 ms of CPU.
    Alone, the stretched terms overlap to less: a 2-generation segment of 64 rows would
    take 16 ms of unoverlapped breeding plus max(56 x 2 ms, 64 x 4 ms x 1.5 / 3) = 144 ms."""
    c = constants(cores=2, engine={"100": dict(ZERO, row_s=4e-3, breed_s=1e-3)})
    generations = 6
    steady = Layout("master_worker", ranks=4, islands=4, dim=100, capacity=8, batch=8, interval=2,
                    generations=generations, evaluation="steady")
    children, rows = 32 * generations, 32 * (generations + 1)
    cpu_over_cores = (1e-3 * children + 4e-3 * rows) / 2
    wall = predict_seconds(steady, c)["wall_s"]
    assert wall >= cpu_over_cores
    # generation 0: 32 rows in blocks of 11, 11 and 10 at 1.5x; per segment: the first
    # batch's 8 children bred alone (at the model's stretch of 2), then the rest of the CPU
    # work over both cores
    assert wall == pytest.approx(11 * 4e-3 * 1.5 + generations // 2 * (16e-3 + (56e-3 + 256e-3) / 2))


def test_master_worker_workers_share_the_cores_its_master_yields():
    """4 ranks on 2 cores: the island scheme's burning ranks run at half speed, master_worker's
    3 workers at 2/3 (the master waits in a yielding poll)."""
    c = constants(cores=2)
    shape = dict(ranks=4, islands=1, dim=100, capacity=3, batch=3, generations=2)
    burn = Cost(0.01, "burn")
    # blocks of 1 row, one per worker: each generation is one row's burn
    assert predict_seconds(Layout("master_worker", **shape), c, burn)["wall_s"] == pytest.approx(3 * 0.015)
    assert predict_seconds(Layout("master_worker", **shape), c, Cost(0.01, "sleep"))["wall_s"] == \
        pytest.approx(3 * 0.01)
    island = Layout("island", ranks=4, islands=4, dim=100, capacity=3, batch=3, generations=2)
    assert predict_seconds(island, c, burn)["wall_s"] == pytest.approx(3 * 3 * 0.02)
    # a batch of 2 rows is 2 blocks: the third worker waits without one and yields, so
    # the 2 with a block have a core each
    two = dict(shape, capacity=2, batch=2)
    assert predict_seconds(Layout("master_worker", **two), c, burn)["wall_s"] == pytest.approx(3 * 0.01)
    # steady queues the blocks of every island's batches at once, so all 3 workers run (2/3
    # speed): generation 0's 4 blocks put 2 on one worker, generations 1-2's 8 blocks 3
    steady = Layout("master_worker", **dict(two, islands=2), evaluation="steady")
    assert predict_seconds(steady, c, burn)["wall_s"] == pytest.approx((2 + 3) * 0.015)


def test_group_ranks_without_rows_leave_their_core():
    """Centralized, 4 ranks on 2 cores, batches of 2 rows: 2 ranks evaluate, 2 wait and
    yield, so a row costs its own time; a batch of 4 rows keeps 4 ranks busy (half speed)."""
    c = constants(cores=2, engine={"100": dict(ZERO, row_s=0.01)})
    two = Layout("centralized", ranks=4, islands=1, dim=100, capacity=2, batch=2, generations=2)
    assert predict_seconds(two, c)["wall_s"] == pytest.approx(3 * 0.01)
    four = Layout("centralized", ranks=4, islands=1, dim=100, capacity=4, batch=4, generations=2)
    assert predict_seconds(four, c)["wall_s"] == pytest.approx(3 * 0.02)
    # replicated: ranks without rows wait in the fitness all-gather (and yield) as well,
    # but every rank breeds its replica's children, so breeding keeps all 4 busy
    bred = constants(cores=2, engine={"100": dict(ZERO, row_s=0.01, breed_s=0.005)})
    replicated = Layout("replicated", ranks=4, islands=1, dim=100, capacity=2, batch=2, generations=2)
    assert predict_seconds(replicated, bred)["wall_s"] == pytest.approx(3 * 0.01 + 2 * 2 * 0.005 * 2)
    replicated4 = Layout("replicated", ranks=4, islands=1, dim=100, capacity=4, batch=4, generations=2)
    assert predict_seconds(replicated4, bred)["wall_s"] == pytest.approx(3 * 0.02 + 2 * 4 * 0.005 * 2)


def test_only_the_leaders_breed_under_the_leader_schemes():
    """4 ranks on 2 cores, breeding alone: centralized's one leader breeds while the
    other 3 wait for its order and yield (its own speed), hybrid's 2 leaders have a core
    each, and the island scheme's 4 ranks breed at once (half speed)."""
    c = constants(cores=2, engine={"100": dict(ZERO, breed_s=0.01)})

    def wall(scheme, **kw):
        return predict_seconds(Layout(scheme, ranks=4, islands=4, dim=100, capacity=2, batch=2,
                                      generations=3, **kw), c)["wall_s"]

    # 3 generations of 2 children per island, the leader's islands one after another
    assert wall("centralized") == pytest.approx(3 * 4 * 2 * 0.01)
    assert wall("hybrid", ranks_per_island=2) == pytest.approx(3 * 2 * 2 * 0.01)
    assert wall("island") == pytest.approx(3 * 2 * 0.01 * 2)


def test_evaluator_breeding_spreads_the_breeding_over_the_group():
    """run.breed = "evaluator": each rank of a group breeds its own block of every batch
    (after generation 0) and evaluates it; the leader only draws the decisions."""
    c = constants(cores=2, engine={"100": dict(ZERO, breed_s=0.01, row_s=0.001)})

    def wall(breed, cores_c=c):
        return predict_seconds(Layout("hybrid", ranks=2, islands=2, dim=100, capacity=2, batch=2, generations=3,
                                      ranks_per_island=2, breed=breed), cores_c, Cost(0.02, "sleep"))["wall_s"]

    first = 2 * 0.021           # generation 0 goes the leader's way: 2 islands, a row a rank of each
    # 3 generations x 2 islands: the leader breeds 2 children, then both ranks evaluate one each
    assert wall("leader") == pytest.approx(3 * 2 * (2 * 0.01 + 0.021) + first)
    # each rank breeds its own child beside the other's: one child's breeding per island and generation
    assert wall("evaluator") == pytest.approx(3 * 2 * (0.01 + 0.021) + first)
    # 4 ranks in groups of 2 (an island each) on 2 cores: 4 ranks breed at once, each at half speed
    four = predict_seconds(Layout("hybrid", ranks=4, islands=2, dim=100, capacity=2, batch=2, generations=3,
                                  ranks_per_island=2, breed="evaluator"), c, Cost(0.02, "sleep"))["wall_s"]
    assert four == pytest.approx(3 * (2 * 0.01 + 0.002 + 0.02) + (0.002 + 0.02))
    with pytest.raises(ValueError, match="breed: expected 'leader' with scheme 'island'"):
        Layout("island", ranks=2, islands=2, dim=100, capacity=2, batch=2, generations=3, breed="evaluator")


def test_outliers_name_each_run_once_and_the_table_marks_them():
    base = {"workload": "cost 0, 100 genes", "wall_s": 0.1, "loadavg_1min": 1.5, "mode": "none",
            "evals_per_s": 1.0, "speedup": 1.0, "utilisation_mean": 0.5, "utilisation_min": 0.5,
            "utilisation_max": 0.5, "bytes_per_generation": 0.0, "best_fitness": 1.0}
    rows = [dict(base, scheme=s, ranks=1, model_wall_s=0.05, model_time_error=-0.5) for s in ("island", "hybrid")]
    rows += [dict(base, scheme="hybrid", ranks=2, model_wall_s=0.124, model_time_error=0.24),
             dict(base, scheme="island", ranks=2, model_wall_s=0.126, model_time_error=0.26)]
    assert time_outliers(rows) == [
        "cost 0, 100 genes, every scheme, P=1: expected the model's 0.05 s within 25 % of the measured "
        "wall time, got 0.1 s (-50 %, load average 1.50)",
        "cost 0, 100 genes, island, P=2: expected the model's 0.126 s within 25 % of the measured "
        "wall time, got 0.1 s (+26 %, load average 1.50)"]
    result = {"rows": rows, "conditions": {"options": {"ps": [1, 2], "capacity": 8, "budget": 192, "islands": 0,
                                                       "large_dim": 10**6, "large_capacity": 2, "large_budget": 32,
                                                       "interval": 2},
                                           "date_utc": "now", "cores": 2, "oversubscribed_p": [],
                                           "mpi_library": ["x"], "problem": "p"}}
    table = format_table(result)
    assert "| -50 % ! | +26 % ! |" in table and "| -50 % ! | +24 % |" in table


def test_engine_costs_come_from_one_rank_runs_at_two_lengths():
    """Runs whose walls and fitness times are the model's at known costs give those costs
    back, from each length's fastest run."""
    from mpievo.plan.calibrate import run_engine_costs

    true = {"row_s": 2e-3, "breed_s": 3e-4, "init_s": 1e-3, "record_s": 1e-3}
    base = {"cores": 2, "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12},
            "loop": {"1": {"island": {"run_s": 2e-3, "step_s": 1e-4}}}}
    measured = dict(base, engine={"100": ZERO, "100000": true})
    rows = []
    for g in (2, 8):
        row = {"scheme": "island", "ranks": 1, "ranks_per_island": 1, "islands": 4, "dim": 100_000,
               "capacity": 8, "budget": 4 * 8 * (g + 1), "generations": g, "evaluations": 4 * 8 * (g + 1)}
        wall = predict_seconds(bench_layout(row, interval=2), Constants.from_dict(measured))["wall_s"]
        rows += [dict(row, wall_s=wall, utilisation=[row["evaluations"] * true["row_s"] / wall])]
        # two runs slowed by other work on the machine, their fitness too: the fastest run counts
        rows += [dict(row, wall_s=1.5 * wall, utilisation=[2 * row["evaluations"] * true["row_s"] / (1.5 * wall)])] * 2
    # calibrated in-process costs (the stepping loop's) are what the runs correct
    stepped = dict(base, engine={"100": ZERO, "100000": dict(true, row_s=1e-3, breed_s=1e-4, init_s=5e-4)})
    got = run_engine_costs(rows, stepped)["100000"]
    assert got == {k: pytest.approx(v) for k, v in true.items()}


def test_contention_is_the_runs_side_by_side_against_the_same_run_alone():
    """Rank 0 makes the one-rank run alone, then every rank of the P-rank job at once:
    the mean of their fastest wall times against rank 0's fastest alone, beyond P / cores
    where the ranks outnumber the cores, at least 1."""
    from mpievo.plan.calibrate import contention, contention_runs

    assert contention_runs([100, 10**7]) == {100: (loop_lengths(100)[1], 3), 10**7: (1, 1)}
    two = {"100": {"alone": [0.3, 0.2, 0.25],                          # fastest 0.2
                   "together": [[0.25, 0.2, 0.3], [0.3, 0.24, 0.36]]},  # fastest 0.2, 0.24: 1.1
           "10000000": {"alone": [6.0], "together": [[7.2], [6.6]]}}    # 6.9 against 6: 1.15
    assert contention(two, 2, 2) == {"100": pytest.approx(1.1), "10000000": pytest.approx(1.15)}
    four = {"100": {"alone": [0.2], "together": [[0.4]] * 4},            # 2x: 4 ranks on 2 cores' own
            "10000000": {"alone": [6.0], "together": [[14.4]] * 4}}      # 2.4x: 1.2 beyond 2x
    assert contention(four, 4, 2) == {"100": 1.0, "10000000": pytest.approx(1.2)}
    assert contention(four, 4, 8)["100"] == pytest.approx(2.0)      # on 8 cores: all contention
    faster = {"100": {"alone": [0.3], "together": [[0.25], [0.28]]}}    # faster together: none
    assert contention(faster, 2, 2) == {"100": 1.0}


def test_ranks_at_once_are_stretched_by_their_counts_contention():
    c = Constants.from_dict({"cores": 2, "engine": {"100": ZERO}, "intra": {"latency_s": 0.0, "bandwidth_Bps": 1.0},
                             "contention": {"2": {"100": 1.1, "10000000": 1.15},
                                            "4": {"100": 1.0, "10000000": 1.2}}})
    assert c.stretch(1, 10**7) == 1.0                                   # alone: none
    assert c.stretch(2, 10**7) == pytest.approx(1.15)                  # each has a core, still slower
    assert c.stretch(3, 100) == pytest.approx(1.5 * 1.1)               # 3 ranks: 2 ranks' contention
    assert c.stretch(4, 100) == 2.0 and c.stretch(4, 10**7) == pytest.approx(2.4)
    assert c.stretch(8, 10**9) == pytest.approx(4.8)                   # beyond: the nearest calibrated
    assert c.stretch(4, 10**5) == pytest.approx(2 * 1.2 ** 0.6)        # 1e5 is 3/5 of the way in log dim
    # a calibration of before 2026-11-27 measured it with more ranks than cores only
    old = Constants.from_dict({"cores": 2, "engine": {"100": ZERO}, "intra": {"latency_s": 0.0, "bandwidth_Bps": 1.0},
                               "oversubscribed": {"10000000": 1.2}})
    assert old.stretch(2, 10**7) == 1.0 and old.stretch(4, 10**7) == pytest.approx(2.4)


def test_two_ranks_with_a_core_each_pay_their_contention():
    """An island run at 2 ranks on 64 cores whose time is all engine work takes the
    calibrated contention longer than without it."""
    engine = {"100000": dict(ZERO, row_s=2e-3, breed_s=5e-4, init_s=1e-3, record_s=1e-3)}
    lay = Layout("island", ranks=2, islands=4, dim=100_000, capacity=8, batch=8, generations=6)
    free = predict_seconds(lay, constants(engine=engine))["wall_s"]
    busy = Constants.from_dict({"cores": 64, "engine": engine, "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12},
                                "contention": {"2": {"100000": 1.25}}})
    assert predict_seconds(lay, busy)["wall_s"] == pytest.approx(1.25 * free)


def test_a_burning_child_is_stretched_by_the_shared_cores_only():
    """A burn child spins for its seconds of CPU time: 2 ranks with a core each pay the
    contention on the fitness row but not on the burn; 4 ranks on 2 cores share them
    (x2), also for master_worker_steady's overlap bound."""
    engine = {"100": dict(ZERO, row_s=1e-3)}
    contended = {"cores": 2, "engine": engine, "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12},
                 "contention": {"2": {"100": 1.5}, "4": {"100": 1.5}}}
    c = Constants.from_dict(contended)
    burn = Cost(0.01, "burn")
    two = Layout("island", ranks=2, islands=2, dim=100, capacity=4, batch=4, generations=2)
    # 3 batches of 4 rows per rank: rows 1 ms x 1.5, burns 10 ms
    assert predict_seconds(two, c, burn)["wall_s"] == pytest.approx(3 * 4 * (1.5e-3 + 0.01))
    four = Layout("island", ranks=4, islands=4, dim=100, capacity=4, batch=4, generations=2)
    assert predict_seconds(four, c, burn)["wall_s"] == pytest.approx(3 * 4 * (2 * 1.5e-3 + 2 * 0.01))
    # steady, 4 ranks on 2 cores: at least the cores' CPU work, 0 breeding here
    steady = Layout("master_worker", ranks=4, islands=2, dim=100, capacity=2, batch=2, generations=2,
                    evaluation="steady")       # as without contention (the master_worker test above)
    no_row = Constants.from_dict(dict(contended, engine={"100": ZERO}))
    assert predict_seconds(steady, no_row, burn)["wall_s"] == pytest.approx((2 + 3) * 0.015)


def test_engine_costs_are_scaled_to_the_sweeps_own_one_rank_run():
    """A calibration that saw breeding and fitness twice as slow as the sweep's minutes:
    the row cost taken from the sweep's one-rank cost-0 run (its time inside the
    fitness), the other costs scaled to its wall time, the model predicts the other runs
    as the true costs do; that run (every scheme's copy of it) is marked fitted."""
    from mpievo.plan.calibrate import anchor_engine_costs

    true = {"row_s": 2e-3, "breed_s": 3e-4, "init_s": 1e-3, "record_s": 1e-3}
    base = {"cores": 64, "intra": {"latency_s": 1e-6, "bandwidth_Bps": 1e10},
            "loop": {"1": {"island": {"run_s": 2e-3, "step_s": 1e-4}},
                     "2": {"island": {"run_s": 3e-3, "step_s": 2e-4}}}}
    truth = Constants.from_dict(dict(base, engine={"100000": true}))
    stale = Constants.from_dict(dict(base, engine={"100000": dict({k: 2 * v for k, v in true.items()},
                                                                 row_s=5 * true["row_s"])}))
    rows = []
    for ranks, scheme, mode in ((1, "island", "none"), (1, "hybrid", "none"), (2, "island", "none")):
        row = {"scheme": scheme, "ranks": ranks, "ranks_per_island": 1, "islands": 4, "dim": 100_000,
               "capacity": 8, "budget": 96, "generations": 2, "evaluations": 96, "mode": mode, "cost_ms": 0.0}
        row["wall_s"] = predict_seconds(bench_layout(row, interval=2), truth)["wall_s"]
        row["utilisation"] = [96 * true["row_s"] / row["wall_s"]] * ranks   # time inside the fitness
        rows.append(row)
    anchored, scales = anchor_engine_costs(stale, rows, 2)
    assert scales == {"100000": pytest.approx(0.5)}
    assert anchored.engine[100_000] == {k: pytest.approx(v) for k, v in true.items()}
    assert [r["model_fitted"] for r in rows] == [True, True, False]
    other = bench_layout(rows[2], interval=2)
    assert predict_seconds(other, anchored)["wall_s"] == pytest.approx(rows[2]["wall_s"])
    assert predict_seconds(other, stale)["wall_s"] > 1.5 * rows[2]["wall_s"]
    # a model without engine costs has nothing to scale
    zero = Constants.from_dict(dict(base, engine={"100000": ZERO}))
    assert anchor_engine_costs(zero, rows, 2)[1] == {}


def test_calibrations_merge_into_each_constants_median():
    """The bench calibrates before each sweep: the model's constants are each one's median
    over them (a slow moment in one calibration is outvoted), a count stays a count, a
    key that one calibration lacks is left out, and the source names the span."""
    from mpievo.plan.calibrate import median_calibration

    def calibration(hour, step_s, breed_s, extra=None):
        return {"source": f"mpievo plan --calibrate, 2026-11-27 0{hour}:00 UTC", "cores": 2,
                "engine": {"100": {"row_s": 1e-5, "breed_s": breed_s}},
                "intra": {"latency_s": 1e-6, "bandwidth_Bps": 1e10},
                "loop": {"4": {"centralized": {"run_s": 0.0, "step_s": step_s}}}, **(extra or {})}

    merged = median_calibration([calibration(1, 0.62e-3, 3e-5), calibration(2, 2.30e-3, 1e-5, {"contention": {}}),
                                 calibration(3, 1.22e-3, 2e-5)])
    assert merged["loop"]["4"]["centralized"]["step_s"] == pytest.approx(1.22e-3)
    assert merged["engine"]["100"] == {"row_s": 1e-5, "breed_s": pytest.approx(2e-5)}
    assert merged["cores"] == 2 and isinstance(merged["cores"], int) and "contention" not in merged
    assert merged["source"] == "median of 3 calibrations (mpievo plan --calibrate, 2026-11-27 01:00 UTC .. 2026-11-27 03:00 UTC)"
    Constants.from_dict(merged)         # the model takes it
    # one calibration is itself; none is refused
    single = calibration(1, 1e-3, 1e-5)
    assert median_calibration([single]) is single
    with pytest.raises(ValueError, match="expected at least 1 calibration, got none"):
        median_calibration([])
