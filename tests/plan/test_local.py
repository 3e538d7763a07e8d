"""The cost model of children bred where they are evaluated (mpievo.plan.local), by hand."""

from dataclasses import replace

import pytest

from mpievo.plan.local import (Island, Node, busiest_share, checkpoint_seconds, choose, device_link_bytes,
                               evaluation_seconds, fits, generation_seconds, island_utilisation, make_seconds,
                               run_seconds, survivor_seconds, utilisation)
from mpievo.plan.scenario import Scenario, local_figures, migration_seconds, reach

G = 3e9                                      # the study's genome: 1.5e9 bf16 parameters
DENSE = Island(genome_bytes=G, row_bytes=G, capacity=16, batch=8, eval_s=0.1, breed_Bps=141e9)
SEEDED = Island(genome_bytes=G, row_bytes=800, capacity=16, batch=8, eval_s=0.1, breed_Bps=141e9, bases=4)
NODE = Node()     # 8 GPUs, 1 TB/s device traffic, NVLink 400 GB/s, PCIe 50 GB/s, host 400 GB/s, 80 GB


def test_making_a_child_is_its_kernel_or_its_traffic_by_hand():
    # replica: 9 GB of traffic at 1 TB/s (9 ms) is less than 3 GB of child at 141 GB/s
    assert make_seconds(NODE, DENSE, "replica") == pytest.approx(G / 141e9)
    fast = Island(G, G, 16, 8, 0.1, breed_Bps=1e12)      # a kernel at memory speed: the traffic bounds it
    assert make_seconds(NODE, fast, "replica") == pytest.approx(9e9 / 1e12)
    # host: 6 GB of parents over one GPU's PCIe (120 ms); 8 GPUs x 6 GB from 400 GB/s host memory also 120 ms
    assert make_seconds(NODE, DENSE, "host") == pytest.approx(6e9 / 50e9)
    # seeded host: 4 bases (12 GB) over PCIe, 240 ms
    assert make_seconds(NODE, SEEDED, "host") == pytest.approx(12e9 / 50e9)
    # seeded peer: each GPU reads 7/8 of the 12 GB of bases from the others over NVLink
    assert make_seconds(NODE, SEEDED, "peer") == pytest.approx(12e9 * 7 / 8 / 400e9)
    # dense peer: at least the remote parents' bytes (7/8 of 6 GB) and the busiest GPU's rows served
    share = busiest_share(NODE, DENSE)
    assert 1.0 <= share <= 16
    assert make_seconds(NODE, DENSE, "peer") == pytest.approx(max(G / 141e9, 6e9 * 7 / 8 / 400e9,
                                                                  share * G / 400e9))


def test_the_pipeline_by_hand():
    # one child per rank: nothing to make beside an evaluation
    assert evaluation_seconds(DENSE, 0.02, 1) == pytest.approx(0.12)
    # 3 children, make 70 ms with half the GPU beside a 100 ms evaluation: 35 ms of make left after it
    assert evaluation_seconds(DENSE, 0.07, 3) == pytest.approx(0.07 + 2 * (0.1 + 0.02) + 0.1)
    # a core or device of its own: the steady state is max(make, evaluate), plus the fill
    own = Island(G, G, 16, 24, 0.1, 141e9, spare=1.0)
    assert evaluation_seconds(own, 0.07, 3) == pytest.approx(0.07 + 3 * 0.1)
    assert evaluation_seconds(own, 0.15, 3) == pytest.approx(0.15 + 2 * 0.15 + 0.1)
    serial = Island(G, G, 16, 24, 0.1, 141e9, pipelined=False)
    assert evaluation_seconds(serial, 0.07, 3) == pytest.approx(3 * 0.17)
    with pytest.raises(ValueError, match="spare: expected a share of the device in"):
        Island(G, G, 16, 8, 0.1, 141e9, spare=1.5)


def test_survivors_rows_by_hand():
    # replica: 4 survivors broadcast, each GPU receives 4 x 7/8 x 3 GB over NVLink (26.25 ms); on its
    # device that is 10.5 GB written + its own survivor copied (6 GB of traffic) at 1 TB/s (16.5 ms)
    assert survivor_seconds(NODE, DENSE, "replica") == pytest.approx(4 * 7 / 8 * G / 400e9)
    # peer: the busiest breeder writes its one survivor into a row on another GPU
    assert survivor_seconds(NODE, DENSE, "peer") == pytest.approx(7 / 8 * G / 400e9)
    # host: over the breeder's PCIe link (60 ms)
    assert survivor_seconds(NODE, DENSE, "host") == pytest.approx(G / 50e9)
    # seeded archives hold recipes: one small message per survivor
    assert survivor_seconds(NODE, SEEDED, "replica") == pytest.approx(4 * 5e-6)
    # a checkpoint every 10 generations, 1 survivor each: 10 changed rows over PCIe, per generation
    assert checkpoint_seconds(NODE, DENSE) == 0.0
    every = Island(G, G, 16, 8, 0.1, 141e9, survivors=1.0, checkpoint_every=10)
    assert checkpoint_seconds(NODE, every) == pytest.approx(10 * G / 50e9 / 10)
    # at most the whole archive changes
    assert checkpoint_seconds(NODE, Island(G, G, 16, 8, 0.1, 141e9, checkpoint_every=10)) == pytest.approx(
        16 * G / 50e9 / 10)


def test_seeded_generation_and_utilisation_by_hand():
    make = G / 141e9
    gather = 3 * 5e-6 + 64 / 400e9                  # log2(8) latencies, 8 bytes a child
    later = make + 0.1 + 4 * 5e-6 + gather
    assert generation_seconds(NODE, SEEDED, "replica")["seconds"] == pytest.approx(later)
    # generation 0: 16 initial genomes, 2 a GPU; the second made beside the first's evaluation
    first = make + 0.1 + 0.1 + 4 * 5e-6 + gather
    assert generation_seconds(NODE, SEEDED, "replica", 16)["seconds"] == pytest.approx(first)
    per_generation = (first + 50 * later) / 50
    assert run_seconds(NODE, SEEDED, "replica", 50) == pytest.approx(per_generation)
    # 16 + 50 x 8 evaluations of 0.1 s on 8 GPUs
    assert utilisation(8, 16, 8, 0.1, 50, per_generation) == pytest.approx(41.6 / (8 * 50 * per_generation))
    # the scenario's seeded row: that, plus one migration of recipes over 25 Gb/s per 50 generations
    # (each leader: 6 messages of 5 us and 2 x (72 + 1600 + 136) bytes)
    migration = 6 * 5e-6 + 2 * (72 + 1600 + 136) / 25e9 * 8
    assert migration_seconds(Scenario(), seeded=True) == pytest.approx(migration)
    row = local_figures(Scenario(), seeded=True)
    assert row["placement"] == "replica"
    assert row["seconds"] == pytest.approx(per_generation + migration / 50)
    assert row["utilisation"] == pytest.approx(41.6 / (8 * 50 * row["seconds"]))


def test_the_placement_is_chosen_by_the_model():
    # seeded: every GPU reads every base; a replica per GPU (18 GB) reads them locally
    assert choose(NODE, SEEDED, 50)[0] == "replica"
    # dense, 4 survivors a generation: broadcasting them to every replica costs more than peer reads
    best, seconds = choose(NODE, DENSE, 50)
    assert best == "peer" and seconds["peer"] < seconds["replica"]
    # 1 survivor a generation: the replica's local reads win
    assert choose(NODE, Island(G, G, 16, 8, 0.1, 141e9, survivors=1.0), 50)[0] == "replica"
    # a GPU of 40 GB cannot hold 16 rows of 3 GB and 2 buffers: the replica is out
    best, seconds = choose(Node(device_bytes=40e9), Island(G, G, 16, 8, 0.1, 141e9, survivors=1.0), 50)
    assert best == "peer" and seconds["replica"] is None


def test_rebuild_makes_the_survivors_again_on_every_gpu_by_hand():
    make = G / 141e9
    # dense: 4 survivors, 7/8 of them bred on other GPUs, each made again (3.5 makes), and the busiest
    # breeder's own survivor copied into its replica (3 GB read and written at 1 TB/s)
    assert survivor_seconds(NODE, DENSE, "rebuild") == pytest.approx(3.5 * make + 2 * G / 1e12)
    assert make_seconds(NODE, DENSE, "rebuild") == make_seconds(NODE, DENSE, "replica")
    assert device_link_bytes(NODE, DENSE, "rebuild") == 0.0 and device_link_bytes(NODE, DENSE, "replica") == 84e9
    # seeded rows are recipes: nothing to make again
    assert survivor_seconds(NODE, SEEDED, "rebuild") == survivor_seconds(NODE, SEEDED, "replica")
    # over NVLink 3.5 makes (75 ms) cost more than the broadcast (26 ms) or peer reads: peer wins; GPUs
    # linked at PCIe speed (50 GB/s) broadcast in 210 ms and read peers' parents in 105 ms: rebuild wins
    assert choose(NODE, DENSE, 50)[0] == "peer"
    assert choose(Node(peer_Bps=50e9), DENSE, 50)[0] == "rebuild"


def test_islands_sharing_the_node_by_hand():
    """2 islands in one queue: a round is both generations; each make is hidden beside the
    other island's evaluation, unless one island's chain (make, evaluate, rows) is longer."""
    two = Island(G, G, 16, 8, 0.1, 141e9, islands=2, survivors=1.0)
    make = G / 141e9
    parts = generation_seconds(NODE, two, "peer")
    # each GPU: 2 evaluations of 100 ms; 2 makes on the second stream, under its half of them
    assert parts["evaluate_s"] == pytest.approx(0.2)
    assert parts["cycle_s"] == pytest.approx(generation_seconds(NODE, replace(two, islands=1), "peer")["seconds"])
    assert parts["seconds"] == pytest.approx(0.2)
    # without the pipeline the makes add up
    assert generation_seconds(NODE, replace(two, pipelined=False), "peer")["evaluate_s"] == pytest.approx(
        0.2 + 2 * make_seconds(NODE, two, "peer"))
    # rebuild: the second stream also makes 2 x 7/8 survivors again, beyond its 100 ms
    rebuild = generation_seconds(NODE, two, "rebuild")["evaluate_s"]
    assert rebuild == pytest.approx(0.2 + max(0.0, (2 + 2 * 7 / 8) * make - 0.1))
    # one island's chain longer than the round: a replica's 4 survivors broadcast at 10 GB/s (1.05 s) set it
    slow = generation_seconds(Node(peer_Bps=10e9, device_bytes=200e9), replace(two, survivors=4.0), "replica")
    assert slow["evaluate_s"] == pytest.approx(0.2) and slow["seconds"] == slow["cycle_s"] > 1.05
    # both islands' archives on every GPU: 32 rows of 3 GB do not fit 80 GB; peer's eighth does
    assert not fits(NODE, two, "replica") and fits(NODE, two, "peer")
    # generation 0 fills the queue once: one make; 2 x (16 + 50 x 8) evaluations of 100 ms
    first = generation_seconds(NODE, two, "peer", 16)
    wall = run_seconds(NODE, two, "peer", 50)
    assert wall == pytest.approx((first["make_s"] + first["seconds"] + 50 * 0.2) / 50)
    assert island_utilisation(NODE, two, 50, wall) == pytest.approx(83.2 / (8 * 50 * wall))
    with pytest.raises(ValueError, match="islands: expected >= 1"):
        Island(G, G, 16, 8, 0.1, 141e9, islands=0)


def test_the_design_rows_reach_the_targets_where_the_model_says():
    # seeded: 2 islands of the study's batch hide every make: 97 % reached
    assert local_figures(Scenario(), seeded=True, per_node=2)["utilisation"] >= 0.97
    assert reach(Scenario(), seeded=True, per_node=2)[0] == 8
    # dense: the migrants' rows between nodes keep 2 islands of 8 short; a larger batch reaches 95 %
    assert local_figures(Scenario(), per_node=2)["utilisation"] < 0.95
    batch, figures = reach(Scenario(), seeded=False, per_node=2)
    assert batch > 8 and figures["utilisation"] >= 0.95 and figures["placement"] == "peer"
    assert reach(Scenario(), seeded=False, per_node=2, target=0.999) is None
