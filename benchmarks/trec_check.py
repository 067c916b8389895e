"""A retrieval run exported as TREC files, scored by trec_eval's own code (pytrec_eval), next to the
run's metrics.json: the figures must agree.

    pip install pytrec-eval-terrier         # not a tandem dependency
    tandem eval retrieval --dataset ../shared/data/hotpotqa/dev500.jsonl --index indexes/dev500 --retriever hybrid --out runs/h
    python benchmarks/trec_check.py runs/h  # prints one JSON object
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

MEASURES = {"recall_2": "recall@2", "recall_5": "recall@5", "recall_10": "recall@10", "recip_rank": "mrr",
            "ndcg_cut_10": "ndcg@10"}


def read_trec(path: Path, columns: int) -> dict[str, dict[str, str]]:
    """qid -> docid -> score (run, 6 columns) or relevance (qrels, 4 columns)."""
    table: dict[str, dict[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        assert len(parts) == columns, f"{path}: {line!r}"
        table.setdefault(parts[0], {})[parts[2]] = parts[4] if columns == 6 else parts[3]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a `tandem eval retrieval` run folder")
    args = parser.parse_args()
    try:
        import pytrec_eval
    except ImportError:
        sys.exit("needs pytrec_eval: pip install pytrec-eval-terrier")
    from tandem.eval.export import export_trec, read_run

    run = read_run(args.run)
    with tempfile.TemporaryDirectory() as tmp:
        export_trec(run, Path(tmp) / "run.trec", qrels=Path(tmp) / "run.qrels")
        ranked = {q: {d: float(s) for d, s in docs.items()} for q, docs in read_trec(Path(tmp) / "run.trec", 6).items()}
        qrels = {q: {d: int(r) for d, r in docs.items()} for q, docs in read_trec(Path(tmp) / "run.qrels", 4).items()}
    per_q = pytrec_eval.RelevanceEvaluator(qrels, {"recall.2,5,10", "recip_rank", "ndcg_cut.10"}).evaluate(ranked)
    trec = {name: round(sum(v[m] for v in per_q.values()) / len(per_q), 4) for m, name in MEASURES.items()}
    own = {name: round(run.metrics[name], 4) for name in MEASURES.values() if name in run.metrics}
    json.dump({"run": str(args.run), "questions": len(per_q), "trec_eval": trec, "run_metrics": own,
               "agree": all(abs(trec[k] - own[k]) < 1e-4 for k in own)}, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
