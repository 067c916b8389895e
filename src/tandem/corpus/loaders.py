"""Load QA datasets and corpora from any supported format, auto-detected from content.

``load_dataset`` returns the questions and the dataset's passage pool (every paragraph of every
question, de-duplicated by title+text, or the separate corpus file of HippoRAG-style releases),
with gold ids pointing into that pool. ``load_corpus`` reads passages only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.corpus.chunking import chunk_text
from tandem.corpus.files import FolderScan, read_file, readable_suffixes, scan_folder
from tandem.corpus.formats import QA_FORMATS, TEXT_KEYS, MissingField, detect_record, parse_corpus_record
from tandem.corpus.sources import RECORD_SUFFIXES, is_hf_saved, is_hf_spec, iter_records, record_suffix
from tandem.errors import DataError
from tandem.io import ReadStats
from tandem.types import Document, Question, doc_id_for

CORPUS_FORMATS = ("corpus", "flashrag_corpus", "folder")


@dataclass
class Dataset:
    """Questions plus the passage pool they are answered from."""

    path: str
    format: str
    questions: list[Question]
    passages: list[Document]
    skipped: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return Path(self.path).stem


def _source(path: str | Path) -> Path | str:
    """A path as given: ``hf:`` names stay strings (a Path would fold their slashes)."""
    return str(path) if is_hf_spec(path) else Path(path)


def _records(path: Path | str, skip_bad: bool, stats: ReadStats) -> Iterator[tuple[int, dict[str, Any]]]:
    return iter_records(path, skip_bad=skip_bad, stats=stats)


def sniff_format(path: str | Path) -> str:
    """The format of a file, folder or ``hf:`` name, from its first record ('folder' for a directory
    of text files)."""
    path = _source(path)
    if isinstance(path, Path) and ((path.is_dir() and not is_hf_saved(path)) or _one_document(path)):
        return "folder"  # a folder of documents, or one document (text, Markdown, HTML, PDF)
    stats = ReadStats()
    for _, rec in _records(path, skip_bad=True, stats=stats):
        fmt = detect_record(rec)
        if fmt == "unknown":
            raise DataError(f"cannot tell the format from the keys {sorted(rec)[:8]}: a passage needs a text "
                            f"({', '.join(['text', 'contents', *TEXT_KEYS])}), a QA record a question and its "
                            "answer(s); a corpus as one JSON object maps each title to a text or a list of sentences; "
                            "or pass --format", str(path), 1)
        return fmt
    if isinstance(path, Path) and record_suffix(path) not in RECORD_SUFFIXES + readable_suffixes():
        raise DataError(f"not a kind of file tandem reads ({record_suffix(path) or 'no suffix'}): a corpus or dataset is "
                        "JSON Lines, JSON, CSV, TSV or Parquet, or a folder of text, Markdown, HTML or PDF files (save a "
                        "spreadsheet as CSV, a word-processor file as PDF or text)", str(path))
    if stats.first_error is not None:
        raise DataError(f"no readable record (the first bad one: {stats.first_error})", str(path))
    raise DataError("file holds no records", str(path))


def _find_sibling_corpus(path: Path | str) -> Path | None:
    """HippoRAG ships ``X.json`` with ``X_corpus.json`` beside it."""
    if not isinstance(path, Path):
        return None
    for suffix in (".json", ".jsonl"):
        candidate = path.with_name(f"{path.stem}_corpus{suffix}")
        if candidate.exists():
            return candidate
    return None


def load_dataset(
    path: str | Path,
    *,
    format: str | None = None,
    corpus: str | Path | None = None,
    skip_bad: bool = False,
) -> Dataset:
    """Load a QA dataset and its passage pool.

    ``corpus`` (or a ``<name>_corpus.json`` beside the file) replaces the pool built from the
    questions' own paragraphs; gold ids are then mapped onto that corpus by title+text. ``path`` is
    a file (JSONL, JSON, Parquet), a ``save_to_disk`` folder or ``hf:NAME[/CONFIG][/SPLIT]``.
    """
    path = _source(path)
    fmt = format or sniff_format(path)
    if fmt not in QA_FORMATS:
        raise DataError(f"{fmt!r} is not a QA format; QA formats: {sorted(QA_FORMATS)}", str(path))
    parse = QA_FORMATS[fmt]
    stats = ReadStats()
    questions: list[Question] = []
    pool: dict[str, Document] = {}
    seen_q: dict[str, int] = {}
    for line_no, rec in _records(path, skip_bad, stats):
        try:
            question, docs = parse(rec)
            if not question.text:
                raise MissingField("empty question text")
            if any(not d.text for d in docs):
                raise MissingField("a passage has empty text")
        except (MissingField, TypeError, ValueError, KeyError) as exc:
            stats.skip_or_raise(DataError(f"bad {fmt} record: {exc}", str(path), line_no), skip_bad)
            continue
        if question.id in seen_q:
            raise DataError(f"duplicate question id {question.id!r} (first at line {seen_q[question.id]})", str(path), line_no)
        seen_q[question.id] = line_no
        questions.append(question)
        for doc in docs:
            pool.setdefault(doc.id, doc)
    if not questions:
        raise DataError("no questions loaded", str(path))
    dataset = Dataset(str(path), fmt, questions, list(pool.values()), skipped=stats.skipped)
    corpus_path = Path(corpus) if corpus is not None else _find_sibling_corpus(path)
    if corpus_path is not None:
        _attach_corpus(dataset, load_corpus(corpus_path, skip_bad=skip_bad, max_tokens=None, stats=stats))
        dataset.format = "hipporag" if fmt == "musique" else fmt
        dataset.notes.append(f"passage pool from {corpus_path}")
    dataset.skipped = stats.skipped
    if stats.skipped:
        dataset.notes.append(f"skipped {stats.skipped} bad records; first: {stats.first_error}")
    unanswered = [q.id for q in questions if not q.answers]
    if unanswered:
        dataset.notes.append(f"{len(unanswered)} of {len(questions)} questions have no gold answer (first: "
                             f"{unanswered[0]!r}; e.g. SQuAD 2.0's unanswerable ones): EM and F1 score them 0")
    return dataset


def _attach_corpus(dataset: Dataset, corpus: list[Document]) -> None:
    """Use ``corpus`` as the pool and map gold ids onto it by content."""
    by_content = {doc_id_for(d.title, d.text): d.id for d in corpus}
    missing = 0
    mapped: list[Question] = []
    for q in dataset.questions:
        gold = []
        for gid in q.gold_doc_ids:
            if gid in by_content:
                gold.append(by_content[gid])
            else:
                missing += 1
        ctx = [by_content[c] for c in q.metadata.get("context_ids", []) if c in by_content]
        mapped.append(Question(q.id, q.text, q.answers, tuple(gold), {**q.metadata, "context_ids": ctx}))
    dataset.questions = mapped
    dataset.passages = corpus
    if missing:
        dataset.notes.append(f"{missing} gold passages not found in the corpus")


def load_corpus(
    path: str | Path,
    *,
    format: str | None = None,
    skip_bad: bool = False,
    max_tokens: int | None = 200,
    overlap: int = 40,
    stats: ReadStats | None = None,
) -> list[Document]:
    """Load passages from a corpus JSONL/JSON, a folder of .txt/.md files, or a QA dataset's pool.

    Documents longer than ``max_tokens`` words are chunked (files of a folder and corpus records alike;
    ``None`` keeps them whole, as a dataset's own passage pool is kept so its gold ids stay valid): a
    chunked record's passages get ids ``ID#0``, ``ID#1``, ... and keep ``ID`` in ``metadata["source_id"]``.
    ``skip_bad`` skips malformed records or unreadable files, counted in ``stats``. A JSON object
    mapping title -> text or title -> list of sentences is a corpus too (one passage per title).
    """
    path = _source(path)
    stats = stats if stats is not None else ReadStats()
    fmt = format or sniff_format(path)
    if fmt == "folder":
        return load_folder(path, max_tokens=max_tokens or 200, overlap=overlap, skip_bad=skip_bad, stats=stats)
    if fmt in QA_FORMATS:
        dataset = load_dataset(path, format=fmt, skip_bad=skip_bad)
        stats.skipped += dataset.skipped
        return dataset.passages
    if fmt not in CORPUS_FORMATS:
        raise DataError(f"unknown format {fmt!r}; formats: {sorted(set(QA_FORMATS) | set(CORPUS_FORMATS))}", str(path))
    docs: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for line_no, doc in _corpus_records(path, skip_bad, stats):
        if doc.id in docs:
            if docs[doc.id] == doc:
                continue  # an exact repeat carries no new information
            raise DataError(f"duplicate id {doc.id!r} with different content (first at line {first_line[doc.id]})", str(path), line_no)
        docs[doc.id] = doc
        first_line[doc.id] = line_no
    if not docs:
        raise DataError("no passages loaded", str(path))
    if max_tokens is None:
        return list(docs.values())
    return [part for doc in docs.values() for part in chunk_document(doc, max_tokens, overlap)]


def _corpus_records(path: Path | str, skip_bad: bool, stats: ReadStats) -> Iterator[tuple[int, Document]]:
    """(line, passage) of each corpus record; a malformed one raises or is skipped and counted."""
    for line_no, rec in _records(path, skip_bad, stats):
        try:
            yield line_no, parse_corpus_record(rec)
        except MissingField as exc:
            stats.skip_or_raise(DataError(f"bad corpus record: {exc}", str(path), line_no), skip_bad)


def iter_corpus(
    path: str | Path,
    *,
    format: str | None = None,
    skip_bad: bool = False,
    max_tokens: int | None = 200,
    overlap: int = 40,
    stats: ReadStats | None = None,
) -> Iterator[Document]:
    """The passages of a corpus one at a time, for a streamed index build (:func:`tandem.index.build_index`).

    A corpus JSONL file is read line by line (a JSON array file is parsed whole, then yielded); each
    record is chunked as in :func:`load_corpus`. Ids are not checked here: the build refuses an id
    seen twice, exact repeats included (which :func:`load_corpus` drops). A folder's files are read
    one by one (:func:`iter_folder`); QA datasets are read with :func:`load_corpus`."""
    path = _source(path)
    stats = stats if stats is not None else ReadStats()
    fmt = format or sniff_format(path)
    if fmt == "folder":
        yield from iter_folder(path, max_tokens=max_tokens or 200, overlap=overlap, skip_bad=skip_bad, stats=stats)
        return
    if fmt not in STREAMED_FORMATS:
        yield from load_corpus(path, format=fmt, skip_bad=skip_bad, max_tokens=max_tokens, overlap=overlap, stats=stats)
        return
    for _, doc in _streamed(path, skip_bad, stats, max_tokens, overlap):
        yield doc


STREAMED_FORMATS = ("corpus", "flashrag_corpus")


def _streamed(path: Path | str, skip_bad: bool, stats: ReadStats, max_tokens: int | None,
              overlap: int) -> Iterator[tuple[int, Document]]:
    """(line, passage) of a streamed corpus, chunks included: what :func:`iter_corpus` yields, with lines."""
    for line_no, doc in _corpus_records(path, skip_bad, stats):
        for part in (chunk_document(doc, max_tokens, overlap) if max_tokens else (doc,)):
            yield line_no, part


def corpus_lines(path: str | Path, rows: Iterable[int], *, format: str | None = None, skip_bad: bool = False,
                 max_tokens: int | None = 200, overlap: int = 40) -> dict[int, int]:
    """row -> line of the record it came from, for the passages ``rows`` of :func:`iter_corpus` with the
    same settings (read again: to name the lines of an error found after the read, e.g. a repeated id);
    empty for a corpus that is not streamed."""
    path = _source(path)
    wanted, found = set(rows), {}
    if (format or sniff_format(path)) not in STREAMED_FORMATS:
        return found
    for row, (line_no, _) in enumerate(_streamed(path, skip_bad, ReadStats(), max_tokens, overlap)):
        if row in wanted:
            found[row] = line_no
            if len(found) == len(wanted):
                break
    return found


def chunk_document(doc: Document, max_tokens: int, overlap: int) -> list[Document]:
    """``doc`` itself if it fits ``max_tokens`` words, else its chunks (ids ``ID#i``, ``source_id`` kept)."""
    if len(doc.text.split()) <= max_tokens:
        return [doc]
    return [Document(f"{doc.id}#{i}", doc.title, chunk, {**doc.metadata, "source_id": doc.id, "chunk": i})
            for i, chunk in enumerate(chunk_text(doc.text, max_tokens, overlap))]


def _one_document(path: Path) -> bool:
    """A file to read as one document: a readable suffix, and not JSON records under a .txt name."""
    if not path.is_file() or path.suffix.lower() not in readable_suffixes():
        return False
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return not head.startswith((b"{", b"["))


def load_folder(folder: str | Path, *, max_tokens: int = 200, overlap: int = 40, skip_bad: bool = False,
                stats: ReadStats | None = None) -> list[Document]:
    """Every readable file under ``folder``, or the one file ``folder`` names, as passages
    (:func:`iter_folder`, read whole)."""
    return list(iter_folder(folder, max_tokens=max_tokens, overlap=overlap, skip_bad=skip_bad, stats=stats))


def iter_folder(folder: str | Path, *, max_tokens: int = 200, overlap: int = 40, skip_bad: bool = False,
                stats: ReadStats | None = None) -> Iterator[Document]:
    """The passages of every readable file under ``folder``, or of the one file ``folder`` names (text,
    Markdown, HTML, PDF where pypdf is installed: :mod:`tandem.corpus.files`), file by file, chunked; ids
    are ``relative/path#chunk``. A file that cannot be read (not UTF-8, a damaged PDF) is an error naming
    it, or skipped and counted with ``skip_bad``; what the folder holds besides (hidden files, other
    kinds) is counted in ``stats.notes``."""
    folder = Path(folder)
    stats = stats if stats is not None else ReadStats()
    scan = FolderScan([folder]) if folder.is_file() else scan_folder(folder)  # one document is a folder of one
    base = folder.parent if folder.is_file() else folder
    note = scan.note()
    if note:
        stats.notes.append(note)
    if not scan.files:
        raise DataError(f"no readable files found ({', '.join(readable_suffixes())})" + (f"; {note}" if note else ""),
                        str(folder))
    passages = 0
    for file in scan.files:
        try:
            text, title = read_file(file)
        except DataError as exc:
            stats.skip_or_raise(exc, skip_bad)
            continue
        rel = file.relative_to(base).as_posix()
        title = title or _title_of(text, file)
        for i, chunk in enumerate(chunk_text(text, max_tokens, overlap)):
            passages += 1
            yield Document(f"{rel}#{i}", title, chunk, {"source": rel, "chunk": i})
    if not passages:
        raise DataError("no readable text in any file", str(folder))


def _title_of(text: str, file: Path) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
        if line.strip():
            break
    return file.stem.replace("_", " ").replace("-", " ")
