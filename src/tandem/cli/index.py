"""``tandem index`` and ``tandem retrieve``: build an index folder and search it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from tandem.cli.common import (
    JSON_OPTION,
    console,
    load_docs,
    out,
    print_json,
    progress_bar,
)
from tandem.outdir import owned_output


def index(
    out_dir: Annotated[Path, typer.Option("--out", help="Index folder to write (replaced atomically).")],
    dataset: Annotated[Optional[Path], typer.Option(help="QA dataset whose passage pool is indexed.")] = None,
    corpus: Annotated[Optional[Path], typer.Option(help="Corpus JSONL/JSON or a folder of .txt/.md files.")] = None,
    kind: Annotated[str, typer.Option(help="bm25 | dense | hybrid")] = "hybrid",
    encoder: Annotated[str, typer.Option(help="Embedded name (minilm), local path or hub name.")] = "minilm",
    backend: Annotated[Optional[str], typer.Option(help="Encoder backend (default: the fastest available).")] = None,
    faiss_kind: Annotated[str, typer.Option("--faiss", help="flat (exact) | ivf | hnsw")] = "flat",
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the input format.")] = None,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    batch_size: Annotated[int, typer.Option(help="Encoding batch size.")] = 64,
    max_tokens: Annotated[int, typer.Option(help="Chunk size in words: longer documents (text files, corpus records) are split.")] = 200,
    overlap: Annotated[int, typer.Option(help="Words shared by consecutive chunks.")] = 40,
    as_json: Annotated[bool, JSON_OPTION] = False,
    extras: Annotated[list[str], typer.Option("--extras", help="Per-document arrays to store: rala (CoopRAG's layer features).")] = [],  # noqa: B006
) -> None:
    """Build a BM25, dense or hybrid index folder."""
    from tandem.index import build_index
    from tandem.index.encoder import load_encoder
    from tandem.index.layers import EXTRAS

    unknown = sorted(set(extras) - set(EXTRAS))
    if unknown:
        raise typer.BadParameter(f"unknown extras {unknown}; choose from {sorted(EXTRAS)}")
    with owned_output(out_dir, "index"):  # before any work: a user's folder is refused at once
        docs = load_docs(dataset, corpus, fmt, skip_bad, max_tokens, overlap)
        start = time.perf_counter()
        enc = load_encoder(encoder, **({"backend": backend} if backend else {})) if kind != "bm25" or extras else encoder
        with progress_bar() as bar:
            manifest = build_index(docs, out_dir, kind=kind, encoder=enc, dense_params={"faiss": faiss_kind},
                                   batch_size=batch_size, on_progress=bar.callback("encode"),
                                   extras=[EXTRAS[name](on_progress=bar.callback(f"{name} features")) for name in extras])
    if as_json:
        print_json({"index": str(out_dir), "seconds": round(time.perf_counter() - start, 3), **manifest.__dict__})
    console.print(f"[green]indexed {manifest.doc_count} passages ({kind}) into {out_dir} in {time.perf_counter() - start:.1f}s")


def retrieve(
    query: Annotated[str, typer.Argument(help="The query.")],
    index_dir: Annotated[Path, typer.Option("--index", help="Index folder.")],
    k: Annotated[int, typer.Option("--k", "-k", help="How many hits.")] = 10,
    retriever: Annotated[Optional[str], typer.Option(help="bm25 | dense | hybrid (default: the index's kind).")] = None,
    fusion: Annotated[str, typer.Option(help="Hybrid fusion: rrf | weighted.")] = "rrf",
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Print the top-k passages for a query."""
    from tandem.index import open_index
    from tandem.retrieve import open_retriever

    idx = open_index(index_dir)
    options = {"fusion": fusion} if (retriever or idx.kind) == "hybrid" else {}
    hits = open_retriever(idx, retriever, **options).search(query, k)
    if as_json:
        print_json({"query": query, "hits": [{"rank": h.rank, "score": h.score, "id": h.doc_id,
                                              "title": idx.store.get(h.doc_id).title, "text": idx.store.get(h.doc_id).text}
                                             for h in hits]})
        return
    table = Table(title=f"{query}", show_lines=False)
    for col in ("rank", "score", "title", "text"):
        table.add_column(col, overflow="fold")
    for hit in hits:
        doc = idx.store.get(hit.doc_id)
        snippet = doc.text if len(doc.text) <= 160 else doc.text[:157] + "..."
        table.add_row(str(hit.rank), f"{hit.score:.4f}", doc.title, snippet)
    out.print(table)

