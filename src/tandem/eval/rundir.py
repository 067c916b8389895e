"""A run's output folder: resolved config, per-question JSONL, metrics.json and a markdown table."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tandem.io import write_json_atomic, write_jsonl_atomic
from tandem.outdir import claim_dir

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
TABLE_FILE = "metrics.md"
PREDICTIONS = "predictions.jsonl"  # a QA run's records
PER_QUESTION = "per_question.jsonl"  # a retrieval run's records


def markdown_table(rows: Iterable[Mapping[str, Any]], columns: list[str] | None = None, digits: int = 4) -> str:
    """A GitHub markdown table; floats are rounded to ``digits``."""
    rows = list(rows)
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))

    def fmt(v: Any) -> str:
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


class RunDir:
    """Writes the files of one run; every write is atomic. The folder must be new, empty or a tandem
    run folder of the same ``kind`` (:func:`tandem.outdir.claim_dir`): a user's folder is refused."""

    def __init__(self, folder: str | Path, kind: str) -> None:
        self.folder = claim_dir(folder, kind)

    def write_config(self, config: Mapping[str, Any]) -> None:
        """The run's settings, atomically (``config.json``)."""
        write_json_atomic(self.folder / CONFIG_FILE, dict(config))

    def write_records(self, name: str, records: Iterable[dict[str, Any]]) -> Path:
        """``records`` as the JSONL file ``name`` of the run folder, atomically; its path."""
        path = self.folder / name
        write_jsonl_atomic(path, records)
        return path

    def write_metrics(self, metrics: Mapping[str, Any], table_rows: list[dict[str, Any]], title: str) -> None:
        """The run's metrics (``metrics.json``) and their markdown table, atomically."""
        write_json_atomic(self.folder / METRICS_FILE, dict(metrics))
        from tandem.io import atomic_open

        with atomic_open(self.folder / TABLE_FILE) as handle:
            handle.write(f"# {title}\n\n" + markdown_table(table_rows))

    def read_config(self) -> dict[str, Any]:
        """The run's settings as written by :meth:`write_config`."""
        return json.loads((self.folder / CONFIG_FILE).read_text(encoding="utf-8"))

