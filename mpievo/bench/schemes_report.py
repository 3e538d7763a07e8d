"""The report of ``mpievo bench schemes``: a Markdown table, CSV, JSON and a PNG.

The table has one line per (workload, scheme): evaluations/s at each P with the
speed-up over P = 1, utilisation at the largest P (mean over ranks, min-max), bytes
sent per generation at each P > 1, the best fitness (the same on every line of a
workload: the bench checks it) and the cost model's time error at each P (predicted /
measured - 1, :mod:`mpievo.plan.timing`; its evaluation and migration bytes are exact, checked),
marked ``!`` where it is outside :data:`mpievo.plan.timing.TIME_BOUND`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..plan.workloads import SHORT_COST0_RUN_S, SHORT_RUN_REPEATS, SHORT_RUN_S
from ..plan.timing import TIME_BOUND, outside_bound

CSV_COLUMNS = ("workload", "cost_ms", "mode", "dim", "scheme", "ranks", "ranks_per_island", "islands",
               "capacity", "budget", "generations", "evaluations", "wall_s", "evals_per_s", "speedup",
               "bytes_per_generation", "bytes_per_generation_by_purpose", "utilisation_mean",
               "utilisation_min", "utilisation_max", "utilisation", "best_fitness", "stop_reason",
               "loadavg_1min", "note", "sweep_walls", "model_bytes_per_generation", "model_wall_s",
               "model_time_error", "model_fitted")


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _error(row: dict) -> str:
    error = row.get("model_time_error")
    if error is None:
        return "-"
    return f"{100 * error:+.0f} %" + (" !" if outside_bound(row) else " (fit)" if row.get("model_fitted") else "")


def _by_key(rows: list[dict]) -> dict:
    """{(workload, scheme): {P: row}} in the rows' order."""
    table: dict = {}
    for row in rows:
        table.setdefault((row["workload"], row["scheme"]), {})[row["ranks"]] = row
    return table


def format_table(result: dict) -> str:
    """The Markdown table with its conditions above it."""
    c = result["conditions"]
    o = c["options"]
    ps = sorted(o["ps"])
    top, multi = ps[-1], [p for p in ps if p > 1]
    over = ", ".join(f"P={p}" for p in c["oversubscribed_p"])
    lines = [f"mpievo bench schemes, {c['date_utc']} UTC, {c['cores']} cores"
             + (f" ({over} oversubscribed)" if over else "") + f", {'; '.join(c['mpi_library'])}; "
             f"{c['problem']}; {c['options']['islands'] or top} islands, GA, archive capacity = batch = "
             f"{o['capacity']} and a budget of {o['budget']} evaluations per run ({o.get('fast_factor', 1)} "
             f"times that at cost 0 below {o.get('fast_dim', 0):,} genes; from {o['large_dim']:,} "
             f"genes: {o['large_capacity']} and {o['large_budget']}), migration every {o['interval']} "
             f"generations; runs under {SHORT_RUN_S:g} s (at cost 0: {SHORT_COST0_RUN_S:g} s): the fastest of "
             f"{o.get('short_repeats', SHORT_RUN_REPEATS)}, spread over the workload's runs; each row: the "
             f"run of median wall time over {o.get('sweeps', 1)} sweeps; "
             f"cost model: {c.get('model_constants', 'none')}",
             "",
             "| workload | scheme | " + " | ".join(f"evals/s P={p}" for p in ps)
             + f" | util. P={top} mean (min-max) | " + " | ".join(f"bytes/gen P={p}" for p in multi)
             + " | best | " + " | ".join(f"model time err P={p}" for p in ps) + " |",
             "|" + "---|" * (4 + 2 * len(ps) + len(multi))]
    for (workload, scheme), by_p in _by_key(result["rows"]).items():
        cells = []
        for p in ps:
            row = by_p[p]
            cells.append(f"{row['evals_per_s']:.4g}" + (f" ({row['speedup']:.2f}x)" if p > 1 else ""))
        u = by_p[top]
        cells.append(f"{u['utilisation_mean']:.2f} ({u['utilisation_min']:.2f}-{u['utilisation_max']:.2f})")
        cells += [_bytes(by_p[p]["bytes_per_generation"]) for p in multi]
        cells.append(f"{by_p[ps[0]]['best_fitness']:.6g}")
        cells += [_error(by_p[p]) for p in ps]
        lines.append(f"| {workload} | {scheme} | " + " | ".join(cells) + " |")
    lines += ["", f"Model time errors marked ! are outside the {100 * TIME_BOUND:.0f} % bound; (fit): the "
              f"one-rank cost-0 run the model's engine costs are scaled to (scales: "
              + ", ".join(f"{int(d):,} genes x{s:.2f}" for d, s in c.get("model_anchors", {}).items())
              + ")."]
    return "\n".join(lines)


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            cells = dict(row)
            cells["bytes_per_generation_by_purpose"] = ";".join(
                f"{p}={n:.0f}" for p, n in row["bytes_per_generation_by_purpose"].items())
            cells["utilisation"] = ";".join(f"{u:.4f}" for u in row["utilisation"])
            cells["sweep_walls"] = ";".join(f"{w:.4f}" for w in row.get("sweep_walls", ()))
            writer.writerow(cells)


def write_png(result: dict, path: Path) -> str:
    """Evaluations/s and utilisation per scheme vs P, one row of panels per workload;
    returns what was written (or why not)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"skipped {path.name}: matplotlib is not installed (pip install 'mpievo[plot]')"
    table = _by_key(result["rows"])
    loads = list(dict.fromkeys(w for w, _ in table))
    schemes = list(dict.fromkeys(s for _, s in table))
    fig, axes = plt.subplots(len(loads), 2, figsize=(10, 2.6 * len(loads)), squeeze=False)
    for i, load in enumerate(loads):
        speed, util = axes[i]
        for scheme in schemes:
            by_p = table[load, scheme]
            ps = sorted(by_p)
            speed.plot(ps, [by_p[p]["evals_per_s"] for p in ps], marker="o", label=scheme)
            util.plot(ps, [by_p[p]["utilisation_mean"] for p in ps], marker="o", label=scheme)
        speed.set_yscale("log")
        speed.set_title(f"{load}: evaluations/s", fontsize=9)
        util.set_title(f"{load}: utilisation (fitness time / wall, mean over ranks)", fontsize=9)
        util.set_ylim(0, 1.05)
        for ax in (speed, util):
            ax.set_xticks(sorted(result["conditions"]["options"]["ps"]))
            ax.set_xlabel("P (ranks)", fontsize=8)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    c = result["conditions"]
    fig.suptitle(f"mpievo bench schemes, {c['date_utc']} UTC, {c['cores']} cores, "
                 f"same budget for every scheme", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return f"wrote {path}"


def write_outputs(result: dict, out: Path) -> list[str]:
    """schemes.csv, schemes.json, schemes.png (when matplotlib is there) and table.md in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(result["rows"], out / "schemes.csv")
    (out / "schemes.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "table.md").write_text(format_table(result) + "\n")
    return [f"wrote {out / 'schemes.csv'}, {out / 'schemes.json'}, {out / 'table.md'}",
            write_png(result, out / "schemes.png")]
