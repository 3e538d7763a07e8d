"""`mpievo bench es`: the quality part runs on a small problem (mpievo's rows; EvoX only with
--evox-python), and bad options are refused before any work."""

import json

import pytest

from mpievo.bench.es import main, run_mpievo


def test_quality_prints_every_mpievo_row_and_writes_json(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main(["quality", "--dim", "20", "--popsize", "10", "--budget", "200", "--seeds", "0",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mpievo es (as EvoX)" in text and "mpievo es (centred ranks)" in text and "evox" not in text
    rows = json.loads(out.read_text())
    assert len(rows) == 3 and all(len(r["curve"]) == 10 and r["evaluations_per_s"] > 0
                                  and r["evaluations_per_cpu_s"] > 0 for r in rows)


def test_the_mean_improves_and_runs_repeat():
    first = run_mpievo(20, 1, 10, 0.1, 0.1, 30, {1, 30}, "centered_ranks")
    again = run_mpievo(20, 1, 10, 0.1, 0.1, 30, {1, 30}, "centered_ranks")
    assert first["curve"][1] < first["curve"][0] and first["curve"] == again["curve"]


def test_bad_options_are_refused(capsys):
    assert main(["quality", "--popsize", "1"]) == 2
    assert "--popsize: expected an even int >= 2, got 1" in capsys.readouterr().err
    assert main(["quality", "--budget", "0"]) == 2
    assert "--budget: expected an int >= 1, got 0" in capsys.readouterr().err


def test_paired_ratios_seed_by_seed():
    from mpievo.bench.es import paired, paired_line

    rows = [{"solver": "a", "seed": s, "curve": [9.0, v]} for s, v in enumerate([1.0, 4.0, 1.5])]
    rows += [{"solver": "b", "seed": s, "curve": [9.0, v]} for s, v in enumerate([2.0, 2.0, 2.0])]
    rows.append({"solver": "a", "seed": 7, "curve": [1.0]})          # a seed b did not run: left out
    p = paired(rows, "a", "b")
    assert p["seeds"] == 3 and p["lower"] == 2 and p["ratio"] == pytest.approx(0.75 ** (1 / 3))
    assert (p["median"], p["min"], p["max"]) == (0.75, 0.5, 2.0) and p["low"] < p["ratio"] < 1.0 < p["high"]
    assert "geometric mean 0.91" in paired_line(rows, "a", "b") and "lower on 2 of 3" in paired_line(rows, "a", "b")
    with pytest.raises(ValueError, match="expected seeds run by both 'a' and 'c', got none"):
        paired(rows, "a", "c")
