"""Migration policies as plain callables: selection, replacement, uniqueness."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpievo.evo import Archive, MigrationPolicy, Migrants
from mpievo.evo.migration_policy import (REPLACEMENT_POLICIES, SELECTION_POLICIES, admit, choose_emigrants,
                                  replace_fair, replace_if_better, replace_worst, select_best, select_random,
                                  unheld)


def archive_of(fitness, *, capacity=None, unique=False, limit=None, dim=2):
    """Members i = 0.. with a random genome, fitness[i] and id i."""
    archive = Archive(capacity or len(fitness), dim, "float64", unique=unique, limit=limit)
    genomes = np.random.default_rng(0).normal(size=(len(fitness), dim))
    archive.insert(genomes, fitness, np.arange(len(fitness)), 0, 0)
    return archive


def migrants_of(fitness, *, dim=2):
    """Migrants j = 0.. with a random genome (not a member's), fitness[j] and id 1000 + j."""
    n = len(fitness)
    genomes = np.random.default_rng(1).normal(size=(n, dim))
    return Migrants(genomes, np.asarray(fitness, float), 1000 + np.arange(n), np.full(n, 7), np.full(n, 3))


def distinct_genomes(archive) -> bool:
    return len(np.unique(archive.genomes, axis=0)) == archive.size


def held_ids(archive, migrants):
    return set(np.intersect1d(archive.ids, migrants.ids).tolist())


# --- selection ---------------------------------------------------------------------

def test_policy_tables_map_the_config_names_to_callables():
    assert SELECTION_POLICIES == {"best": select_best, "random": select_random}
    assert REPLACEMENT_POLICIES == {"worst": replace_worst, "better": replace_if_better, "fair": replace_fair}


def test_select_best_is_the_k_best_eligible_best_first():
    archive = archive_of([5.0, 1.0, 3.0, 1.0, 2.0])
    assert select_best(archive, 3, None, None).tolist() == [1, 3, 4]   # tie 1.0: lower slot first
    eligible = np.array([True, False, True, True, True])
    assert select_best(archive, 3, None, eligible).tolist() == [3, 4, 2]
    assert select_best(archive, 9, None, eligible).tolist() == [3, 4, 2, 0]


def test_select_random_is_distinct_eligible_and_reproducible_from_the_rng():
    archive = archive_of(np.arange(20.0))
    draw = lambda seed, eligible=None: select_random(archive, 6, np.random.default_rng(seed), eligible)  # noqa: E731
    first = draw(1)
    assert len(set(first.tolist())) == 6 and np.array_equal(first, draw(1))
    assert not all(np.array_equal(first, draw(seed)) for seed in range(2, 6))
    eligible = np.arange(20) % 3 == 0   # 7 members
    for seed in range(10):
        chosen = draw(seed, eligible)
        assert len(set(chosen.tolist())) == 6 and eligible[chosen].all()
    assert sorted(select_random(archive, 50, np.random.default_rng(0), eligible).tolist()) == list(range(0, 20, 3))
    assert len(select_random(archive, 3, np.random.default_rng(0), np.zeros(20, bool))) == 0
    with pytest.raises(ValueError, match="expected a Generator for selection policy 'random', got None"):
        select_random(archive, 2, None, None)


def test_choose_emigrants_never_sends_a_held_genome():
    sender = archive_of([4.0, 0.0, 3.0, 1.0, 2.0])
    receiver = Archive(5, 2, "float64")
    receiver.insert(sender.genomes[[1, 3]], [9.0, 9.0], [50, 51], 1, 0)   # holds the sender's two best
    best = choose_emigrants(sender, 2, "best", exclude=receiver.hashes())
    assert best.ids.tolist() == [4, 2]   # the next best two, copied with their records
    for seed in range(10):
        chosen = choose_emigrants(sender, 3, "random", np.random.default_rng(seed), exclude=receiver.hashes())
        assert sorted(chosen.ids.tolist()) == [0, 2, 4]
    assert choose_emigrants(sender, 2, "best").ids.tolist() == [1, 3]
    with pytest.raises(ValueError, match=r"expected selection policy among \('best', 'random'\), got 'worst'"):
        choose_emigrants(sender, 2, "worst")


# --- replacement -------------------------------------------------------------------

def test_worst_evicts_the_worst_members_unconditionally_after_free_slots():
    archive = archive_of([1.0, 5.0, 3.0, 4.0], capacity=6)
    entered = replace_worst(archive, migrants_of([99.0, 98.0, 97.0, 96.0]), k=1)
    assert entered.tolist() == [0, 1, 2, 3]
    # two free slots, then the worst (5.0, then 4.0) are evicted; 1.0 and 3.0 stay
    assert sorted(archive.ids.tolist()) == [0, 2, 1000, 1001, 1002, 1003]
    assert archive.origins[archive.ids >= 1000].tolist() == [7] * 4


def test_worst_skips_held_genomes_in_a_unique_archive():
    archive = archive_of([1.0, 2.0, 3.0], unique=True)
    migrants = Migrants(archive.genomes[[0]].copy(), np.array([0.5]), np.array([77]), np.array([1]),
                        np.array([1]))
    assert len(replace_worst(archive, migrants, k=1)) == 0 and 77 not in archive.ids


def test_better_never_accepts_a_worse_migrant():
    archive = archive_of([1.0, 2.0, 3.0, 4.0])
    migrants = migrants_of([5.0, 4.0, 2.5, 0.5])
    entered = replace_if_better(archive, migrants, k=1)
    assert entered.tolist() == [2, 3] and sorted(archive.fitness.tolist()) == [0.5, 1.0, 2.0, 2.5]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=8), st.lists(st.integers(0, 20), max_size=8),
       st.integers(1, 5))
def test_better_merges_like_children(members, arrivals, k):
    archive = archive_of(np.array(members, float))
    worst = archive.fitness.max()
    migrants = migrants_of(np.array(arrivals, float))
    entered = replace_if_better(archive, migrants, k)
    assert np.all(migrants.fitness[entered] < worst)
    assert held_ids(archive, migrants) == set(migrants.ids[entered].tolist())
    assert np.array_equal(np.sort(archive.fitness), np.sort(np.concatenate([members, arrivals]))[:len(members)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=8), st.lists(st.integers(0, 20), max_size=8),
       st.integers(0, 5))
def test_fair_lets_at_most_k_of_the_best_migrants_in(members, arrivals, k):
    archive = archive_of(np.array(members, float))
    worst = archive.fitness.max()
    migrants = migrants_of(np.array(arrivals, float))
    entered = replace_fair(archive, migrants, k)
    assert len(entered) <= k and np.all(migrants.fitness[entered] < worst)
    assert held_ids(archive, migrants) == set(migrants.ids[entered].tolist())
    # the k best migrants (ties: earlier first) are the only candidates, merged like children
    best = np.lexsort((np.arange(len(arrivals)), migrants.fitness))[:k]
    assert set(entered.tolist()) <= set(best.tolist())
    merged = np.concatenate([members, migrants.fitness[best]])
    assert np.array_equal(np.sort(archive.fitness), np.sort(merged)[:len(members)])


def test_fair_prefers_the_best_migrants():
    archive = archive_of([1.0, 2.0, 3.0, 4.0])
    entered = replace_fair(archive, migrants_of([2.5, 0.5, 1.5, 3.5]), k=2)
    assert entered.tolist() == [1, 2] and sorted(archive.fitness.tolist()) == [0.5, 1.0, 1.5, 2.0]


# --- uniqueness --------------------------------------------------------------------

def test_unheld_drops_held_genomes_and_repeats():
    archive = Archive(2, 2, "float64")
    archive.insert(np.array([[0.0, 1.0], [2.0, 3.0]]), [1.0, 2.0], [0, 1], 0, 0)
    genomes = np.array([[0.0, 1.0], [5.0, 5.0], [5.0, 5.0], [-0.0, 1.0], [2.0, 4.0], [3.0, 2.0]])
    migrants = Migrants(genomes, np.zeros(6), np.arange(6), np.zeros(6, int), np.zeros(6, int))
    assert unheld(archive, migrants).tolist() == [1, 4, 5]   # -0.0 == 0.0: held


@pytest.mark.parametrize("policy", sorted(REPLACEMENT_POLICIES))
def test_unique_admission_never_accepts_a_held_genome(policy):
    archive = archive_of([1.0, 2.0, 3.0, 4.0])
    own = Migrants.of_members(archive, [3, 3])
    twins = Migrants(own.genomes, own.fitness - 10.0, own.ids + 50, own.origins, own.births)
    fresh = migrants_of([0.5])
    arrivals = Migrants(*(np.concatenate(pair) for pair in zip(twins, fresh)))
    entered = admit(archive, arrivals, policy, k=3, unique=True)
    assert entered.ids.tolist() == [1000] and distinct_genomes(archive)
    plain = archive_of([1.0, 2.0, 3.0, 4.0])
    assert len(admit(plain, arrivals, policy, k=3).ids) == 3   # without unique the twins enter


def test_admit_names_the_replacement_policies():
    archive = archive_of([1.0])
    assert len(admit(archive, migrants_of([]), "better", k=1).ids) == 0
    with pytest.raises(ValueError, match=r"expected replacement policy among \('worst', 'better', 'fair'\), "
                                         r"got 'replace_if_better'"):
        admit(archive, migrants_of([0.0]), "replace_if_better", k=1)


def test_migration_policy_validates_its_names():
    assert MigrationPolicy() == MigrationPolicy(2, "best", "better", True)
    with pytest.raises(ValueError, match=r"expected selection among \('best', 'random'\), got 'worst'"):
        MigrationPolicy(selection="worst")
    with pytest.raises(ValueError, match=r"expected replacement among \('worst', 'better', 'fair'\), got \['fair'\]"):
        MigrationPolicy(replacement=["fair"])
    with pytest.raises(ValueError, match="expected emigrants to be an int >= 0, got -1"):
        MigrationPolicy(emigrants=-1)
