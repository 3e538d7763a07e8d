"""``mpievo bench models`` runs through the CLI on a tiny model and prints its ratios."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from mpievo.cli.main import main as cli_main  # noqa: E402


def test_copy_part_prints_the_ratio_against_memcpy(capsys):
    assert cli_main(["bench", "models", "copy", "--layers", "1", "--width", "16"]) == 0
    out = capsys.readouterr().out
    assert "memcpy" in out and "x" in out, out


def test_an_unknown_part_is_refused():
    with pytest.raises(SystemExit) as caught:
        cli_main(["bench", "models", "nothing"])
    assert caught.value.code == 2


def test_memory_part_prints_each_phase_against_its_estimate(capsys):
    assert cli_main(["bench", "models", "memory", "--layers", "1", "--width", "16", "--capacity", "4",
                     "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "generation 0 12 rows (2 sources + 2 row box + 4 archive + 4 generation 0 beside it)" in out, out
    assert "x (target within 10 %)" in out and ("rank 0: later: peak RSS growth" in out or "whole run" in out), out


def test_child_part_prints_each_ratio_against_its_target(capsys, tmp_path):
    from mpievo.bench.models_child import save_sources

    save_sources(str(tmp_path), 2, 1, 16, 32, 16)       # what the bench's own child process writes
    assert cli_main(["bench", "models", "child", "--layers", "1", "--width", "16", "--vocab", "32",
                     "--positions", "16", "--generations", "2", "--sources-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for line in ("x memcpy (target >= 0.5x)", "x memcpy (target <= 6x)", "x (target <= 2x)",
                 "(2 sources + 1 x (6 rows + row box + 2 model buffers) + best genome)", "x (target within 1.15x)"):
        assert line in out, out
