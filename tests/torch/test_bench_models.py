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
