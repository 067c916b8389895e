"""Expected figures per method with a scripted reader, kept as data (benchmarks/baselines.yaml).

    python benchmarks/baselines.py            # recompute and compare with benchmarks/baselines.yaml
    python benchmarks/baselines.py --update   # rewrite benchmarks/baselines.yaml from a fresh run
    python benchmarks/baselines.py --docs     # regenerate the table in docs/methods/baselines.md

:func:`scripted_reader` is a :class:`~tandem.testing.fake_llm.FakeLLM` that knows nothing about the
answers: it reads the prompt it is given and replies by fixed rules (the title of the first document
listed, one reasoning sentence taken from that document, a minimal instance of a JSON schema whose
strings are that title, or the prompt's question while it lists no documents, and whose flags are
true while it lists none). The figures :func:`compute_baselines` reports for it therefore measure the
methods' control flow and retrieval (LLM calls, retrieval calls, gold-document recall) and how far
"answer with the top document's title" gets, not any model's quality.

The sample is pinned: the first 10 questions of ../shared/data/hotpotqa/dev500.jsonl over a BM25
index of its 4,858-passage pool, each method with the settings in :data:`METHOD_SETTINGS`.
tests/regression/test_baselines.py recomputes the figures and compares them with the YAML.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tandem.llm.base import LLMRequest
from tandem.methods.answers import ANSWER_MARKER

ROOT = Path(__file__).resolve().parents[1]
YAML_PATH = ROOT / "benchmarks" / "baselines.yaml"
DOCS_PATH = ROOT / "docs" / "methods" / "baselines.md"
DATA_ROOT = ROOT.parent / "shared" / "data"
START, END = "<!-- baselines:start -->", "<!-- baselines:end -->"
TOLERANCE = 1e-3
LABELS = {"em": "EM", "f1": "F1", "acc": "cover-acc", "gold_doc_recall": "gold-doc recall",
          "llm_calls_per_q": "LLM calls / q", "retrieval_calls_per_q": "retrieval calls / q", "errors": "errors"}

# one numbered document line as methods format them: "[1] Title: text"
_DOC_LINE = re.compile(r"^\[(\d+)\] ([^:\n]+): (.*)$", re.MULTILINE)
_QUESTION_LINE = re.compile(r"^Question: (.+)$", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")

# the methods with the settings the baselines run them with (bm25 index; no reranker model to load)
METHOD_SETTINGS: dict[str, dict[str, Any]] = {
    "direct": {},
    "naive_rag": {"k": 5},
    "oracle": {"mode": "paragraph"},
    "ircot": {"k": 5, "max_steps": 3},
    "dualrag": {"reranker": "none", "keyword_retriever": "index", "max_iter": 3},
    "cooprag": {"reranker": "none", "first_stage": "index", "k": 5},
    "iter_retgen": {"k": 5, "iterations": 3},
    "genground": {"reranker": "none", "max_iter": 3, "k": 6},
    "metarag": {"reranker": "none", "k": 5, "max_iter": 3, "monitor": "off"},
}
# the figures recorded per method (means over the questions)
FIGURES = ("em", "f1", "acc", "gold_doc_recall", "llm_calls_per_q", "retrieval_calls_per_q", "errors")


def _listed_docs(text: str) -> list[tuple[str, str]]:
    """(title, text) of the documents listed in the prompt's last "Documents:" block (or anywhere)."""
    start = text.rfind("Documents:")
    found = _DOC_LINE.findall(text[start:] if start >= 0 else text)
    return [(title.strip(), body.strip()) for _, title, body in found]


def schema_instance(schema: Mapping[str, Any], fill: str, flag: bool = False) -> Any:
    """A small value valid under ``schema``: strings are ``fill`` (or the first enum value), arrays
    hold one item (or none where ``maxItems`` is 0), numbers their minimum or 0, booleans ``flag``."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return schema_instance(schema[key][0], fill, flag)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {name: schema_instance(sub, fill, flag) for name, sub in props.items()}
    if kind == "array":
        if schema.get("maxItems") == 0:
            return []
        return [schema_instance(schema.get("items", {"type": "string"}), fill, flag)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return flag
    if kind == "null":
        return None
    text = fill or "unknown"
    limit = schema.get("maxLength")
    return text[:limit] if isinstance(limit, int) else text


def reader_reply(req: LLMRequest) -> str:
    """The scripted reader's reply to one request (see the module docstring)."""
    docs = _listed_docs(req.last_user)
    title = docs[0][0] if docs else ""
    if req.json_schema is not None:
        # flags such as DualRAG's need_retrieve: true while the prompt lists no documents
        questions = _QUESTION_LINE.findall(req.last_user)
        fill = title or (questions[-1].strip() if questions else "")
        return json.dumps(schema_instance(req.json_schema, fill, flag=not docs))
    system = " ".join(m.content for m in req.messages if m.role == "system")
    if ANSWER_MARKER in system:  # an IRCoT reasoning step: one sentence from the top document, then the answer
        reasoning = req.last_user.rsplit("Reasoning:\n", 1)[-1]
        if not reasoning.strip() and docs:
            return _SENTENCE_END.split(docs[0][1], 1)[0]
        return f"{ANSWER_MARKER} {title or 'unknown'}"
    return title or "unknown"


def scripted_reader() -> Any:
    """A FakeLLM answering every request with :func:`reader_reply`."""
    from tandem.testing.fake_llm import FakeLLM

    return FakeLLM(default=reader_reply, name="scripted-reader", spec="fake")


def _retrieval_calls(trace: Mapping[str, Any]) -> int:
    """Queries a method sent to its retriever: every query its serialised trace's steps recorded."""
    return sum(len(step.get("queries", [])) for step in trace.get("steps", []))


def compute_baselines(dataset_path: str | Path, n: int = 10,
                      methods: Sequence[str] = tuple(METHOD_SETTINGS)) -> dict[str, dict[str, float]]:
    """Run ``methods`` with :func:`scripted_reader` on the first ``n`` questions of ``dataset_path``
    over a BM25 index of its passage pool (built in a temporary folder); figures per method, rounded
    to 4 places."""
    from tandem.compose import build_method
    from tandem.corpus.loaders import load_dataset
    from tandem.eval.runner import run_one
    from tandem.index import build_index, open_index
    from tandem.methods import Search
    from tandem.retrieve import open_retriever

    dataset = load_dataset(dataset_path)
    questions = dataset.questions[:n]
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tandem-baselines-") as tmp:
        build_index(dataset.passages, Path(tmp) / "index", kind="bm25")
        index = open_index(Path(tmp) / "index")
        search = Search(open_retriever(index), index.store)
        for name in methods:
            method = build_method(name, scripted_reader(), search, index.store, **METHOD_SETTINGS[name])
            records = [run_one(method, q, judge_llm=None, reanswer_llm=None) for q in questions]
            ok = [r for r in records if "error" not in r]
            count = max(1, len(ok))
            recalls = [r["gold_doc_recall"] for r in ok if r["gold_doc_recall"] is not None]
            figures = {
                "em": sum(r["scores"]["em"] for r in ok) / count,
                "f1": sum(r["scores"]["f1"] for r in ok) / count,
                "acc": sum(r["scores"]["acc"] for r in ok) / count,
                "gold_doc_recall": sum(recalls) / len(recalls) if recalls else 0.0,
                "llm_calls_per_q": sum(r["llm_calls"] for r in ok) / count,
                "retrieval_calls_per_q": sum(_retrieval_calls(r["trace"]) for r in ok) / count,
                "errors": float(len(records) - len(ok)),
            }
            results[name] = {key: round(float(figures[key]), 4) for key in FIGURES}
    return results


def compute(sample: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Figures per method for ``sample`` (dataset path relative to ../shared/data, question count)."""
    return compute_baselines(DATA_ROOT / sample["dataset"], n=int(sample["questions"]))


def default_sample() -> dict[str, Any]:
    """The pinned sample."""
    return {"dataset": "hotpotqa/dev500.jsonl", "questions": 10, "index": "bm25", "llm": "scripted reader"}


def load(path: Path = YAML_PATH) -> dict[str, Any]:
    """The YAML file's content: ``sample``, ``settings`` and ``methods`` (figures per method)."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def write(figures: dict[str, dict[str, float]], sample: dict[str, Any], path: Path = YAML_PATH) -> None:
    """Rewrite the YAML file from ``figures``."""
    header = ("# Expected figures per method with the scripted reader (benchmarks/baselines.py): means over\n"
              "# the sample's questions. Generated by `python benchmarks/baselines.py --update`; checked by\n"
              "# tests/regression/test_baselines.py.\n")
    body = {"sample": sample, "settings": {m: METHOD_SETTINGS[m] for m in figures}, "methods": figures}
    path.write_text(header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True), encoding="utf-8")


def differences(expected: dict[str, dict[str, float]], actual: dict[str, dict[str, float]],
                tolerance: float = TOLERANCE) -> list[str]:
    """One line per figure that is missing or differs by more than ``tolerance``."""
    lines = []
    for method in sorted(set(expected) | set(actual)):
        if method not in actual or method not in expected:
            lines.append(f"{method}: {'missing from the run' if method not in actual else 'not in the YAML'}")
            continue
        for key in sorted(set(expected[method]) | set(actual[method])):
            want, got = expected[method].get(key), actual[method].get(key)
            if want is None or got is None or abs(float(want) - float(got)) > tolerance:
                lines.append(f"{method}.{key}: expected {want}, got {got}")
    return lines


def table(data: dict[str, Any]) -> str:
    """The markdown table of the YAML's figures, with the command that reproduces them."""
    sample = data["sample"]
    keys = list(LABELS)
    lines = [
        f"Scripted reader on the first {sample['questions']} questions of `{sample['dataset']}`, "
        f"{sample['index']} index over its passage pool; settings per method in `benchmarks/baselines.yaml`. "
        "Reproduce: `python benchmarks/baselines.py --update --docs`.",
        "",
        "| method | " + " | ".join(LABELS[k] for k in keys) + " |",
        "|---" * (len(keys) + 1) + "|",
    ]
    for method, figures in data["methods"].items():
        cells = [f"{figures[k]:.0f}" if k == "errors" else f"{figures[k]:.2f}" if k.endswith("_per_q")
                 else f"{figures[k]:.3f}" for k in keys]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def update_docs(data: dict[str, Any], path: Path = DOCS_PATH) -> None:
    """Replace the text between the marker comments in ``path`` with :func:`table`."""
    text = path.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{path} lacks the markers {START} ... {END}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{START}\n{table(data)}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Compare (default), --update the YAML and/or regenerate the --docs table; 1 on a mismatch."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="rewrite benchmarks/baselines.yaml from a fresh run")
    ap.add_argument("--docs", action="store_true", help="regenerate the table in docs/methods/baselines.md")
    args = ap.parse_args(argv)
    from tandem.logs import quiet_third_party

    quiet_third_party(verbose=False)
    if args.update:
        sample = load()["sample"] if YAML_PATH.exists() else default_sample()
        write(compute(sample), sample)
        print(f"wrote {YAML_PATH.relative_to(ROOT)}")
    elif not args.docs:
        data = load()
        diff = differences(data["methods"], compute(data["sample"]))
        for line in diff:
            print(line)
        print("baselines: " + ("all figures match" if not diff else f"{len(diff)} figure(s) differ"))
        if diff:
            return 1
    if args.docs:
        update_docs(load())
        print(f"updated {DOCS_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
