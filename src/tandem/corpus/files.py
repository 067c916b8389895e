"""A folder of a user's own files: which of them hold text, and the text of each.

Plain text and Markdown are read as they are, HTML without its markup (the standard library's
``html.parser``: no dependency), PDF through ``pypdf`` where it is installed (``pip install pypdf``;
the ``pdf`` extra). Everything else in the folder is left alone but counted, by suffix, so that the
caller can say what was not read: hidden files and folders (``.git``, ``.venv``: their names begin
with a dot), links that lead nowhere, and files of other kinds.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from tandem.errors import DataError

TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".rst")
HTML_SUFFIXES = (".html", ".htm", ".xhtml")
PDF_SUFFIXES = (".pdf",)
#: the HTML elements whose content is not text a reader sees
_UNSEEN = frozenset({"script", "style", "noscript", "template", "svg", "title"})
#: elements that end a line of text
_BLOCKS = frozenset({"p", "div", "br", "li", "tr", "section", "article", "header", "footer", "main", "table",
                     "ul", "ol", "dl", "dt", "dd", "pre", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6"})


def pdf_readable() -> bool:
    """Whether PDFs can be read here (``pypdf`` installed)."""
    return importlib.util.find_spec("pypdf") is not None


@dataclass
class FolderScan:
    """The files of a folder that will be read, and what was left out, counted by reason."""

    files: list[Path]
    left_out: Counter[str] = field(default_factory=Counter)

    def note(self) -> str | None:
        """One line naming what was not read (``None`` when everything was)."""
        if not self.left_out:
            return None
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(self.left_out.items(), key=lambda kv: (-kv[1], kv[0])))
        total = sum(self.left_out.values())
        return (f"not read: {total} file{'s' if total != 1 else ''} ({parts}); a folder's readable files are "
                f"{', '.join(readable_suffixes())}")


def readable_suffixes() -> tuple[str, ...]:
    """The suffixes a folder's files are read by, PDF only where ``pypdf`` is installed."""
    return TEXT_SUFFIXES + HTML_SUFFIXES + (PDF_SUFFIXES if pdf_readable() else ())


def scan_folder(folder: Path) -> FolderScan:
    """The readable files under ``folder`` (sorted; hidden ones and those under hidden folders left out)."""
    suffixes = readable_suffixes()
    scan = FolderScan([])
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            if not path.is_dir():
                scan.left_out["hidden"] += 1
            continue
        if path.is_symlink() and not path.exists():
            scan.left_out["broken link"] += 1
        elif not path.is_file():
            continue
        elif path.suffix.lower() in suffixes:
            scan.files.append(path)
        elif path.suffix.lower() in PDF_SUFFIXES:
            scan.left_out[".pdf (pip install pypdf to read them)"] += 1
        else:
            scan.left_out[path.suffix.lower() or "no suffix"] += 1
    return scan


def read_file(path: Path) -> tuple[str, str | None]:
    """(text, title or None) of one readable file; a file that cannot be read is a DataError naming it."""
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES:
        return _pdf_text(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"not valid UTF-8 (byte {exc.start})", str(path), line) from exc
    if suffix in HTML_SUFFIXES:
        return _html_text(text)
    return text, None


class _HTMLText(HTMLParser):
    """The text a reader of an HTML page sees, one line per block, and the page's title."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = [""]
        self.title: str | None = None
        self.h1: str | None = None
        self._hidden = 0
        self._in_head = False
        self._in: str | None = None  # "title" or "h1" while inside one

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("head", "body"):
            self._in_head = tag == "head"  # a <body> ends a <head> left open, as browsers read it
        if tag in _UNSEEN:
            self._hidden += 1
        if (tag == "title" and self.title is None) or (tag == "h1" and self.h1 is None):  # the first of each
            self._in = tag
        if tag in _BLOCKS:
            self.lines.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "head":
            self._in_head = False
        if tag in _UNSEEN and self._hidden:
            self._hidden -= 1
        if tag == self._in:
            self._in = None
        if tag in _BLOCKS:
            self.lines.append("")

    def handle_data(self, data: str) -> None:
        if self._in == "title":
            self.title = ((self.title or "") + data).strip() or None
        if self._hidden or self._in_head:
            return
        if self._in == "h1":
            self.h1 = ((self.h1 or "") + data).strip() or None
        self.lines[-1] += data


def _html_text(html: str) -> tuple[str, str | None]:
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in parser.lines]
    return "\n".join(line for line in lines if line), parser.title or parser.h1


def _pdf_text(path: Path) -> tuple[str, str | None]:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise DataError("an encrypted PDF; decrypt it first", str(path))
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata else None
    except (PyPdfError, ValueError, KeyError, OSError) as exc:
        raise DataError(f"not a readable PDF ({type(exc).__name__}: {exc})", str(path)) from exc
    return "\n\n".join(p.strip() for p in pages if p.strip()), (title or "").strip() or None
