"""`mpievo bench es`: the quality part runs on a small problem (mpievo's rows; EvoX only with
--evox-python), and bad options are refused before any work."""

import json

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
