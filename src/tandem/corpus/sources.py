"""Where records come from: JSONL (optionally .gz), a JSON array, a JSON object mapping title -> text
(or title -> sentences), CSV and TSV with a header line (optionally .gz), Parquet, a folder written by ``datasets.Dataset.save_to_disk``, and a
Hugging Face dataset by name (``hf:NAME[/CONFIG][/SPLIT]``) from the local cache.

Every source yields ``(position, record)``: the line of a JSONL file, the 1-based record (or row)
number otherwise, so errors name the file and the place of the bad record.
"""

from __future__ import annotations

import codecs
import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tandem.corpus.formats import ID_KEYS, TEXT_KEYS, detect_record, join_sentences
from tandem.errors import DataError
from tandem.io import (
    JSON_ERRORS,
    SURROGATE,
    UTF8_BOM,
    ReadStats,
    decode_line,
    is_json_array_file,
    json_problem,
    lone_surrogate,
    open_bytes,
    read_json_records,
    read_jsonl,
    unpacking,
)

HF_PREFIX = "hf:"
PARQUET_SUFFIXES = (".parquet", ".pq")
#: a table's suffix (before any .gz) -> its delimiter
TABLE_DELIMITERS = {".csv": ",", ".tsv": "\t"}
#: the suffixes of the files of records this module reads (a .gz of each too); a file of another suffix is
#: still tried as JSON Lines
RECORD_SUFFIXES = (".jsonl", ".json", ".ndjson", *TABLE_DELIMITERS, *PARQUET_SUFFIXES)
#: columns whose cell may hold a JSON array, read as that list (several gold answers in one cell)
LIST_COLUMNS = ("answers", "golden_answers")
#: the longest cell a table may hold (the csv module's default, 128 KiB, is shorter than some documents)
MAX_CELL = 1 << 26
#: files ``save_to_disk`` writes: a DatasetDict's, then a single Dataset's
HF_SAVED_MARKERS = ("dataset_dict.json", "state.json")
Records = Iterator[tuple[int, dict[str, Any]]]


def is_hf_spec(path: str | Path) -> bool:
    """True for ``hf:NAME[/CONFIG][/SPLIT]``."""
    return str(path).startswith(HF_PREFIX)


def is_hf_saved(path: Path) -> bool:
    """True for a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    return path.is_dir() and any((path / name).is_file() for name in HF_SAVED_MARKERS)



def iter_records(path: str | Path, *, skip_bad: bool = False, stats: ReadStats | None = None) -> Records:
    """Every record of a file, folder or ``hf:`` name, whatever its container (see module doc)."""
    stats = stats if stats is not None else ReadStats()
    if is_hf_spec(path):
        yield from _rows(_load_hf_by_name(str(path)[len(HF_PREFIX):]))
        return
    path = Path(path)
    if not path.exists():
        raise DataError("no such file", str(path))
    if is_hf_saved(path):
        yield from _rows(_load_hf_saved(path, None, str(path)))
    elif path.suffix.lower() in PARQUET_SUFFIXES:
        yield from _parquet_rows(path)
    elif record_suffix(path) in TABLE_DELIMITERS:
        yield from _table_rows(path, TABLE_DELIMITERS[record_suffix(path)], skip_bad, stats)
    elif is_json_array_file(path):
        yield from read_json_records(path, skip_bad=skip_bad, stats=stats)
    else:
        whole = _whole_json_object(path)
        if whole is None:
            yield from read_jsonl(path, skip_bad=skip_bad, stats=stats)
        else:
            yield from _object_records(whole, path)


# --- JSON objects: one record, or a title map ---------------------------------------------------

def _whole_json_object(path: Path) -> dict[str, Any] | None:
    """The file's one JSON object when the whole file is a single object (pretty-printed over many
    lines, or one line with nothing after it); None for JSONL and JSON arrays."""
    with open_bytes(path) as handle, unpacking(path):
        if not handle.read(4096).removeprefix(codecs.BOM_UTF8).lstrip().startswith(b"{"):
            return None
        handle.seek(0)
        first = handle.readline()
        try:
            json.loads(first.decode(UTF8_BOM))
            one_line = True
        except (UnicodeDecodeError, *JSON_ERRORS):
            one_line = False
        if one_line and any(line.strip() for line in handle):
            return None  # one object a line: JSONL
        if not one_line and first.removeprefix(codecs.BOM_UTF8).strip() != b"{":
            return None  # a broken first record of a JSONL file: read_jsonl names its line
        handle.seek(0)
        raw = handle.read()
    try:
        text = raw.decode(UTF8_BOM)
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise DataError(f"not valid UTF-8 (byte {exc.start})", str(path)) from exc
    except JSON_ERRORS as exc:
        raise DataError(json_problem(exc), str(path), getattr(exc, "lineno", None)) from exc
    if lone_surrogate(text, data):
        raise DataError(f"malformed text: {SURROGATE}", str(path))
    return data if isinstance(data, dict) else None


#: keys that make a JSON object one record, not a map of titles (a passage titled "id" is not a thing)
RECORD_KEYS = frozenset({"question", "answer", "answers", "title", "text", "contents", *TEXT_KEYS, *ID_KEYS})


def is_title_map(obj: dict[str, Any]) -> bool:
    """A corpus as one JSON object: every value a text, or a list of sentences (HippoRAG v1 style), and no key a
    record's field (:data:`RECORD_KEYS`)."""
    if not obj or RECORD_KEYS & set(obj):
        return False
    return all(isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)) for v in obj.values())


def _object_records(obj: dict[str, Any], path: Path) -> Records:
    """A file holding one JSON object: a title -> text(s) map, each entry then a passage ``{title,
    text}`` numbered from 1 in file order; else the object is the file's one record."""
    if detect_record(obj) != "unknown" or not is_title_map(obj):
        yield 1, obj  # a one-record file; the format sniffer names what it could not recognise
        return
    for i, (title, value) in enumerate(obj.items(), start=1):
        text = value if isinstance(value, str) else join_sentences(value)
        yield i, {"title": title, "text": text}


# --- CSV and TSV ----------------------------------------------------------------------------------

def record_suffix(path: Path) -> str:
    """The suffix that names a file's kind, a ``.gz`` looked through: ``.csv`` for ``x.csv`` and ``x.csv.gz``."""
    suffixes = [s.lower() for s in path.suffixes]
    return suffixes[-2] if len(suffixes) > 1 and suffixes[-1] == ".gz" else (suffixes[-1] if suffixes else "")


def _table_rows(path: Path, delimiter: str, skip_bad: bool, stats: ReadStats) -> Records:
    """Rows of a CSV or TSV file under its header line (the standard ``csv`` module), each a record keyed by
    the header's names, at the line its row starts on. A cell is text; an empty cell is left out (an empty
    ``id`` then gets the content hash, as a missing one does); an ``answers`` cell that holds a JSON array
    is that list. A row with more or fewer cells than the header is bad input naming its line."""
    csv.field_size_limit(max(csv.field_size_limit(), MAX_CELL))
    with open_bytes(path) as raw, unpacking(path):
        lines = (decode_line(line, number, path) for number, line in enumerate(raw, start=1))
        reader = csv.reader(lines, delimiter=delimiter, strict=True)
        end = 0  # the last line of the rows read so far
        try:
            header = next(reader, None)
            if header is None:
                return
            names = [name.strip() for name in header]
            if not all(names) or len(set(names)) != len(names):
                raise DataError(f"the header line needs a distinct name for every column, got {header}", str(path), 1)
            end = reader.line_num
            for row in reader:
                start, end = end + 1, reader.line_num
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(names):
                    stats.skip_or_raise(DataError(f"{len(row)} cells, the header names {len(names)}", str(path), start),
                                        skip_bad)
                    continue
                yield start, {name: _cell(name, cell) for name, cell in zip(names, row, strict=True) if cell != ""}
        except csv.Error as exc:  # e.g. a quote never closed: the row it opens in
            raise DataError(f"malformed {record_suffix(path)[1:].upper()} ({exc})", str(path), end + 1) from exc


def _cell(name: str, cell: str) -> Any:
    """A table cell's value: text, or the list a JSON array in a :data:`LIST_COLUMNS` cell holds."""
    if name in LIST_COLUMNS and cell.lstrip().startswith("["):
        try:
            value = json.loads(cell)
        except JSON_ERRORS:
            return cell
        return value if isinstance(value, list) and not lone_surrogate(cell, value) else cell
    return cell


# --- Parquet and Hugging Face datasets ----------------------------------------------------------

def _parquet_rows(path: Path, batch_size: int = 1024) -> Records:
    """Rows of a Parquet file (pyarrow), read in batches; nested columns come back as lists and dicts."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise DataError("reading Parquet needs pyarrow (pip install pyarrow)", str(path)) from exc
    try:
        reader = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for an unreadable file
        raise DataError(f"not a readable Parquet file ({type(exc).__name__}: {exc})", str(path)) from None
    row = 0
    for batch in reader.iter_batches(batch_size=batch_size):
        for rec in batch.to_pylist():
            row += 1
            yield row, rec


def _rows(dataset: Any) -> Records:
    """Rows of a ``datasets.Dataset`` as plain dicts, numbered from 1."""
    for i, rec in enumerate(dataset, start=1):
        yield i, dict(rec)


def _import_datasets(where: str) -> Any:
    os.environ.setdefault("HF_DATASETS_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "1"))
    try:
        import datasets
    except ImportError as exc:
        raise DataError("reading a Hugging Face dataset needs the `datasets` package "
                        "(pip install 'tandem[hf]'); or export it to Parquet or JSONL and give that file", where) from exc
    return datasets


def _pick_split(loaded: Any, split: str | None, where: str) -> Any:
    """One split of a DatasetDict (the only one when ``split`` is None), or the Dataset itself."""
    if not hasattr(loaded, "keys"):
        return loaded
    names = sorted(loaded.keys())
    if split is None:
        if len(names) == 1:
            return loaded[names[0]]
        raise DataError(f"the dataset has the splits {names}: name one (hf:NAME/CONFIG/SPLIT)", where)
    if split not in loaded:
        raise DataError(f"no split {split!r}; the splits are {names}", where)
    return loaded[split]


def _load_hf_saved(path: Path, split: str | None, where: str) -> Any:
    datasets = _import_datasets(where)
    return _pick_split(datasets.load_from_disk(str(path)), split, where)


def parse_hf_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``NAME[/CONFIG][/SPLIT]`` -> (name, config, split). NAME is ``owner/name`` when four parts are
    given (``owner/name/CONFIG/SPLIT``; ``default`` is the config of a dataset that has one)."""
    parts = [p for p in spec.split("/") if p]
    if not parts or len(parts) > 4:
        raise DataError(f"{HF_PREFIX}{spec}: expected hf:NAME[/CONFIG][/SPLIT] or hf:OWNER/NAME/CONFIG/SPLIT")
    if len(parts) == 4:
        return "/".join(parts[:2]), parts[2], parts[3]
    return parts[0], parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None


def _load_hf_by_name(spec: str) -> Any:
    """A dataset by name from the local Hugging Face cache (offline unless HF_DATASETS_OFFLINE=0), or
    a ``save_to_disk`` folder given as ``hf:PATH[/SPLIT]``."""
    where = f"{HF_PREFIX}{spec}"
    local = Path(spec)
    if is_hf_saved(local):
        return _load_hf_saved(local, None, where)
    if is_hf_saved(local.parent):
        return _load_hf_saved(local.parent, local.name, where)
    name, config, split = parse_hf_spec(spec)
    datasets = _import_datasets(where)
    try:
        loaded = datasets.load_dataset(name, config, split=split)
    except ConnectionError as exc:
        cache = datasets.config.HF_DATASETS_CACHE
        raise DataError(f"not in the local Hugging Face datasets cache ({cache}) and downloads are off "
                        f"(HF_DATASETS_OFFLINE / HF_HUB_OFFLINE): load it once where the hub can be reached, "
                        f"or give a Parquet / JSONL file or a save_to_disk folder ({exc})", where) from None
    except (ValueError, FileNotFoundError, KeyError) as exc:
        raise DataError(f"cannot load it from the local cache: {exc}".replace("\n", "; "), where) from None
    return _pick_split(loaded, None, where)
