"""Record parsers for each supported QA and corpus format, and detection from a record's keys.

A QA parser turns one record into a Question plus the passages that came with it (its
context); gold passages are marked by putting their ids in ``Question.gold_doc_ids``. Passage ids
are content hashes (``doc_id_for``), so the same paragraph gets the same id in every question
and in a separately supplied corpus file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tandem.types import Document, Question, doc_id_for


class MissingField(Exception):
    """A record lacks a required field; the loader turns it into a DataError with file:line."""


def join_sentences(sentences: Iterable[str]) -> str:
    """A passage's text from its sentences, as HotpotQA-style parsers and title maps both join them
    (so the same paragraph gets the same content id either way)."""
    return " ".join(str(s).strip() for s in sentences)


def need(rec: dict[str, Any], key: str, kind: type | tuple[type, ...] | None = None) -> Any:
    """Return ``rec[key]``, raising MissingField if absent (or of the wrong JSON type)."""
    if key not in rec or rec[key] is None:
        raise MissingField(f"missing required field {key!r}")
    value = rec[key]
    if kind is not None and not isinstance(value, kind):
        raise MissingField(f"field {key!r} should be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _doc(title: str, text: str, **metadata: Any) -> Document:
    return Document(doc_id_for(title, text), title.strip(), text.strip(), metadata)


def _question(qid: Any, text: str, answers: list[str], gold: list[Document], context: list[Document], **meta: Any) -> Question:
    gold_ids = tuple(dict.fromkeys(d.id for d in gold))
    meta["context_ids"] = [d.id for d in context]
    return Question(str(qid), text.strip(), tuple(str(a) for a in answers if str(a).strip()), gold_ids, meta)


# --- QA formats -------------------------------------------------------------------------------

def _columns_to_rows(value: Any, key: str) -> list[Any]:
    """A list of items as given, or the Hugging Face column layout (a dict of equal-length lists, as
    ``datasets`` stores a sequence of structs) turned into a list of dicts."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        columns = {k: v for k, v in value.items() if isinstance(v, list)}
        lengths = {len(v) for v in columns.values()}
        if len(columns) != len(value) or len(lengths) > 1:
            raise MissingField(f"field {key!r}: a dict of lists of equal length expected (Hugging Face layout)")
        n = lengths.pop() if lengths else 0
        return [{k: v[i] for k, v in columns.items()} for i in range(n)]
    raise MissingField(f"field {key!r} should be list or dict, got {type(value).__name__}")


def _pairs(rec: dict[str, Any], key: str, first: str, second: tuple[str, ...]) -> list[tuple[Any, Any]]:
    """``rec[key]`` as (first, second) pairs from any of the layouts: ``[[a, b], ...]`` (original
    releases), ``[{first: a, second: b}, ...]`` or ``{first: [a, ...], second: [b, ...]}`` (Hugging
    Face). ``second`` lists the accepted names of the second member (``sentences`` / ``content``)."""
    pairs = []
    for item in _columns_to_rows(need(rec, key), key):
        if isinstance(item, dict):
            name = next((n for n in second if n in item), None)
            if first not in item or name is None:
                raise MissingField(f"field {key!r}: an item lacks {first!r} or {second[0]!r}")
            pairs.append((item[first], item[name]))
        elif isinstance(item, list | tuple) and len(item) == 2:
            pairs.append((item[0], item[1]))
        else:
            raise MissingField(f"field {key!r}: an item is not a [{first}, {second[0]}] pair")
    return pairs


def _evidences(value: Any) -> list[list[Any]]:
    """2WikiMultihopQA evidence triples [subject, relation, object]; the Hugging Face layout's
    ``{fact, relation, entity}`` columns become the same triples."""
    rows = _columns_to_rows(value, "evidences")
    return [[r.get("fact"), r.get("relation"), r.get("entity")] if isinstance(r, dict) else list(r) for r in rows]


def parse_hotpotqa(rec: dict[str, Any]) -> tuple[Question, list[Document]]:
    """HotpotQA / 2WikiMultihopQA, original releases (context ``[[title, [sentences]]]``,
    supporting_facts ``[[title, sent_id]]``) and Hugging Face layouts (``context`` as a dict of
    ``title`` / ``sentences`` (or ``content``) lists, ``supporting_facts`` as a dict of ``title`` /
    ``sent_id`` lists, ``evidences`` as ``fact`` / ``relation`` / ``entity`` lists)."""
    context = _pairs(rec, "context", "title", ("sentences", "content"))
    facts = _pairs(rec, "supporting_facts", "title", ("sent_id",))
    support: dict[str, list[int]] = {}
    for title, sent_idx in facts:
        support.setdefault(title, []).append(int(sent_idx))
    docs, gold, gold_sentences = [], [], []
    for title, sentences in context:
        if not isinstance(title, str) or not isinstance(sentences, list):
            raise MissingField("field 'context': a title should be str and its sentences a list")
        doc = _doc(title, join_sentences(sentences))
        docs.append(doc)
        if title in support:
            gold.append(doc)
            gold_sentences += [sentences[i].strip() for i in support[title] if i < len(sentences)]
    meta: dict[str, Any] = {"type": rec.get("type"), "level": rec.get("level"), "supporting_sentences": gold_sentences}
    if rec.get("evidences") is not None:
        meta["evidences"] = _evidences(rec["evidences"])
    qid = rec.get("_id", rec.get("id"))
    if qid is None:
        raise MissingField("missing required field '_id'")
    return _question(qid, need(rec, "question", str), [need(rec, "answer", str)], gold, docs, **meta), docs


def _paragraphs(items: list[dict[str, Any]] | dict[str, list[Any]], text_key: str, gold_key: str,
                key: str = "paragraphs") -> tuple[list[Document], list[Document]]:
    """Passages of a question's context and the gold ones among them (a list of paragraph objects, or
    the Hugging Face column layout of one)."""
    docs, gold = [], []
    for item in _columns_to_rows(items, key):
        if not isinstance(item, dict):
            raise MissingField(f"field {key!r}: an item is {type(item).__name__}, not an object")
        doc = _doc(item.get("title", ""), need(item, text_key, str))
        docs.append(doc)
        if item.get(gold_key):
            gold.append(doc)
    return docs, gold


def parse_musique(rec: dict[str, Any]) -> tuple[Question, list[Document]]:
    """MuSiQue original and Hugging Face layouts (and HippoRAG's questions file): paragraphs with
    ``idx, title, paragraph_text, is_supporting``, ``question_decomposition``, ``answer_aliases``,
    ``answerable``; a dict of columns is read like the list of objects it stands for."""
    docs, gold = _paragraphs(need(rec, "paragraphs", (list, dict)), "paragraph_text", "is_supporting")
    answers = [need(rec, "answer", str), *(rec.get("answer_aliases") or [])]
    decomposition = rec.get("question_decomposition") or []
    meta = {"decomposition": _columns_to_rows(decomposition, "question_decomposition"),
            "answerable": rec.get("answerable", True)}
    return _question(need(rec, "id"), need(rec, "question", str), answers, gold, docs, **meta), docs


def parse_ircot(rec: dict[str, Any]) -> tuple[Question, list[Document]]:
    """IRCoT processed format (question_text, answers_objects[].spans, contexts[].is_supporting)."""
    answers: list[str] = []
    for obj in need(rec, "answers_objects", list):
        answers += obj.get("spans", [])
        if obj.get("number"):
            answers.append(str(obj["number"]))
    docs, gold = _paragraphs(need(rec, "contexts", list), "paragraph_text", "is_supporting", "contexts")
    return _question(need(rec, "question_id"), need(rec, "question_text", str), answers, gold, docs), docs


def parse_nq_oracle(rec: dict[str, Any]) -> tuple[Question, list[Document]]:
    """NQ-open oracle (lost-in-the-middle): question, answers, ctxs with isgold."""
    docs, gold = _paragraphs(need(rec, "ctxs", list), "text", "isgold", "ctxs")
    question = need(rec, "question", str)
    qid = rec.get("id", doc_id_for("nq", question))
    return _question(qid, question, list(need(rec, "answers", list)), gold, docs), docs


def parse_flashrag(rec: dict[str, Any]) -> tuple[Question, list[Document]]:
    """FlashRAG dataset JSONL: id, question, golden_answers, metadata (no passages)."""
    meta = dict(rec.get("metadata") or {})
    return _question(need(rec, "id"), need(rec, "question", str), list(need(rec, "golden_answers", list)), [], [], **meta), []


def parse_simple_qa(rec: dict[str, Any]) -> tuple[Question, list[Document]]:
    """Plain QA records such as Bamboogle's: question + answer(s), id optional (``id``, ``_id``, ``qid``, ``idx``,
    else a hash of the question). The answers may
    also come as SQuAD writes them (``{"text": [...], "answer_start": [...]}``) or as TriviaQA does
    (``{"value", "aliases"}``); a ``context`` text (SQuAD's paragraph, titled by ``title``) is the question's
    gold passage."""
    question = need(rec, "question", str)
    key = "answers" if "answers" in rec else "answer"
    if rec.get(key) is None:
        raise MissingField("missing required field 'answer'")
    answers = answer_texts(rec[key], key)
    qid = next((rec[k] for k in ("id", "_id", "qid", "idx") if rec.get(k) is not None), doc_id_for("q", question))
    passages = []
    if isinstance(rec.get("context"), str) and rec["context"].strip():
        title = rec.get("title") if isinstance(rec.get("title"), str) else ""
        passages = [Document(doc_id_for(title, rec["context"]), title, rec["context"])]
    return _question(qid, question, answers, passages, passages), passages


def answer_texts(raw: Any, key: str) -> list[Any]:
    """The gold answers of a ``raw`` answer field: a text (or number), a list of them, SQuAD's ``{"text": [...]}``
    or TriviaQA's ``{"value", "aliases"}``; a JSON true / false (StrategyQA) is "yes" / "no", the words the
    answer prompts and the metrics use; repeats dropped. Anything else is a MissingField naming the field."""
    if isinstance(raw, dict):
        if "text" in raw:
            raw = raw["text"]
        elif "value" in raw or "aliases" in raw:
            raw = [raw.get("value"), *(raw.get("aliases") or [])]
        else:
            raise MissingField(f"field {key!r} is an object with keys {sorted(raw)[:6]}: expected a text, a list of "
                               "texts, SQuAD's {text: [...]} or TriviaQA's {value, aliases}")
    items = raw if isinstance(raw, list) else [raw]
    odd = next((a for a in items if isinstance(a, dict | list)), None)
    if odd is not None:
        raise MissingField(f"field {key!r} holds a {type(odd).__name__} where an answer text is expected")
    return list(dict.fromkeys(("yes" if a else "no") if isinstance(a, bool) else a for a in items if a is not None))


QAParser = Callable[[dict[str, Any]], tuple[Question, list[Document]]]

QA_FORMATS: dict[str, QAParser] = {
    "hotpotqa": parse_hotpotqa,
    "2wiki": parse_hotpotqa,
    "musique": parse_musique,
    "hipporag": parse_musique,
    "ircot": parse_ircot,
    "nq_oracle": parse_nq_oracle,
    "flashrag": parse_flashrag,
    "simple_qa": parse_simple_qa,
}


# --- corpus formats ---------------------------------------------------------------------------

#: other names a passage record's text goes by (LangChain's documents, other exporters), and its id (BEIR's
#: ``_id``, Pyserini's and MS MARCO's ``docid``)
TEXT_KEYS = ("content", "page_content", "passage")
ID_KEYS = ("id", "_id", "docid", "doc_id")


def parse_corpus_record(rec: dict[str, Any]) -> Document:
    """Plain corpus ``{id, title, text}`` or FlashRAG ``{id, contents}`` ("Title"\\ntext); the text may also be
    named as in :data:`TEXT_KEYS`, the id as in :data:`ID_KEYS` (BEIR's ``{_id, title, text}``).

    ``id`` may be omitted (HippoRAG corpora have none): the content hash is used then.
    """
    alias = next((k for k in TEXT_KEYS if k in rec), None)
    if alias is not None and "text" not in rec and "contents" not in rec:
        rec = {**rec, "text": rec[alias]}
    if "contents" in rec:
        contents = need(rec, "contents", str)
        title, _, text = contents.partition("\n")
        if not text:
            title, text = "", contents
        title = title.strip().strip('"')
    else:
        text = need(rec, "text", str)
        title = rec.get("title") or ""
        if not isinstance(title, str | int | float):
            raise MissingField(f"field 'title' should be a string, got {type(title).__name__}")
        title = str(title)
    if not text.strip():
        raise MissingField("empty text")
    given = next((rec[k] for k in ID_KEYS if rec.get(k) is not None), None)
    doc_id = str(given) if given is not None else doc_id_for(title, text)
    meta = {k: v for k, v in rec.items() if k not in {*ID_KEYS, *TEXT_KEYS, "title", "text", "contents"}}
    return Document(doc_id, str(title).strip(), text.strip(), meta)


def detect_record(rec: dict[str, Any]) -> str:
    """Name the format of one record from its keys; 'corpus' for passage records."""
    keys = set(rec)
    if "context" in keys and "supporting_facts" in keys:
        return "2wiki" if "evidences" in keys else "hotpotqa"
    if "paragraphs" in keys:
        return "musique"
    if "question_text" in keys and "contexts" in keys:
        return "ircot"
    if "ctxs" in keys and "question" in keys:
        return "nq_oracle"
    if "golden_answers" in keys and "question" in keys:
        return "flashrag"
    if "question" in keys and ("answer" in keys or "answers" in keys):
        return "simple_qa"
    if keys & {"contents", "text", *TEXT_KEYS}:
        return "corpus"
    return "unknown"
