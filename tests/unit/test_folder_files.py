"""A folder of a user's own files: text, Markdown, HTML and PDF read; the rest named, not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.corpus import load_corpus
from tandem.corpus.files import pdf_readable, scan_folder
from tandem.errors import DataError
from tandem.io import ReadStats


def _pdf(text: str, title: str = "Curie notes") -> bytes:
    """A one-page PDF whose page shows ``text`` in Helvetica (xref offsets computed, so it is valid)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Title (" + title.encode() + b") >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "mine"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("Marie Curie was born in Warsaw.", encoding="utf-8")
    (root / "page.html").write_text(
        "<html><head><title>Curie family</title><style>p {color: red}</style><script>var s = 'unseen';</script>"
        "</head><body><h1>The Curies</h1><p>Pierre Curie&#39;s wife was born in <b>Warsaw</b>.</p>"
        "<ul><li>Physics</li><li>Chemistry</li></ul></body></html>", encoding="utf-8")
    (root / "sub" / "data.json").write_text('{"x": 1}', encoding="utf-8")
    (root / "photo.JPG").write_bytes(b"\xff\xd8\xff")
    (root / ".git").mkdir()
    (root / ".git" / "notes.txt").write_text("not mine to index", encoding="utf-8")
    (root / ".hidden.md").write_text("secret", encoding="utf-8")
    (root / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    return root


def test_html_is_read_as_its_visible_text_with_its_title(tmp_path: Path):
    docs = {d.id: d for d in load_corpus(_folder(tmp_path))}
    page = docs["page.html#0"]
    assert page.title == "Curie family"
    assert "Pierre Curie's wife was born in Warsaw." in page.text
    assert "Physics" in page.text and "Chemistry" in page.text
    assert "unseen" not in page.text and "color" not in page.text


def test_a_head_left_open_ends_at_the_body_as_in_a_browser(tmp_path: Path):
    (tmp_path / "p.html").write_text("<html><head><title>T</title><meta charset='utf-8'><body><p>Seen text.</p>",
                                     encoding="utf-8")
    (doc,) = load_corpus(tmp_path, format="folder")
    assert (doc.title, doc.text) == ("T", "Seen text.")


def test_what_is_not_read_is_counted_by_reason(tmp_path: Path):
    stats = ReadStats()
    docs = load_corpus(_folder(tmp_path), stats=stats)
    assert sorted({d.metadata["source"] for d in docs}) == ["a.txt", "page.html"]
    (note,) = stats.notes
    assert note.startswith("not read: 5 files (2 hidden, 1 .jpg, 1 .json, 1 broken link)")


def test_a_folder_with_nothing_readable_names_what_it_holds(tmp_path: Path):
    (tmp_path / "x.docx").write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError, match=r"no readable files found .*not read: 1 file \(1 \.docx\)"):
        load_corpus(tmp_path, format="folder")


@pytest.mark.skipif(not pdf_readable(), reason="pypdf is not installed (the pdf extra)")
def test_pdf_text_and_title(tmp_path: Path):
    (tmp_path / "paper.pdf").write_bytes(_pdf("Marie Curie was born in Warsaw in 1867."))
    (doc,) = load_corpus(tmp_path, format="folder")
    assert doc.id == "paper.pdf#0" and doc.title == "Curie notes"
    assert "born in Warsaw in 1867" in doc.text


@pytest.mark.skipif(not pdf_readable(), reason="pypdf is not installed (the pdf extra)")
def test_a_damaged_pdf_is_an_error_naming_it_or_skipped_and_counted(tmp_path: Path):
    (tmp_path / "good.txt").write_text("Warsaw is in Poland.", encoding="utf-8")
    (tmp_path / "broken.pdf").write_bytes(_pdf("whatever")[:60])
    with pytest.raises(DataError, match=r"broken\.pdf.*not a readable PDF"):
        load_corpus(tmp_path, format="folder")
    stats = ReadStats()
    docs = load_corpus(tmp_path, format="folder", skip_bad=True, stats=stats)
    assert [d.id for d in docs] == ["good.txt#0"] and stats.skipped == 1


def test_pdfs_without_pypdf_are_named_with_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("tandem.corpus.files.pdf_readable", lambda: False)
    (tmp_path / "paper.pdf").write_bytes(_pdf("text"))
    (tmp_path / "a.md").write_text("# A\n\nSome text.", encoding="utf-8")
    scan = scan_folder(tmp_path)
    assert [p.name for p in scan.files] == ["a.md"]
    assert "1 .pdf (pip install pypdf to read them)" in (scan.note() or "")


def test_one_document_is_a_corpus_of_its_own_but_json_lines_named_txt_stay_records(tmp_path: Path):
    page = tmp_path / "page.htm"
    page.write_text("<title>Oder</title><p>The Oder flows past Wroclaw.</p>", encoding="utf-8")
    (doc,) = load_corpus(page)
    assert (doc.id, doc.title, doc.text) == ("page.htm#0", "Oder", "The Oder flows past Wroclaw.")
    records = tmp_path / "corpus.txt"
    records.write_text('{"id": "v", "title": "Vistula", "text": "The Vistula flows through Warsaw."}\n', encoding="utf-8")
    assert [d.id for d in load_corpus(records)] == ["v"]


def test_a_folder_of_documents_given_as_an_index_says_how_to_build_one(tmp_path: Path):
    from tandem.errors import IndexError_
    from tandem.index import open_index

    _folder(tmp_path)
    with pytest.raises(IndexError_, match=r"a folder of documents, not an index; .*tandem index --corpus .*mine --out INDEX"):
        open_index(tmp_path / "mine")
