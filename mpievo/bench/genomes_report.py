"""The table and files of ``mpievo bench genomes`` (:mod:`.genomes`)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

#: (column title, row key, format) of the printed table and table.md
COLUMNS = (
    ("genome", "genome", "{}"),
    ("dim", "dim", "{:.0e}"),
    ("B/migrant", "migrant_bytes", "{:,}"),
    ("sent B", "traffic_bytes", "{:,}"),
    ("migr ms", "migration_ms", "{:.3f}"),
    ("min ms", "migration_min_ms", "{:.3f}"),
    ("breed GB/s", "breed_gbs", "{:.3g}"),
    ("mat GB/s", "materialize_gbs", "{:.3g}"),
    ("make GB/s", "produce_gbs", "{:.3g}"),
    ("peak MB", "peak_bytes", "{:,.1f}"),
    ("data MB", "data_bytes", "{:,.1f}"),
    ("(peak-proc)/data", "peak_ratio", "{:.2f}"),
    ("peak in", "peak_phase", "{}"),
    ("GPU MB", "gpu_cell_bytes", "{:,.1f}"),
    ("GPU est MB", "gpu_need_bytes", "{:,.1f}"),
    ("ckpt B", "checkpoint_bytes", "{:,}"),
    ("ckpt s", "checkpoint_s", "{:.3f}"),
    ("checks", "problems", "{}"),
)
_MB = ("peak_bytes", "data_bytes", "gpu_cell_bytes", "gpu_need_bytes")
_WIDTHS = (7, 6, 12, 12, 8, 7, 10, 9, 9, 8, 8, 16, 10, 9, 10, 13, 7, 6)


def cell_text(row: dict, key: str, fmt: str) -> str:
    """One table cell: '-' for what the row does not have (e.g. materialising of dense)."""
    if key == "problems":
        return "ok" if not row.get("problems") else "FAILED"
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value / 1e6 if key in _MB else value)


def format_table(rows: list[dict], header: bool = True) -> str:
    """Fixed-width lines; a skipped cell prints its reason."""
    lines = []
    if header:
        lines.append(" ".join(f"{title:>{w}}" for (title, _, _), w in zip(COLUMNS, _WIDTHS)))
    for row in rows:
        if "skipped" in row:
            lines.append(f"{row['genome']:>7} {row['dim']:>6.0e} skipped: {row['skipped']}")
            continue
        lines.append(" ".join(f"{cell_text(row, key, fmt):>{w}}" for (_, key, fmt), w in zip(COLUMNS, _WIDTHS)))
    return "\n".join(lines)


def markdown(rows: list[dict], ranks: int, device: str = "cpu") -> str:
    """table.md: the table with its conditions."""
    head = "| " + " | ".join(title for title, _, _ in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    body = []
    for row in rows:
        if "skipped" in row:
            body.append(f"| {row['genome']} | {row['dim']:.0e} | skipped: {row['skipped']} |")
        else:
            body.append("| " + " | ".join(cell_text(row, key, fmt) for _, key, fmt in COLUMNS) + " |")
    notes = (f"{ranks} rank(s), one GA island per rank (two on one rank), float32 genomes, ring "
             "migration of 1 emigrant (median and min of the slowest rank); GB/s of child genome (best "
             "generation); peak: the largest VmHWM over ranks; "
             "data: the rank's archive + batch rows + the 3 bases (+ 2 materialised genomes for delta "
             "and seeded); proc: resident memory before the cell.")
    if device == "cuda":
        notes += (" Device cuda: dense and delta islands on the GPU, seeded recipes on the host "
                  "materialised on the GPU, the fitness on the GPU; data then counts no device rows; "
                  "seeded 'mat GB/s' is materialising and evaluating on the GPU; GPU MB: the GPU's used "
                  "memory (cuMemGetInfo: every rank on that GPU, numba's deferred frees included) at the "
                  "end of the cell's largest phase minus before the cell; GPU est MB: the skip rule's "
                  "estimate for the ranks on one GPU.")
    return "\n".join([head, rule, *body, "", notes]) + "\n"


def write_results(rows: list[dict], out: str, ranks: int, device: str = "cpu") -> list[Path]:
    """genomes.csv, genomes.json and table.md under ``out`` (created); returns the paths."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    keys = ["genome", "dim", "ranks", "islands", "device", "row_bytes", "migrant_bytes", "traffic_bytes", "migration_ms",
            "migration_min_ms", "breed_gbs", "materialize_gbs", "produce_gbs", "base_bytes", "peak_bytes",
            "data_bytes", "peak_ratio", "peak_phase", "phase_peaks", "checkpoint_bytes", "checkpoint_s",
            "gpu_need_bytes", "gpu_base_bytes", "gpu_peak_bytes", "gpu_cell_bytes", "gpu_phases",
            "problems", "skipped"]
    paths = [folder / "genomes.csv", folder / "genomes.json", folder / "table.md"]
    with open(paths[0], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
    paths[1].write_text(json.dumps({"ranks": ranks, "device": device, "rows": rows}, indent=1) + "\n")
    paths[2].write_text(markdown(rows, ranks, device))
    return paths


def _csv_value(value):
    """Lists (problems) joined, dicts (phase peaks) as JSON, the rest as they are."""
    if isinstance(value, list):
        return "; ".join(value)
    return json.dumps(value) if isinstance(value, dict) else value
