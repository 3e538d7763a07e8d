"""Rank 0's progress display and output files."""

import io
import json
import sys

import numpy as np

from mpievo.parallel.output import (OutputWriter, ProgressReporter, format_count, plot_convergence,
                                    read_island_logs, terminal_is_live, trim_log)
from mpievo.parallel.runner import LogPoint, RunResult
from mpievo.parallel.scheme import IslandRecord


def _point(generation, best=1.5):
    records = [IslandRecord(i, generation, best + i, best + 2 * i, 0.1, 100 * (generation + 1), 1, 2,
                            best + i) for i in range(2)]
    return LogPoint(generation, records, sum(r.evaluations for r in records), 3, 12, 2.0, 400)


def _result(stopped=False, genome=np.arange(3.0)):
    return RunResult(generations=4, best_fitness=1.5, best_island=0, best_genome=genome, evaluations=1000,
                     evaluations_this_run=800, wall_s=2.0, evals_per_s=400.0, bytes_sent={"migration": 10},
                     islands=[{"island": 0, "best_fitness": 1.5, "evaluations": 500, "immigrants": 2,
                               "diversity": float("nan")}], stopped=stopped)


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_terminal_detection():
    assert terminal_is_live(_Tty(), {}) is True
    assert terminal_is_live(io.StringIO(), {}) is False
    assert terminal_is_live(_Tty(), {"OMPI_COMM_WORLD_SIZE": "2"}) is False   # Open MPI's pty
    assert terminal_is_live(io.StringIO(), {"OMPI_COMM_WORLD_SIZE": "2", "MPIEVO_STDOUT_ISATTY": "1"}) is True


def test_progress_live_line_and_plain_lines():
    live = _Tty()
    reporter = ProgressReporter(8, live, live=True)
    reporter.on_log(_point(4))
    reporter.on_finish(_result())
    text = live.getvalue()
    assert text.startswith("\rgen 4/8  evals 1k  best 1.5 (island 0)  200 evals/s  migrations 3")
    assert text.endswith("done: generation 4, best 1.5 (island 0), 800 evaluations in 2.0 s (400 evals/s)\n")
    plain = io.StringIO()
    reporter = ProgressReporter(8, plain, every_s=3600, live=False)
    for g in (0, 4, 8):
        reporter.on_log(_point(g))
    lines = plain.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["0/8", "8/8"]   # throttled, but the last always
    assert "\r" not in plain.getvalue()


def test_format_count():
    assert [format_count(v) for v in (950, 12345, 4.56e6, 7e9)] == ["950", "12.3k", "4.56M", "7G"]


def test_writer_logs_summary_and_resume_trimming(tmp_path):
    writer = OutputWriter(tmp_path, {"run": {"seed": 1}}, extra={"ranks": 2}, notice=lambda t: None)
    for g in (0, 2, 4):
        writer.on_log(_point(g))
    writer.on_finish(_result())
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["best_genome"] == [0.0, 1.0, 2.0] and summary["ranks"] == 2
    assert summary["islands"][0]["diversity"] is None          # NaN is not JSON
    assert [r["generation"] for r in read_island_logs(tmp_path)[1]] == [0, 2, 4]
    OutputWriter(tmp_path, {}, resume_generation=3)               # a resume from generation 3
    assert [r["generation"] for r in read_island_logs(tmp_path)[0]] == [0, 2]
    OutputWriter(tmp_path, {})                                    # a new run starts afresh
    assert read_island_logs(tmp_path) == {}


def test_stopped_run_writes_no_summary(tmp_path):
    writer = OutputWriter(tmp_path, {}, notice=lambda t: None)
    writer.on_finish(_result(stopped=True))
    assert not (tmp_path / "summary.json").exists()


def test_trim_log_drops_torn_lines(tmp_path):
    path = tmp_path / "island-0000.jsonl"
    path.write_text('{"generation": 0}\n{"generation": 5}\n{"genera')
    trim_log(path, 5)
    assert path.read_text() == '{"generation": 0}\n'


def test_plot_is_skipped_with_a_notice_without_matplotlib(tmp_path, monkeypatch):
    notices = []
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import fails
    assert plot_convergence(tmp_path, tmp_path / "c.png", notice=notices.append) is False
    assert "matplotlib is not installed" in notices[0] and not (tmp_path / "c.png").exists()


def test_nonfinite_islands_are_warned_once_and_counted(tmp_path):
    from mpievo.parallel.output import NonfiniteWarner, nonfinite_total

    def point(generation, evaluations, nonfinite):
        records = [IslandRecord(0, generation, 1.0, 1.0, 0.1, evaluations, 0, 0, 1.0, nonfinite=0),
                   IslandRecord(1, generation, float("inf"), float("nan"), 0.1, evaluations, 0, 0,
                                float("inf"), nonfinite=nonfinite)]
        return LogPoint(generation, records, 2 * evaluations, 0, 0, 1.0, 2 * evaluations)

    stream = io.StringIO()
    warner = NonfiniteWarner(stream)
    warner.on_log(point(0, 10, 9))                   # island 1 saw one finite value: no warning
    assert stream.getvalue() == ""
    warner.on_log(point(1, 20, 20))
    warner.on_log(point(2, 30, 30))                  # warned once, not at every log point
    assert stream.getvalue().count("warning") == 1 and "island 1 has seen only non-finite" in stream.getvalue()
    assert "20 of 20 evaluations" in stream.getvalue()
    result = _result()
    result.islands = [{"island": 0, "nonfinite": 3}, {"island": 1, "nonfinite": 4}]
    assert nonfinite_total(result) == 7
    summary = OutputWriter(tmp_path, {}, notice=lambda t: None).summary(result)
    assert summary["nonfinite_evaluations"] == 7
