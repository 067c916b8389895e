"""Run folders in the field's formats: FlashRAG's ``intermediate_data.json`` + ``metric_score.txt``
for a QA run, and a TREC run file (``qid Q0 docid rank score tag``) with its qrels for a QA or a
retrieval run.

FlashRAG item (``flashrag.dataset.Item.to_dict``): ``id``, ``question``, ``golden_answers``,
``metadata`` (when there is any) and ``output`` with ``retrieval_result`` (the passages shown to the
LLM, ``{id, contents}`` with contents ``"Title"\\ntext`` as FlashRAG corpora hold them), ``prompt``
(the messages of the run's last LLM call, the one that produced the answer), ``raw_pred`` (that
call's output), ``pred`` (the prediction scored) and ``metric_score`` (per metric), then tandem's own
fields (``reanswer``, ``gold_doc_recall``, ``queries``, ``llm_calls``, ``tokens``, ``seconds``,
``error``). ``metric_score.txt`` holds ``name: value`` lines of the run's means.

TREC: a retrieval run's hits keep their ranks and scores (scores that tie in single precision, as
trec_eval reads them, nudged apart by one float32 step, so TREC tools, which rank by score, see the
run's order); a QA run's ranked list is the passages
read (``docs_read``, the ones its ``gold_doc_recall`` counts) or every passage retrieved, first
retrieval first (``hits="retrieved"``), scored 1/rank. Qrels: ``qid 0 docid 1`` per gold passage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tandem.corpus.sources import is_hf_spec
from tandem.errors import DataError
from tandem.eval.rundir import CONFIG_FILE, METRICS_FILE, PER_QUESTION, PREDICTIONS
from tandem.io import atomic_open, read_jsonl, write_json_atomic
from tandem.outdir import atomic_dir, read_marker
from tandem.types import Document, Question

RUN_FILES = {"qa-run": PREDICTIONS, "retrieval-run": PER_QUESTION}
INTERMEDIATE_FILE = "intermediate_data.json"
METRIC_SCORE_FILE = "metric_score.txt"
#: tandem metric -> FlashRAG's name for it, where they differ
FLASHRAG_METRIC_NAMES = {"rouge_l": "rouge-l"}
HIT_SOURCES = ("read", "retrieved")


@dataclass
class Run:
    """A run folder's records, config and metrics."""

    folder: Path
    kind: str
    config: dict[str, Any]
    records: list[dict[str, Any]]
    metrics: dict[str, Any] = field(default_factory=dict)


def read_run(folder: str | Path) -> Run:
    """A ``tandem eval qa`` or ``tandem eval retrieval`` run folder; DataError naming what is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError("not a run folder (no such folder)", str(folder))
    config = _json(folder / CONFIG_FILE)
    kind = (read_marker(folder) or {}).get("kind") or {"qa": "qa-run", "retrieval": "retrieval-run"}.get(config.get("task"))
    if kind not in RUN_FILES:
        raise DataError(f"not a tandem run folder (kind {kind!r}; expected a `tandem eval qa` or `tandem eval "
                        "retrieval` --out folder)", str(folder))
    path = folder / RUN_FILES[kind]
    if not path.exists():
        raise DataError(f"no {RUN_FILES[kind]}: the run has not written any question yet", str(folder))
    records = [rec for _, rec in read_jsonl(path)]
    return Run(folder, kind, config, records, _json(folder / METRICS_FILE))


def _json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed JSON ({exc.msg})", str(path), exc.lineno) from exc
    return data if isinstance(data, dict) else {}


# --- what a record retrieved --------------------------------------------------------------------

def _trace_hits(record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for step in (record.get("trace") or {}).get("steps", []):
        yield from sorted(step.get("hits", []), key=lambda h: h["rank"])


def ranked(record: Mapping[str, Any], kind: str, hits: str = "read") -> list[tuple[str, float]]:
    """One question's ranked ``(doc_id, score)`` list, best first, scores strictly falling (see module doc)."""
    if kind == "retrieval-run":
        pairs = [(h["doc_id"], float(h["score"])) for h in sorted(record.get("hits", []), key=lambda h: h["rank"])]
        if all(a[1] >= b[1] for a, b in zip(pairs, pairs[1:], strict=False)):
            return _untied(pairs)
        ids = [d for d, _ in pairs]  # a reranked list whose scores do not follow its ranks
    elif hits == "read":
        ids = list((record.get("trace") or {}).get("docs_read", []))
    elif hits == "retrieved":
        ids = list(dict.fromkeys(h["doc_id"] for h in _trace_hits(record)))
    else:
        raise DataError(f"hits {hits!r}: expected one of {', '.join(HIT_SOURCES)}")
    return _untied([(d, 1.0 / rank) for rank, d in enumerate(ids, start=1)])


def _untied(pairs: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Scores made strictly decreasing as trec_eval reads them (single-precision floats): a score that
    would tie its predecessor there moves down to the next float32 below it. TREC tools rank by score
    (ties by doc id), so the file then keeps the run's order and its measures equal the run's; the
    change is at most one float32 step (~1e-7 of the score) per tie."""
    import numpy as np

    out: list[tuple[str, float]] = []
    last = np.float32(np.inf)
    for doc_id, score in pairs:
        single = np.float32(score)
        if single >= last:
            single = np.nextafter(last, np.float32(-np.inf))
            score = float(single)
        last = single
        out.append((doc_id, score))
    return out


def _trec_id(value: str) -> str:
    """An id as a TREC column: whitespace (which would split the column) percent-encoded."""
    return re.sub(r"\s", lambda m: quote(m.group()), str(value))


def trec_lines(run: Run, *, tag: str, hits: str = "read") -> Iterator[str]:
    """``qid Q0 docid rank score tag`` lines, question by question, rank ascending."""
    for record in run.records:
        for rank, (doc_id, score) in enumerate(ranked(record, run.kind, hits), start=1):
            yield f"{_trec_id(record['id'])} Q0 {_trec_id(doc_id)} {rank} {score!r} {_trec_id(tag)}"


def qrels_lines(run: Run, gold: Mapping[str, tuple[str, ...]]) -> Iterator[str]:
    """``qid 0 docid 1`` for every gold passage of the run's questions."""
    for record in run.records:
        for doc_id in gold.get(record["id"], ()):
            yield f"{_trec_id(record['id'])} 0 {_trec_id(doc_id)} 1"


def default_tag(run: Run) -> str:
    """``tandem-<method>`` for a QA run, ``tandem-<retriever>`` for a retrieval run."""
    cfg = run.config
    name = cfg.get("method") if run.kind == "qa-run" else cfg.get("retriever")
    return f"tandem-{name}" if isinstance(name, str) and name else "tandem"


def run_gold(run: Run, questions: Mapping[str, Question] | None) -> dict[str, tuple[str, ...]]:
    """Gold passage ids per question: a retrieval run's records carry them; a QA run's come from its dataset."""
    if run.kind == "retrieval-run":
        return {r["id"]: tuple(r.get("gold_doc_ids", ())) for r in run.records}
    return {qid: q.gold_doc_ids for qid, q in (questions or {}).items()}


def export_trec(run: Run, out: str | Path, *, qrels: str | Path | None = None, tag: str | None = None,
                hits: str = "read", questions: Mapping[str, Question] | None = None) -> dict[str, Any]:
    """Write the TREC run file (and qrels when ``qrels`` is given and there is gold), atomically."""
    if hits not in HIT_SOURCES:
        raise DataError(f"hits {hits!r}: expected one of {', '.join(HIT_SOURCES)}")
    stats: dict[str, Any] = {"questions": len(run.records), "lines": 0, "qrels": 0}
    stats["lines"] = _write_lines(out, trec_lines(run, tag=tag or default_tag(run), hits=hits))
    if qrels is not None:
        gold = run_gold(run, questions)
        if not any(gold.values()):
            raise DataError("no gold passages for the run's questions: no qrels to write (a QA run needs its "
                            "dataset: give --dataset)", str(run.folder))
        stats["qrels"] = _write_lines(qrels, qrels_lines(run, gold))
    return stats


def _write_lines(path: str | Path, lines: Iterator[str]) -> int:
    n = 0
    with atomic_open(path) as handle:
        for line in lines:
            handle.write(line + "\n")
            n += 1
    return n


# --- FlashRAG -----------------------------------------------------------------------------------

def flashrag_contents(doc: Document) -> str:
    """A passage as FlashRAG corpora store it: ``"Title"\\ntext`` (the text alone without a title)."""
    return f'"{doc.title}"\n{doc.text}' if doc.title else doc.text


def flashrag_item(record: Mapping[str, Any], doc: Callable[[str], Document], question: Question | None) -> dict[str, Any]:
    """One QA record as a FlashRAG ``Item.to_dict()``; ``doc(id)`` gives a passage's text."""
    trace = record.get("trace") or {}
    calls = [c for s in trace.get("steps", []) for c in s.get("llm_calls", [])]
    last = calls[-1] if calls else None
    output: dict[str, Any] = {
        "retrieval_result": [{"id": d, "contents": flashrag_contents(doc(d))} for d in trace.get("docs_read", [])],
        "prompt": list(last["messages"]) if last else None,
        "raw_pred": last["output"] if last else None,
        "pred": record.get("prediction", ""),
        "metric_score": {FLASHRAG_METRIC_NAMES.get(k, k): v for k, v in (record.get("scores") or {}).items()},
    }
    for key in ("reanswer", "gold_doc_recall", "llm_calls", "tokens", "seconds", "error"):
        if record.get(key) is not None:
            output[key] = record[key]
    output["queries"] = [q for s in trace.get("steps", []) for q in s.get("queries", [])]
    item: dict[str, Any] = {"id": record["id"], "question": record.get("question", ""),
                            "golden_answers": list(record.get("golden_answers", [])), "output": output}
    if question is not None:
        meta = {k: v for k, v in question.metadata.items() if k != "context_ids"}
        item["metadata"] = {**meta, "gold_doc_ids": list(question.gold_doc_ids)}
    return item


def metric_score_text(metrics: Mapping[str, Any], score_keys: list[str]) -> str:
    """FlashRAG's ``metric_score.txt``: ``name: value`` per metric, in the order the run scored them."""
    keys = [k for k in [*score_keys, "gold_doc_recall"] if isinstance(metrics.get(k), int | float)]
    return "".join(f"{FLASHRAG_METRIC_NAMES.get(k, k)}: {metrics[k]}\n" for k in keys)


def export_flashrag(run: Run, out_dir: str | Path, doc: Callable[[str], Document],
                    questions: Mapping[str, Question] | None = None) -> dict[str, Any]:
    """Write ``intermediate_data.json`` and ``metric_score.txt`` into ``out_dir`` (replaced as a whole)."""
    if run.kind != "qa-run":
        raise DataError("a FlashRAG export needs a `tandem eval qa` run (this is a retrieval run: "
                        "export it with `tandem export trec`)", str(run.folder))
    questions = questions or {}
    items = [flashrag_item(r, doc, questions.get(r["id"])) for r in run.records]
    score_keys = list(dict.fromkeys(k for r in run.records for k in (r.get("scores") or {})))
    metrics = run.metrics or _means(run.records, score_keys)
    with atomic_dir(out_dir, "flashrag-export") as tmp:
        with atomic_open(tmp / INTERMEDIATE_FILE) as handle:
            json.dump(items, handle, indent=4, ensure_ascii=False)
        with atomic_open(tmp / METRIC_SCORE_FILE) as handle:
            handle.write(metric_score_text(metrics, score_keys))
        write_json_atomic(tmp / "source.json", {"run": str(run.folder), "kind": run.kind, "items": len(items)})
    return {"items": len(items), "with_metadata": sum(1 for i in items if "metadata" in i),
            "errors": sum(1 for i in items if "error" in i["output"])}


def _means(records: list[dict[str, Any]], score_keys: list[str]) -> dict[str, float]:
    """Per-metric means over the answered records (a run whose metrics.json is missing)."""
    from tandem.eval.runner import summarize

    return summarize(records) if score_keys else {}


# --- what the run read: its index's passages and its dataset's questions -------------------------

def _given_or_configured(given: str | Path | None, run: Run, key: str) -> Path | str | None:
    value = given if given is not None else run.config.get(key)
    return value if value is None or is_hf_spec(value) else Path(value)


def index_passages(run: Run, index: str | Path | None = None) -> Callable[[str], Document]:
    """``doc(id)`` over the documents of the run's index (``index`` overrides the one in its config)."""
    from tandem.index.store import DocStore

    folder = _given_or_configured(index, run, "index")
    if folder is None or not Path(folder).is_dir():
        raise DataError(f"the run's index {str(folder) if folder else '(none in its config)'} is not there: give "
                        "--index (the folder the run searched) for the passages' texts", str(run.folder))
    try:
        store = DocStore.load(Path(folder))
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"cannot read the index's documents ({type(exc).__name__}: {exc})", str(folder)) from None

    def doc(doc_id: str) -> Document:
        if doc_id not in store:
            raise DataError(f"passage {doc_id!r} is not in the index: give --index (the folder the run searched)",
                            str(folder))
        return store.get(doc_id)

    return doc


def run_questions(run: Run, dataset: str | Path | None = None) -> dict[str, Question] | None:
    """The run's questions by id, from its dataset (``dataset`` overrides its config); None when the
    dataset is not there (the exports then carry no metadata or QA-run qrels)."""
    from tandem.corpus import load_dataset

    path = _given_or_configured(dataset, run, "dataset")
    if path is None or (isinstance(path, Path) and not path.exists()):
        if dataset is not None:
            raise DataError("no such file", str(dataset))
        return None
    return {q.id: q for q in load_dataset(path, format=run.config.get("format")).questions}
