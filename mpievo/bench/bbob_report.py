"""The files of ``mpievo bench bbob``: ``runs.csv``, ``table.md``, ``ecdf.png``, ``bbob.json``.

The table has one line per (function, dim, solver): runs, the median over runs of
log10(f - f_opt) of the best value found, (run, target) pairs reached out of all, and
runs that reached the final target 1e-8. The ECDF is what COCO plots: for each solver
the fraction of (run, target) pairs, targets 1e1 .. 1e-8, reached within a number of
evaluations per dimension (log axis), one panel per dimension.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

#: f - f_opt thresholds of the table and the ECDF (COCO's: 1e1 .. 1e-8)
TARGETS = tuple(10.0 ** k for k in range(1, -9, -1))
TARGET_COLUMNS = tuple(f"evals_1e{round(math.log10(t))}" for t in TARGETS)
CSV_COLUMNS = ("function", "dim", "instance", "seed", "solver", "budget", "evaluations", "stop", "df_best",
               "log10_df", *TARGET_COLUMNS, "wall_s", "job")


def csv_rows(rows: list[dict]) -> list[dict]:
    """The rows as the CSV holds them (one column per target; empty: not reached)."""
    out = []
    for row in rows:
        flat = {k: row[k] for k in CSV_COLUMNS if k in row}
        flat.update({col: ("" if e is None else e) for col, e in zip(TARGET_COLUMNS, row["evals_to_target"])})
        out.append(flat)
    return out


def read_csv(path: Path) -> list[dict]:
    """``runs.csv`` back as rows like :func:`mpievo.bench.bbob.bench_bbob`'s."""
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = {k: int(raw[k]) for k in ("function", "dim", "instance", "seed", "budget", "evaluations")}
            row.update(solver=raw["solver"], stop=raw["stop"], df_best=float(raw["df_best"]),
                       log10_df=float(raw["log10_df"]), wall_s=float(raw["wall_s"]),
                       evals_to_target=[int(raw[c]) if raw[c] else None for c in TARGET_COLUMNS],
                       job=raw.get("job") or "")   # files written before the column: never reused
            rows.append(row)
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    """``runs.csv``, replaced whole (a crash while writing leaves the previous file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tmp")
    with open(scratch, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(rows))
    scratch.replace(path)


def summary(rows: list[dict]) -> dict:
    """{(function, dim, solver): {runs, median_log10, pairs_hit, pairs, final_hit}} in first-seen order."""
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["function"], row["dim"], row["solver"]), []).append(row)
    return {key: {"runs": len(group),
                  "median_log10": float(np.median([r["log10_df"] for r in group])),
                  "pairs_hit": sum(e is not None for r in group for e in r["evals_to_target"]),
                  "pairs": len(group) * len(TARGETS),
                  "final_hit": sum(r["evals_to_target"][-1] is not None for r in group)}
            for key, group in groups.items()}


#: medians closer than this (log10 units) tie, as do two medians at the final target
TIE = 0.1
FINAL_LOG10 = math.log10(TARGETS[-1])


def mark(mine: float, theirs: float) -> str:
    """"+" better, "=" tie, "-" worse: the issue's rule on two medians of log10(f - f_opt)."""
    if (mine <= FINAL_LOG10 and theirs <= FINAL_LOG10) or abs(mine - theirs) <= TIE + 1e-9:
        return "="
    return "+" if mine < theirs else "-"


def shortfall(mine: float, theirs: float) -> float:
    """Orders of magnitude ``mine`` is behind ``theirs`` (medians of log10(f - f_opt)),
    counted from the final target: a median below 1e-8 counts as 1e-8."""
    return max(mine, FINAL_LOG10) - max(theirs, FINAL_LOG10)


def _medians(rows: list[dict]) -> tuple[dict, list, list]:
    """({(function, dim, solver): median log10}, the solvers, the (function, dim) cells),
    in first-seen order."""
    medians = {key: s["median_log10"] for key, s in summary(rows).items()}
    return (medians, list(dict.fromkeys(solver for _, _, solver in medians)),
            list(dict.fromkeys((f, d) for f, d, _ in medians)))


def comparisons(rows: list[dict]) -> dict:
    """{(mpievo solver, other): {"marks": {(function, dim): mark}, "worst": (shortfall, function, dim),
    "far": cells more than one order of magnitude behind}}
    over the cells both ran. The others are the peers (every solver not named
    ``mpievo:...``); without peers, the mpievo solvers after it. A shortfall counts from
    the final target: a median below 1e-8 counts as 1e-8."""
    medians, solvers, cells = _medians(rows)
    ours = [s for s in solvers if s.startswith("mpievo:")]
    peers = [s for s in solvers if s not in ours]
    out = {}
    for i, mine in enumerate(ours):
        for other in peers or ours[i + 1:]:
            shared = [c for c in cells if (*c, mine) in medians and (*c, other) in medians]
            marks = {c: mark(medians[(*c, mine)], medians[(*c, other)]) for c in shared}
            gaps = [(shortfall(medians[(*c, mine)], medians[(*c, other)]), *c) for c in shared if marks[c] == "-"]
            out[(mine, other)] = {"marks": marks, "worst": max(gaps, default=None),
                                  "far": sum(gap > 1.0 for gap, *_ in gaps)}
    return out


def against_best_peer(rows: list[dict]) -> dict:
    """{mpievo solver: {"good": cells better or equal to the best peer of the cell, "cells":
    cells with a peer, "far": cells more than 1.0 behind it, "solved": {solver: cells whose
    median reaches the final target}}}: the issue's three figures, per dimension under
    key ``dim`` and over all dimensions under None. The best peer of a cell is the one
    with the lowest median there (its own marks against each peer: :func:`comparisons`).

    Example::

        rows = read_csv(Path("bbob/runs.csv"))
        figures = against_best_peer(rows)["mpievo:portfolio"][10]   # 10-D cells
        figures["good"], figures["far"], figures["solved"]["mpievo:portfolio"]
    """
    medians, solvers, cells = _medians(rows)
    peers = [s for s in solvers if not s.startswith("mpievo:")]
    out: dict = {}
    for mine in (s for s in solvers if s.startswith("mpievo:")):
        for dim in [None, *sorted({d for _, d in cells})]:
            chosen = [c for c in cells if (dim is None or c[1] == dim) and (*c, mine) in medians
                      and any((*c, p) in medians for p in peers)]
            best = {c: min(medians[(*c, p)] for p in peers if (*c, p) in medians) for c in chosen}
            marks = {c: mark(medians[(*c, mine)], best[c]) for c in chosen}
            far = [c for c in chosen if shortfall(medians[(*c, mine)], best[c]) > 1.0]
            solved = {s: sum(medians.get((*c, s), math.inf) <= FINAL_LOG10 for c in chosen) for s in solvers}
            out.setdefault(mine, {})[dim] = {"good": sum(m != "-" for m in marks.values()), "cells": len(chosen),
                                             "far": len(far), "solved": solved}
    return out


def format_best_peer(rows: list[dict]) -> str:
    """The lines of :func:`against_best_peer` (empty without peers).

    Example::

        print(format_best_peer(read_csv(Path("bbob/runs.csv"))))
    """
    lines = []
    for mine, per_dim in against_best_peer(rows).items():
        for dim, c in per_dim.items():
            if not c["cells"]:
                continue
            where = "all dims" if dim is None else f"{dim}-D"
            solved = ", ".join(f"{s} {n}" for s, n in c["solved"].items())
            lines.append(f"- {mine} vs the best peer of each cell, {where}: better or equal on {c['good']} of "
                         f"{c['cells']} ({100 * c['good'] / c['cells']:.1f} %), more than 1.0 behind on "
                         f"{c['far']}; cells whose median reaches 1e-8: {solved}")
    return "\n".join(lines) + "\n" if lines else ""


def format_comparisons(rows: list[dict]) -> str:
    """Each mpievo solver against each other solver: a mark per cell, then the counts."""
    pairs = comparisons(rows)
    if not pairs:
        return ""
    medians, solvers, cells = _medians(rows)
    cells = sorted(cells, key=lambda c: (c[1], c[0]))
    head = ["f", "dim", *solvers, *(f"{a} vs {b}" for a, b in pairs)]
    lines = ["", f"Medians of log10(f - f_opt) and marks: + better, = tie (both at 1e-8 or within {TIE}), "
             "- worse", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f, d in cells:
        values = [f"{medians[(f, d, s)]:.2f}" if (f, d, s) in medians else "" for s in solvers]
        marks = [p["marks"].get((f, d), "") for p in pairs.values()]
        lines.append(f"| f{f} | {d} | " + " | ".join(values + marks) + " |")
    lines.append("")
    for (mine, other), p in pairs.items():
        marks = list(p["marks"].values())
        good = sum(m != "-" for m in marks)
        worst = "" if p["worst"] is None else \
            f"; worst: f{p['worst'][1]} {p['worst'][2]}-D, {p['worst'][0]:.2f} orders of magnitude behind"
        # one decimal: 43 of 48 is 89.6 %, not the 90 % a rounding would claim
        lines.append(f"- {mine} vs {other}: better or equal on {good} of {len(marks)} cells "
                     f"({100 * good / max(1, len(marks)):.1f} %), more than 1.0 behind on {p['far']}{worst}")
    return "\n".join(lines) + "\n" + format_best_peer(rows)


def format_table(result: dict) -> str:
    o = result["options"]
    lines = [f"BBOB, budget {o['budget_per_dim']} x dim evaluations, {o['islands']} islands on "
             f"{result['ranks']} rank(s), instances {list(o['instances'])} x seeds {list(o['seeds'])}; "
             f"targets f - f_opt = 1e1 .. 1e-8",
             "",
             "| function | dim | solver | runs | median log10(f - f_opt) | targets hit | runs at 1e-8 |",
             "|---|---|---|---|---|---|---|"]
    for (function, dim, solver), s in sorted(summary(result["rows"]).items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(f"| f{function} | {dim} | {solver} | {s['runs']} | {s['median_log10']:.2f} | "
                     f"{s['pairs_hit']}/{s['pairs']} | {s['final_hit']}/{s['runs']} |")
    lines.append(format_comparisons(result["rows"]))
    lines.extend(f"\nnote: {note}" for note in result["notes"])
    return "\n".join(lines) + "\n"


def ecdf(rows: list[dict], grid: np.ndarray) -> np.ndarray:
    """Fraction of (run, target) pairs reached within ``grid`` evaluations per dimension."""
    per_dim = [e / r["dim"] for r in rows for e in r["evals_to_target"] if e is not None]
    pairs = len(rows) * len(TARGETS)
    reached = np.sort(np.asarray(per_dim, dtype=np.float64))
    return np.searchsorted(reached, grid, side="right") / pairs


def write_ecdf(result: dict, path: Path) -> str | None:
    """The ECDF PNG; a note instead without matplotlib (the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not importable (the plot extra): no ecdf.png"
    rows = result["rows"]
    dims = sorted({r["dim"] for r in rows})
    top = result["options"]["budget_per_dim"]
    grid = np.logspace(0, np.log10(top), 200)
    fig, axes = plt.subplots(1, len(dims), figsize=(5 * len(dims), 4), squeeze=False)
    for ax, dim in zip(axes[0], dims):
        mine = [r for r in rows if r["dim"] == dim]
        for solver in dict.fromkeys(r["solver"] for r in mine):
            ax.step(grid, ecdf([r for r in mine if r["solver"] == solver], grid), where="post", label=solver)
        functions = ",".join(f"f{f}" for f in sorted({r['function'] for r in mine}))
        ax.set(xscale="log", xlabel="evaluations / dimension", ylabel="fraction of (run, target) pairs",
               ylim=(0, 1), title=f"{functions}, {dim}-D, targets 1e1..1e-8")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_report(result: dict, out: Path, *, all_rows: list[dict] | None = None, log=print) -> None:
    """runs.csv (``all_rows``, default the result's), table.md, bbob.json and ecdf.png
    under ``out``; a missing plot goes to the notes."""
    write_csv(result["rows"] if all_rows is None else all_rows, out / "runs.csv")
    notes = [note for note in [write_ecdf(result, out / "ecdf.png")] if note]
    result["notes"].extend(notes)
    (out / "table.md").write_text(format_table(result))
    with open(out / "bbob.json", "w") as f:
        json.dump(result, f, indent=1, default=list)
    log(format_table(result), end="")
    log(f"wrote {out}/runs.csv, table.md, bbob.json" + ("" if notes else ", ecdf.png"))
