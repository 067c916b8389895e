"""Per-role fine-tuning data from a DualRAG run (paper §3.2, methods.md §3.8).

The teacher's trajectories on questions it answered correctly become chat examples, one file per
role (``reasoner.jsonl``, ``entity_identifier.jsonl``, ``summarizer.jsonl``, ``answer.jsonl``), each
line ``{"messages": [<the exact prompt messages>, {"role": "assistant", "content": <output>}]}``.

- "Correct" means ``scores[m] >= threshold`` for any metric ``m`` given (default: acc or em == 1).
- A JSON role's example pairs the ORIGINAL prompt with the reply that parsed: the first reply, or the
  repair round's reply when the first was malformed. Calls that never parsed are skipped (counted).
- Summarizer replies of ``None`` are kept: they are the negatives that teach filtering.
- Not done here (the authors' extra curation): EI targets from gold supporting titles, Reasoner
  "candidate" steps matched with a reranker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tandem.errors import DataError
from tandem.io import ReadStats, read_jsonl, write_json_atomic, write_jsonl_atomic
from tandem.methods.dualrag.parse import parses_for
from tandem.methods.dualrag.prompts import REPAIR_SUFFIX, ROLES
from tandem.outdir import claim_dir

DEFAULT_METRICS = ("acc", "em")
PREDICTIONS = "predictions.jsonl"
STATS_FILE = "stats.json"


def is_correct(record: Mapping[str, Any], metrics: Sequence[str] = DEFAULT_METRICS, threshold: float = 1.0) -> bool:
    """True when the record has no error and any of ``metrics`` reaches ``threshold``."""
    scores = record.get("scores") or {}
    return "error" not in record and any(float(scores.get(m, 0.0)) >= threshold for m in metrics)


def _attempts(calls: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, list[Mapping[str, Any]]]]:
    """Calls grouped as (role, [first call, repair calls...])."""
    group: list[Mapping[str, Any]] = []
    for call in calls:
        if group and call["role"] == group[0]["role"] + REPAIR_SUFFIX:
            group.append(call)
            continue
        if group:
            yield group[0]["role"], group
        group = [call]
    if group:
        yield group[0]["role"], group


def sft_examples(trace: Mapping[str, Any], counts: Counter[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, chat example) for every DualRAG role call of one trace; ``counts`` tallies skips."""
    counts = counts if counts is not None else Counter()
    for step in trace.get("steps", []):
        for role, group in _attempts(step.get("llm_calls", [])):
            if role not in ROLES:
                continue
            target = next((c for c in reversed(group) if parses_for(role, c["output"])), None)
            if target is None:
                counts[f"unparsed_{role}"] += 1
                continue
            if target is not group[0]:
                counts[f"repaired_{role}"] += 1
            messages = [*group[0]["messages"], {"role": "assistant", "content": target["output"].strip()}]
            yield role, {"messages": messages}


def export_sft(run_dir: str | Path, out_dir: str | Path, metrics: Sequence[str] = DEFAULT_METRICS,
               threshold: float = 1.0) -> dict[str, Any]:
    """Write one chat JSONL per role + ``stats.json`` into ``out_dir`` (each file atomically); returns the stats."""
    run, out = Path(run_dir), Path(out_dir)
    path = run / PREDICTIONS
    if not path.exists():
        raise DataError(f"{run} holds no {PREDICTIONS}: is it a `tandem eval qa` run folder?", path=str(path))
    read = ReadStats()
    records = [rec for _line, rec in read_jsonl(path, skip_bad=True, stats=read)]
    kept = [r for r in records if is_correct(r, metrics, threshold)]
    counts: Counter[str] = Counter()
    per_role: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
    for record in kept:
        for role, example in sft_examples(record.get("trace") or {}, counts):
            per_role[role].append(example)
    claim_dir(out, "sft-data")
    for role, examples in per_role.items():
        write_jsonl_atomic(out / f"{role}.jsonl", examples)
    stats = {
        "run": str(run), "filter": {"metrics": list(metrics), "threshold": threshold},
        "questions": len(records), "errors": sum(1 for r in records if "error" in r),
        "correct_questions": len(kept), "bad_lines": read.skipped,
        "examples": {role: len(v) for role, v in per_role.items()}, **dict(sorted(counts.items())),
    }
    write_json_atomic(out / STATS_FILE, stats)
    return stats
