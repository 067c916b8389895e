"""HotpotQA dev500 in the Hugging Face ``hotpot_qa`` layout, read from every container tandem reads:
load time and whether questions, answers, gold ids and passage pool equal the original file's.

    python benchmarks/hf_layouts.py                 # prints one JSON object
    python benchmarks/hf_layouts.py --index indexes/dev500 --retriever bm25   # + R@k through each copy

The copies (JSONL, Parquet, a ``save_to_disk`` folder) are written to a temporary folder and removed;
the IRCoT-processed dev500 becomes the HF layout with one "sentence" per paragraph and
``supporting_facts`` from ``is_supporting``, so passage content ids are the original ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEV500 = ROOT.parent / "shared" / "data" / "hotpotqa" / "dev500.jsonl"


def to_hf_layout(rec: dict[str, Any]) -> dict[str, Any]:
    """One IRCoT-processed HotpotQA record as a Hugging Face ``hotpot_qa`` row."""
    contexts = rec["contexts"]
    answers = [span for obj in rec["answers_objects"] for span in obj.get("spans", [])]
    return {
        "id": rec["question_id"], "question": rec["question_text"], "answer": answers[0], "type": "", "level": "",
        "supporting_facts": {"title": [c["title"] for c in contexts if c.get("is_supporting")],
                             "sent_id": [0 for c in contexts if c.get("is_supporting")]},
        "context": {"title": [c["title"] for c in contexts], "sentences": [[c["paragraph_text"]] for c in contexts]},
    }


def timed_load(source: str | Path) -> tuple[Any, float]:
    from tandem.corpus import load_dataset

    start = time.perf_counter()
    ds = load_dataset(source)
    return ds, time.perf_counter() - start


def same(a: Any, b: Any) -> bool:
    """Same questions, answers, gold ids (in order) and passage pool."""
    key = [(q.id, q.text, q.answers, q.gold_doc_ids) for q in a.questions]
    return key == [(q.id, q.text, q.answers, q.gold_doc_ids) for q in b.questions] and \
        [d.id for d in a.passages] == [d.id for d in b.passages]


def recall(ds: Any, index: Path, retriever: str) -> dict[str, float]:
    from tandem.eval.retrieval import evaluate_retrieval
    from tandem.index import open_index
    from tandem.retrieve import open_retriever

    _, metrics = evaluate_retrieval(ds.questions, open_retriever(open_index(index, corpus=ds.passages), retriever), (2, 5, 10))
    return {k: round(v, 4) for k, v in metrics.items() if k.startswith("recall@")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=DEV500)
    parser.add_argument("--index", type=Path, help="an index over the dataset's pool: adds R@k through each copy")
    parser.add_argument("--retriever", default="bm25")
    args = parser.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tandem.io import read_jsonl

    rows = [to_hf_layout(rec) for _, rec in read_jsonl(args.dataset)]
    original, seconds = timed_load(args.dataset)
    report: dict[str, Any] = {"dataset": str(args.dataset), "questions": len(original.questions),
                              "passages": len(original.passages), "original_s": round(seconds, 3)}
    with tempfile.TemporaryDirectory() as tmp:
        copies: dict[str, str | Path] = {"jsonl": Path(tmp) / "validation.jsonl", "parquet": Path(tmp) / "validation.parquet"}
        copies["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")  # type: ignore[union-attr]
        pq.write_table(pa.Table.from_pylist(rows), copies["parquet"])
        try:
            import datasets

            datasets.disable_progress_bars()
            datasets.Dataset.from_list(rows).save_to_disk(str(Path(tmp) / "saved"))
            copies["save_to_disk"] = f"hf:{Path(tmp) / 'saved'}"
        except ImportError:
            report["save_to_disk"] = "skipped: the datasets package is not installed"
        for name, source in copies.items():
            ds, seconds = timed_load(source)
            report[name] = {"format": ds.format, "load_s": round(seconds, 3), "same_as_original": same(ds, original)}
            if args.index is not None:
                report[name][f"{args.retriever}_recall"] = recall(ds, args.index, args.retriever)
        if args.index is not None:
            report[f"original_{args.retriever}_recall"] = recall(original, args.index, args.retriever)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
