"""Graph retrieval (personalized PageRank over the passage graph) against bm25 / dense / hybrid.

Modes, each printing JSON:

    # settings chosen by 5-fold cross-validation over folds mixing every set; held-out figures
    python benchmarks/graph_retrieval.py cv --work indexes/bench-graph > runs/graph-cv.json
    # ranker variants (features, depth, LightGBM settings, first stage) on held-out folds, candidates computed once
    python benchmarks/graph_retrieval.py ablate --fold-settings runs/graph-cv.json --variant v1 '{}' > runs/graph-ablate.json
    # figures on every set, per fold: R@2/5/10, all-gold@5, MRR, nDCG@10, build time, graph size, query p50/p95
    python benchmarks/graph_retrieval.py report --work indexes/bench-graph > runs/graph-report.json
    # dev500 questions over larger pools (other sets' passages added; a 50 k pool of their windows): recall, latency
    python benchmarks/graph_retrieval.py pools --work indexes/bench-graph > runs/graph-pools.json
    # query latency alone (run it on a quiet machine; --clock cpu times process CPU time)
    python benchmarks/graph_retrieval.py latency --sets hotpotqa --work indexes/bench-graph
    # gold-document recall of tandem eval qa runs, over the questions all of them have done
    python benchmarks/graph_retrieval.py methods --runs runs/m-cooprag-hybrid runs/m-cooprag-graph

``--work`` holds one hybrid + graph index per set, built once and reused (``--rebuild`` to time the
builds again). Sets: ``hotpotqa`` (dev500 pool; figures also for 0-249 (the bridge questions) and
250-499 (the comparison questions)), ``musique`` (MuSiQue-100 with its corpus) and ``fixtures`` (the
2WikiMultihopQA, HotpotQA and MuSiQue examples of ../shared/data/fixtures in their original formats, one pool,
30 questions).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tandem.corpus import load_dataset
from tandem.corpus.chunking import chunk_text
from tandem.eval.retrieval import evaluate_retrieval, latency_ms
from tandem.index import add_extras, build_index, open_index
from tandem.index.encoder import load_encoder
from tandem.index.passage_graph import DEFAULT_GRAPH, GraphExtra
from tandem.model_files import offline_env
from tandem.retrieve import open_retriever
from tandem.retrieve.graph import GraphRetriever, GraphStageSettings
from tandem.types import Document, Hit, Question, doc_id_for

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SETS = {
    "hotpotqa": [SHARED / "hotpotqa/dev500.jsonl"],
    "musique": [SHARED / "musique/hipporag_100.json"],
    "fixtures": [SHARED / "fixtures/wiki_example.jsonl", SHARED / "fixtures/hotpot_example.jsonl",
                 SHARED / "fixtures/musique_example.jsonl"],
}
# larger pools for the dev500 questions: dev500's passages plus every other local set's (about 9.6 k)
POOLS = {"pool-mixed": [*SETS["hotpotqa"], SHARED / "musique/hipporag_100.json", SHARED / "nq/nq-open-oracle.jsonl.gz",
                        *SETS["fixtures"]]}
# a 50 k-passage scale pool for the same questions, built at run time from the real local passages: the
# mixed pool plus 32-word windows (16 words of overlap; tandem.corpus.chunking.chunk_text) cut from each
# of its passages that is not a dev500 gold passage, titled as their source (a chunked corpus: many
# passages share a title). The windows are near-duplicate distractors, not new topics (docs/graph-tuning.md).
SCALE_POOLS = {"pool-50k": ("pool-mixed", 32, 16)}
FOLDS = 5  # question i of every set is in fold i mod 5: each fold mixes datasets and question types
# the defaults before the cross-validated search (chosen on dev500 questions 250-499), for comparison
ISSUE16 = {"expand_hits": 0, "expand_weight": 0.0, "hub_damping": 0.0, "ranker": "none"}
METRICS = ("recall@2", "recall@5", "recall@10", "all_gold@5", "mrr", "ndcg@10")


def load_set(name: str) -> tuple[list[Question], list]:
    """Questions and passage pool of a set (several files: pools merged, duplicates by id dropped)."""
    if name in SCALE_POOLS:
        return scale_pool(*SCALE_POOLS[name])
    questions: list[Question] = []
    pool: dict[str, Any] = {}
    for path in SETS.get(name) or POOLS[name]:
        ds = load_dataset(path)
        questions += ds.questions
        for doc in ds.passages:
            pool.setdefault(doc.id, doc)
    return questions, list(pool.values())


def scale_pool(base: str, words: int, overlap: int) -> tuple[list[Question], list]:
    """``base``'s questions and pool, plus word windows cut from every pool passage that is no dev500
    question's gold passage (so a window never competes with the gold passage it was cut from)."""
    questions, pool = load_set(base)
    gold = {g for q in load_set("hotpotqa")[0] for g in q.gold_doc_ids}
    docs = {d.id: d for d in pool}
    for doc in pool:
        if doc.id in gold:
            continue
        for piece in chunk_text(doc.text, words, overlap):
            window = Document(doc_id_for(doc.title, piece), doc.title, piece, {"window_of": doc.id})
            docs.setdefault(window.id, window)
    return questions, list(docs.values())


def ensure_index(name: str, work: Path, rebuild: bool) -> tuple[Any, dict[str, float]]:
    """The set's hybrid index with the graph extra, and build times (hybrid; graph added on top)."""
    _, passages = load_set(name)
    folder = work / name
    times: dict[str, float] = {}
    if rebuild or not (folder / "manifest.json").exists():
        encoder = load_encoder("minilm")
        start = time.perf_counter()
        build_index(passages, folder, kind="hybrid", encoder=encoder)
        times["hybrid_build_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        add_extras(folder, [GraphExtra()])
        times["graph_add_s"] = round(time.perf_counter() - start, 2)
    return open_index(folder, corpus=passages), times


def scores(questions: Sequence[Question], retriever: Any) -> dict[str, float]:
    _, metrics = evaluate_retrieval(questions, retriever, (2, 5, 10))
    return {m: round(100 * metrics[m], 1) for m in METRICS}


def part_scores(questions: Sequence[Question], retriever: Any, parts: dict[str, slice]) -> dict[str, dict[str, float]]:
    """Metrics over each slice of the questions, from one retrieval run over all of them."""
    records, _ = evaluate_retrieval(questions, retriever, (2, 5, 10))
    by_id = {r["id"]: r["scores"] for r in records}
    out = {}
    for part, where in parts.items():
        rows = [by_id[q.id] for q in questions[where] if q.id in by_id]
        out[part] = {m: round(100 * sum(r[m] for r in rows) / len(rows), 1) for m in METRICS}
    return out


class Cached:
    """A first stage whose rankings are computed once per query (the settings search reuses them)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.memo = inner, inner.name, {}

    def search_batch(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        todo = [q for q in queries if (q, k) not in self.memo]
        for q, hits in zip(todo, self.inner.search_batch(todo, k) if todo else [], strict=True):
            self.memo[(q, k)] = hits
        return [self.memo[(q, k)] for q in queries]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]


def report(work: Path, rebuild: bool, sets: Sequence[str], queries: int, settings: dict[str, Any],
           variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Figures of bm25 / dense / hybrid / graph (the issue-16 defaults, the fused order without the ranker,
    the current defaults; and any named ``variants`` of the
    graph settings) on each set."""
    defaults = GraphStageSettings().to_dict()  # the graph stage's shipped settings
    out: dict[str, Any] = {"graph_settings": {**defaults, **settings}, "variants": {n: {**defaults, **v} for n, v in variants.items()}}
    for name in sets:
        idx, times = ensure_index(name, work, rebuild)
        questions = load_set(name)[0]
        parts = {"all": slice(None), **{f"fold {f}": slice(f, None, FOLDS) for f in range(FOLDS)}}
        if name == "hotpotqa":  # dev500 is 250 bridge questions (0-249) followed by 250 comparison questions
            parts.update({"0-249 (bridge)": slice(0, 250), "250-499 (comparison)": slice(250, 500)})
        graph = idx.manifest.params["graph"]
        start = time.perf_counter()
        GraphExtra(**{k: graph[k] for k in DEFAULT_GRAPH})(idx.store)  # the graph's share of a build
        times["graph_build_s"] = round(time.perf_counter() - start, 2)
        entry: dict[str, Any] = {"passages": idx.manifest.doc_count, "questions": len(questions), **times,
                                 "graph_edges": {"mention": graph["mention_edges"], "entity": graph["entity_edges"]},
                                 "graph_bytes": sum((idx.folder / "extras" / f"{n}.npy").stat().st_size
                                                    for n in idx.manifest.extras if n.startswith("graph_"))}
        kinds: dict[str, tuple[str, dict[str, Any]]] = {
            "bm25": ("bm25", {}), "dense": ("dense", {}), "hybrid": ("hybrid", {}),
            "graph (before: issue 16 defaults)": ("graph", {**ISSUE16, **settings}),
            "graph ranker=none": ("graph", {**settings, "ranker": "none"}), "graph": ("graph", settings),
            **{f"graph {label}": ("graph", options) for label, options in variants.items()},
        }
        for label, (kind, options) in kinds.items():
            retriever = open_retriever(idx, kind, **options)
            entry[label] = part_scores(questions, retriever, parts)
            timed = [q.text for q in questions[:queries]]
            entry[label].update(latency_ms(retriever, timed))
            if isinstance(retriever, GraphRetriever):  # the graph stage alone: first-stage rankings cached
                first = Cached(retriever.first)
                first.search_batch(timed, int(retriever.settings["depth"]))
                stage = GraphRetriever(idx, first, dense=retriever.dense, **retriever.settings)
                entry[label].update({f"graph_stage_{k}": v for k, v in latency_ms(stage, timed).items()})
        entry["load_average"] = [round(x, 2) for x in os.getloadavg()]  # contention inflates the latencies
        out[name] = entry
    return out


def pool_sizes(work: Path, rebuild: bool, queries: int, pools: Sequence[str]) -> dict[str, Any]:
    """How the dev500 figures move with the pool: dev500's own pool, then each POOLS pool (other sets'
    passages added as distractors) and SCALE_POOLS pool (windows of those passages added); hybrid, graph
    without the ranker, graph with the defaults."""
    questions = load_set("hotpotqa")[0]
    out: dict[str, Any] = {}
    for name in pools:
        idx, times = ensure_index(name, work, rebuild)
        entry: dict[str, Any] = {"passages": idx.manifest.doc_count, **times}
        for label, kind, options in (("hybrid", "hybrid", {}), ("graph ranker=none", "graph", {"ranker": "none"}),
                                     ("graph", "graph", {})):
            retriever = open_retriever(idx, kind, **options)
            entry[label] = {**scores(questions, retriever), **latency_ms(retriever, [q.text for q in questions[:queries]])}
        entry["load_average"] = [round(x, 2) for x in os.getloadavg()]
        out[name] = entry
    return out


def latency(work: Path, sets: Sequence[str], queries: int, settings: dict[str, Any], clock: str = "wall") -> dict[str, Any]:
    """Single-query p50/p95 only (no recall), for a run on a quiet machine; ``clock="cpu"`` times the
    process's CPU time instead of wall time (what a loaded, shared machine distorts least)."""
    timer = time.process_time if clock == "cpu" else time.perf_counter
    out: dict[str, Any] = {"clock": clock}
    for name in sets:
        idx, _ = ensure_index(name, work, False)
        timed = [q.text for q in load_set(name)[0][:queries]]
        entry: dict[str, Any] = {kind: latency_ms(open_retriever(idx, kind, **(settings if kind == "graph" else {})), timed,
                                             clock=timer) for kind in ("bm25", "dense", "hybrid", "graph")}
        first = Cached(open_retriever(idx, idx.kind))
        first.search_batch(timed, int(settings.get("depth", GraphStageSettings().depth)))
        entry["graph_stage"] = latency_ms(GraphRetriever(idx, first, **settings), timed, clock=timer)
        entry["load_average"] = [round(x, 2) for x in os.getloadavg()]
        out[name] = entry
    return out


def methods(runs: Sequence[Path]) -> dict[str, Any]:
    """Gold-document recall of ``tandem eval qa`` run folders (finished or not): each run's questions
    done, and the mean recall over the questions every given run has done (a fair comparison)."""
    from tandem.eval.runner import PREDICTIONS, read_finished

    done = {str(run): read_finished(run / PREDICTIONS) for run in runs}  # read only: a run may be writing
    common = set.intersection(*(set(records) for records in done.values())) if done else set()
    out: dict[str, Any] = {"common_questions": len(common)}
    for run, records in done.items():
        shared = [records[q]["gold_doc_recall"] for q in sorted(common)]
        out[run] = {"questions": len(records),
                    "gold_doc_recall_common": round(sum(shared) / len(shared), 3) if shared else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("cv", "ablate", "report", "pools", "latency", "methods"))
    parser.add_argument("--first-stage", help='ablate: the first stage as JSON, e.g. {"kind": "hybrid", '
                                             '"weights": [0.5, 1.0]} (default: the index\'s kind)')
    parser.add_argument("--fold-settings", type=Path, help="ablate: a cv run's JSON; each fold's chosen settings "
                                                            "(default: the shipped settings on every fold)")
    parser.add_argument("--runs", nargs="+", type=Path, default=[], help="methods: tandem eval qa run folders")
    parser.add_argument("--work", type=Path, default=Path("indexes/bench-graph"))
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=[*SETS, *POOLS, *SCALE_POOLS],
                        help="the sets (latency: also a pool, timed with its first questions, dev500's)")
    parser.add_argument("--pools", nargs="+", default=["hotpotqa", *POOLS, *SCALE_POOLS],
                        choices=["hotpotqa", *POOLS, *SCALE_POOLS], help="pools: the pools to measure, smallest first")
    parser.add_argument("--queries", type=int, default=200, help="queries timed for latency")
    parser.add_argument("--rebuild", action="store_true", help="build the indexes again (and time the builds)")
    parser.add_argument("--set", dest="settings", action="append", default=[], help="graph retriever KEY=VALUE")
    parser.add_argument("--variant", nargs=2, action="append", default=[], metavar=("LABEL", "JSON"),
                        help="report: also a graph retriever with these settings (a JSON object); ablate: a ranker "
                             "variant ({features: [...], rerank_depth, entity_hits, params: {...}, rounds, bag, "
                             "set_weights: {set: weight}})")
    parser.add_argument("--ranker", action="store_true", help="cv: also cross-validate the learned ranker")
    parser.add_argument("--nested", action="store_true", help="ablate: also choose among the variants by an inner "
                                                               "cross-validation in each outer fold (held-out figure of the choice)")
    parser.add_argument("--save-ranker", type=Path, help="cv: write the ranker trained on all folds here "
                                                           "(src/tandem/retrieve/graph_ranker.txt ships: update its PROVENANCE.md)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="latency: wall time or process CPU time")
    args = parser.parse_args()
    offline_env()
    settings = {k: json.loads(v) if v[:1].isdigit() or v in ("true", "false") else v
                for k, _, v in (s.partition("=") for s in args.settings)}
    variants = {label: json.loads(options) for label, options in args.variant}
    if args.mode in ("cv", "ablate"):
        from graph_cv import ablate, cross_validate
    if args.mode == "cv":
        result = cross_validate(args.work, args.rebuild, ranker=args.ranker or args.save_ranker is not None,
                                save_ranker_to=args.save_ranker)
    elif args.mode == "ablate":
        chosen = ([f["chosen"] for f in json.loads(args.fold_settings.read_text())["folds"]] if args.fold_settings
                  else [{}] * FOLDS)
        result = ablate(args.work, args.rebuild, variants or {"defaults": {}}, chosen, settings=settings,
                        first_stage=json.loads(args.first_stage) if args.first_stage else None, nested=args.nested)
    elif args.mode == "pools":
        result = pool_sizes(args.work, args.rebuild, args.queries, args.pools)
    elif args.mode == "methods":
        result = methods(args.runs)
    elif args.mode == "latency":
        result = latency(args.work, args.sets, args.queries, settings, args.clock)
    else:
        result = report(args.work, args.rebuild, args.sets, args.queries, settings, variants)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
