"""Compare run folders: one table and a bar chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from tandem.errors import DataError
from tandem.eval.rundir import CONFIG_FILE, METRICS_FILE, PREDICTIONS
from tandem.io import atomic_path

COLUMNS = ("run", "method", "questions", "em", "f1", "acc", "judge", "recall@5", "gold_doc_recall",
           "llm_calls_per_q", "tokens_per_q", "seconds_per_q", "parse_rate", "fallback_rate")


def load_runs(folders: list[Path], *, partial: bool = False) -> list[dict[str, Any]]:
    """metrics.json (+ method / retriever from config.json) of each run folder. With ``partial`` an
    unfinished QA run is summarised from the questions it finished, and its row says ``partial: true``."""
    rows = []
    for folder in folders:
        path = folder / METRICS_FILE
        if path.exists():
            row = {"run": folder.name, **json.loads(path.read_text(encoding="utf-8"))}
        elif partial and (folder / PREDICTIONS).exists():
            from tandem.eval.runner import read_finished, summarize

            row = {"run": folder.name, "partial": True, **summarize(list(read_finished(folder / PREDICTIONS).values()))}
        else:
            hint = " (--partial summarises the questions it finished)" if (folder / PREDICTIONS).exists() else ""
            raise DataError(f"no {METRICS_FILE}: not a finished run{hint}", str(folder))
        config_path = folder / CONFIG_FILE
        if config_path.exists():
            config = json.loads(config_path.read_text(encoding="utf-8"))
            row.setdefault("method", config.get("method") or config.get("retriever"))
        rows.append(row)
    return rows


def runs_table(rows: list[dict[str, Any]]) -> Table:
    """A rich table of the columns any run has."""
    cols = [c for c in COLUMNS if any(c in r for r in rows)]
    table = Table()
    for col in cols:
        table.add_column(col)
    for row in rows:
        table.add_row(*[f"{row[c]:.4f}" if isinstance(row.get(c), float) else str(row.get(c, "")) for c in cols])
    return table


def plot_runs(rows: list[dict[str, Any]], metrics: list[str], target: Path) -> None:
    """Grouped bars: one group per metric, one bar per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in metrics if any(m in r for r in rows)]
    if not metrics:
        raise DataError("none of the requested metrics is in these runs")
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(metrics) * max(1, len(rows)) / 2, 3.6))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        xs = [m + i * width for m in range(len(metrics))]
        ax.bar(xs, [row.get(m, 0.0) for m in metrics], width, label=row["run"])
    ax.set_xticks([m + 0.4 - width / 2 for m in range(len(metrics))], metrics)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("tandem runs")
    fig.tight_layout()
    try:
        with atomic_path(target, suffix=".tmp.png") as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
