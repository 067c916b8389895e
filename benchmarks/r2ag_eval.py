"""R²AG against NativeRAG with the same frozen LLM and the same k documents; prints JSON.

Per question the documents are its own k context paragraphs (HotpotQA distractor setting: 2 gold +
8 distractors), sorted by MiniLM cosine r and cut to ``--doc-words`` words, for every variant:

- ``naive_rag``: NativeRAG's answer prompt (``brief_answer_messages``) over those documents;
- ``r2ag_no_inject``: R²AG's prompt with the placeholder tokens left as they are (no vectors);
- ``NAME``: R²AG with the R²-Former checkpoint ``--checkpoint NAME=PATH`` (full model, ablations).

For each checkpoint it also reports the relevance head's ranking quality (MAP, R@1, R@2 against
gold paragraphs) next to the raw r order. Predictions go to ``OUT/<variant>.jsonl`` (a rerun skips
variants already complete), the summary to ``OUT/summary.json`` and stdout::

    OMP_NUM_THREADS=1 TANDEM_LLM_THREADS=1 python benchmarks/r2ag_eval.py --questions 0:100 \\
        --checkpoint full=runs/r2ag/full --out runs/r2ag/eval
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from tandem.corpus import load_dataset
from tandem.eval.qa_metrics import cover_match, exact_match, f1_score
from tandem.index.encoder import load_encoder
from tandem.index.store import DocStore
from tandem.llm import load_llm
from tandem.llm.base import LLMRequest
from tandem.methods.answers import brief_answer_messages, clean_answer
from tandem.methods.r2ag import training as tr
from tandem.methods.r2ag.algorithm import R2AG, rank_and_featurize
from tandem.methods.r2ag.former import R2Former, R2FormerConfig, load_r2former
from tandem.methods.r2ag.prompts import shorten
from tandem.methods.r2ag.settings import R2AGSettings
from tandem.types import Question


def _slice(spec: str) -> slice:
    start, _, end = spec.partition(":")
    return slice(int(start or 0), int(end) if end else None)


def run_variant(name: str, answer, questions: list[Question], out: Path) -> dict:
    """Answer every question (resuming ``out``), score EM / F1 / cover-acc, return the means."""
    done = {}
    if out.exists():
        done = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    with out.open("a", encoding="utf-8") as handle:
        for i, q in enumerate(questions):
            if q.id in done:
                continue
            start = time.perf_counter()
            pred = answer(q)
            rec = {"id": q.id, "prediction": pred, "golden_answers": list(q.answers),
                   "em": exact_match(pred, q.answers), "f1": f1_score(pred, q.answers), "acc": cover_match(pred, q.answers),
                   "seconds": round(time.perf_counter() - start, 2)}
            handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
            handle.flush()
            done[q.id] = rec
            print(f"[{name}] {i + 1}/{len(questions)} {pred!r}", flush=True)
    recs = [done[q.id] for q in questions]
    return {m: round(sum(r[m] for r in recs) / len(recs), 4) for m in ("em", "f1", "acc", "seconds")} | {"n": len(recs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="/work/shared/data/hotpotqa/dev500.jsonl")
    ap.add_argument("--questions", default="0:100", help="held-apart questions, START:END")
    ap.add_argument("--checkpoint", action="append", default=[], help="NAME=PATH of an R²-Former checkpoint")
    ap.add_argument("--variants", default="", help="comma-separated subset to run (default: all)")
    ap.add_argument("--llm", default="local")
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--doc-words", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--out", type=Path, default=Path("runs/r2ag/eval"))
    ap.add_argument("--ranking-only", action="store_true", help="only the relevance heads' ranking (no LLM)")
    args = ap.parse_args()

    ds = load_dataset(args.dataset)
    questions = ds.questions[_slice(args.questions)]
    store = DocStore(ds.passages)
    encoder = load_encoder("minilm")
    checkpoints = dict(item.split("=", 1) for item in args.checkpoint)
    models = {name: load_r2former(path) for name, path in checkpoints.items()}
    first = next(iter(models.values()), None)
    wanted = set(filter(None, args.variants.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.ranking_only:
        lists = {name: tr.build_lists(questions, store, encoder, k=args.k, drop=m.config.drop_features)
                 for name, m in models.items()}
        ranking = {name: tr.ranking_quality(m, lists[name]) for name, m in models.items()}
        print(json.dumps({"dataset": args.dataset, "questions": args.questions, "checkpoints": checkpoints,
                          "ranking": ranking}, indent=1))
        return
    llm = load_llm(args.llm)

    def naive(q: Question) -> str:
        docs = [store.get(d) for d in q.metadata.get("context_ids", [])[: args.k]]
        docs = rank_and_featurize(encoder, q.text, docs)[0]  # the r order R²AG uses
        docs = [replace(d, text=shorten(d.text, args.doc_words)) for d in docs]
        req = LLMRequest(messages=tuple(brief_answer_messages(q.text, docs)), max_tokens=args.max_tokens)
        return clean_answer(llm.complete(req).text)

    variants = {"naive_rag": naive}
    if first is None:  # no vectors are injected: an untrained R²-Former only supplies the settings
        first = R2Former(R2FormerConfig(llm_hidden=int(llm.input_embeddings().weight.shape[1])))
    plain = R2AG(llm, first, encoder, R2AGSettings(docs="context", k=args.k, inject=False, doc_words=args.doc_words, max_tokens=args.max_tokens), store=store)
    variants["r2ag_no_inject"] = lambda q: plain.answer(q).text
    for name, model in models.items():
        method = R2AG(llm, model, encoder, R2AGSettings(docs="context", k=args.k, doc_words=args.doc_words, max_tokens=args.max_tokens), store=store)
        variants[name] = (lambda m: lambda q: m.answer(q).text)(method)

    summary: dict = {"dataset": args.dataset, "questions": args.questions, "k": args.k, "doc_words": args.doc_words,
                     "max_tokens": args.max_tokens, "llm": args.llm, "checkpoints": checkpoints, "answers": {},
                     "ranking": {}}
    path = args.out / "summary.json"
    if path.exists():
        old = json.loads(path.read_text())
        summary["answers"], summary["ranking"] = old.get("answers", {}), old.get("ranking", {})
    for name, fn in variants.items():
        if wanted and name not in wanted:
            continue
        summary["answers"][name] = run_variant(name, fn, questions, args.out / f"{name}.jsonl")
        if name in models:
            lists = tr.build_lists(questions, store, encoder, k=args.k, drop=models[name].config.drop_features)
            summary["ranking"][name] = tr.ranking_quality(models[name], lists)
        fresh = json.loads(path.read_text()) if path.exists() else {}  # another process may have written others
        for key in ("answers", "ranking"):
            summary[key] = {**fresh.get(key, {}), **summary[key]}
        path.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
