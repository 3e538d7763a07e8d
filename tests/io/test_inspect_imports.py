"""Issue 31, finding 10: `mpievo inspect` names the user code a resume would import
(a checkpoint's stored config is trusted like a config file)."""

from __future__ import annotations

from io_helpers import make_island

from mpievo.cli.main import main as mpievo_main
from mpievo.io import Checkpointer

USER_CODE = '[problem]\nname = "evil_mod:f"\n[engine]\nalgorithm = ["ga", "pkg.algos:Mine", "pkg.algos:Mine"]\n'


def test_inspect_shows_the_code_a_resume_would_import(tmp_path, capsys):
    Checkpointer(tmp_path).save(4, {0: make_island(0, 4)}, config=USER_CODE)
    assert mpievo_main(["inspect", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "a resume would import: problem.name = 'evil_mod:f', engine.algorithm = 'pkg.algos:Mine' "
        "(a checkpoint is trusted like a config file)")


def test_inspect_says_when_a_resume_imports_no_user_code(tmp_path, capsys):
    Checkpointer(tmp_path).save(4, {0: make_island(0, 4)}, config='[problem]\nname = "sphere"\n')
    assert mpievo_main(["inspect", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "a resume would import: no user code (built-in problem and algorithms)")
