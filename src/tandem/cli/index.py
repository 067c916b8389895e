"""``tandem index`` and ``tandem retrieve``: build an index folder and search it."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from tandem.cli.common import (
    JSON_OPTION,
    console,
    load_docs,
    out,
    print_json,
    progress_bar,
    report_skips,
)
from tandem.errors import DuplicateIdError
from tandem.io import ReadStats
from tandem.outdir import owned_output
from tandem.types import Document


def index(
    ctx: typer.Context,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Index folder to write (replaced atomically); with --add-extras, where the extended index goes (default: --index, in place).")] = None,
    dataset: Annotated[Optional[Path], typer.Option(help="QA dataset whose passage pool is indexed.")] = None,
    corpus: Annotated[Optional[Path], typer.Option(help="Corpus JSONL/JSON (a JSONL file is streamed), a folder of your documents (text, Markdown, HTML, PDF) or one of them.")] = None,
    kind: Annotated[str, typer.Option(help="bm25 | dense | hybrid")] = "hybrid",
    encoder: Annotated[str, typer.Option(help="Embedded name (minilm), local path or hub name.")] = "minilm",
    backend: Annotated[Optional[str], typer.Option(help="Encoder backend (default: the fastest available).")] = None,
    store: Annotated[str, typer.Option("--store", "--faiss", help="Dense vector store: flat (exact) | ivf | hnsw | ivfpq | qdrant (embedded, in the index folder) | qdrant:PATH (embedded, in PATH) | qdrant:URL (a Qdrant server).")] = "flat",
    store_opt: Annotated[list[str], typer.Option("--store-opt", help="Vector store setting KEY=VALUE, repeatable: nlist, nprobe, pq_m, pq_nbits, rerank, on_disk, train_size (ivfpq); hnsw_m, ef_search (hnsw); collection (qdrant).")] = [],  # noqa: B006
    fmt: Annotated[Optional[str], typer.Option("--format", help="Force the input format.")] = None,
    skip_bad: Annotated[bool, typer.Option(help="Skip malformed records (counted) instead of stopping.")] = False,
    batch_size: Annotated[int, typer.Option(help="Encoding batch size.")] = 64,
    shard_size: Annotated[Optional[int], typer.Option(help="Documents encoded and written per shard (default 10,000); a killed build run again resumes at the last finished shard.")] = None,
    ray: Annotated[Optional[str], typer.Option("--ray", metavar="ADDRESS", help="Encode the shards on Ray: 'local' starts Ray on this machine (--ray-workers CPUs), else a cluster address ('auto', 'ray://host:10001').")] = None,
    ray_workers: Annotated[int, typer.Option(help="With --ray: encoder actors (one CPU each).")] = 2,
    max_tokens: Annotated[int, typer.Option(help="Chunk size in words: longer documents (text files, corpus records) are split.")] = 200,
    overlap: Annotated[int, typer.Option(help="Words shared by consecutive chunks.")] = 40,
    as_json: Annotated[bool, JSON_OPTION] = False,
    extras: Annotated[list[str], typer.Option("--extras", help="Per-document data to store: rala (CoopRAG's layer features), graph (passage graph for --retriever graph).")] = [],  # noqa: B006
    add_extras: Annotated[list[str], typer.Option("--add-extras", help="Add these extras to the existing index --index (no re-encoding), e.g. --add-extras graph.")] = [],  # noqa: B006
    add: Annotated[list[Path], typer.Option("--add", help="Append the passages of these corpus files (repeatable) to the existing index --index; only they are encoded.")] = [],  # noqa: B006
    index_dir: Annotated[Optional[Path], typer.Option("--index", help="With --add or --add-extras: the existing index folder.")] = None,
) -> None:
    """Build a BM25, dense or hybrid index folder, append documents to one, or add extras to one
    (``tandem index verify DIR`` checks one)."""
    if ctx.invoked_subcommand is not None:
        return
    from tandem.cli.common import parse_settings
    from tandem.index import build_index
    from tandem.index.encoder import load_encoder
    from tandem.index.layers import EXTRAS
    from tandem.index.vectors import parse_store

    unknown = sorted(set(extras + add_extras) - set(EXTRAS))
    if unknown:
        raise typer.BadParameter(f"unknown extras {unknown}; choose from {sorted(EXTRAS)}")
    if add_extras:
        _add_extras(add_extras, index_dir, out_dir, dataset, corpus, extras)
        return
    encoding_options = {"shard_size": shard_size, "batch_size": batch_size, "ray": ray, "ray_workers": ray_workers,
                        "backend": backend}
    if add:
        if dataset is not None or corpus is not None or extras or out_dir is not None:
            raise typer.BadParameter("--add appends to --index DIR in place: give no --dataset, --corpus, --extras or --out")
        _add_documents(add, index_dir, fmt, skip_bad, max_tokens, overlap, encoding_options, as_json)
        return
    if out_dir is None:
        raise typer.BadParameter("give --out (the index folder to build), or --add FILES / --add-extras NAME with --index DIR")
    dense_params = parse_store(store, parse_settings(store_opt))
    with owned_output(out_dir, "index"):  # before any work: a user's folder is refused at once
        docs, stats = _documents(dataset, corpus, fmt, skip_bad, max_tokens, overlap)
        start = time.perf_counter()
        needs_encoder = kind != "bm25" or any(getattr(EXTRAS[name], "needs_encoder", True) for name in extras)
        enc = load_encoder(encoder, **({"backend": backend} if backend else {})) if needs_encoder else encoder
        with progress_bar() as bar, _naming_lines(corpus if dataset is None else None, fmt, skip_bad, max_tokens, overlap):
            manifest = build_index(docs, out_dir, kind=kind, encoder=enc, dense_params=dense_params,
                                   on_progress=bar.callback("encode"),
                                   extras=[EXTRAS[name](on_progress=bar.callback(f"{name} features")) for name in extras],
                                   **_encoding(encoder, encoding_options))
        report_skips(stats, skip_bad)
    if as_json:
        print_json({"index": str(out_dir), "seconds": round(time.perf_counter() - start, 3), **manifest.__dict__})
    console.print(f"[green]indexed {manifest.doc_count} passages ({kind}) into {out_dir} in {time.perf_counter() - start:.1f}s")
    if "graph" not in extras:
        console.print(f"multi-hop questions: [bold]tandem index --add-extras graph --index {out_dir}[/bold] adds a "
                      "passage graph (about a second per 5,000 passages); ask, eval, serve and mcp then use the graph "
                      "retriever by default (docs/retrieval.md)", soft_wrap=True)  # a command to copy: one line


def _documents(dataset: Path | None, corpus: Path | None, fmt: str | None, skip_bad: bool, max_tokens: int,
               overlap: int) -> tuple[Iterable[Document], ReadStats]:
    """The documents to index: a corpus file streamed record by record, a folder file by file, a dataset's
    pool loaded whole (``load_docs``)."""
    from tandem.corpus.loaders import iter_corpus

    stats = ReadStats()
    if corpus is not None and dataset is None:  # a corpus file, or a folder's files one by one
        return iter_corpus(corpus, format=fmt, skip_bad=skip_bad, max_tokens=max_tokens, overlap=overlap, stats=stats), stats
    return load_docs(dataset, corpus, fmt, skip_bad, max_tokens, overlap), stats


@contextlib.contextmanager
def _naming_lines(corpus: Path | None, fmt: str | None, skip_bad: bool, max_tokens: int, overlap: int) -> Iterator[None]:
    """A repeated document id found by the build (which sees rows, not lines) named by its lines in
    the corpus file (read again to find them)."""
    from tandem.corpus.loaders import corpus_lines

    try:
        yield
    except DuplicateIdError as exc:
        lines = corpus_lines(corpus, exc.rows, format=fmt, skip_bad=skip_bad, max_tokens=max_tokens,
                             overlap=overlap) if corpus is not None and corpus.is_file() else {}
        first, second = (lines.get(row) for row in exc.rows)
        if first is None or second is None:
            raise
        raise DuplicateIdError(f"duplicate document id {exc.doc_id!r} (first at line {first}): give every "
                               "document its own id", exc.doc_id, exc.rows, str(corpus), second) from None


def _encoding(encoder: str, options: dict[str, Any]) -> dict[str, Any]:
    """``build_index`` / ``add_documents`` keyword arguments for the shard size, batch size and Ray."""
    from tandem.index.stream import RayEncoding

    kwargs: dict[str, Any] = {"batch_size": options["batch_size"]}
    if options["shard_size"] is not None:
        kwargs["shard_size"] = options["shard_size"]
    if options["ray"] is not None:
        kwargs["encoding"] = RayEncoding(encoder, address=None if options["ray"] == "local" else options["ray"],
                                         backend=options["backend"], batch_size=options["batch_size"],
                                         workers=options["ray_workers"])
    return kwargs


def _add_documents(files: list[Path], index_dir: Path | None, fmt: str | None, skip_bad: bool, max_tokens: int,
                   overlap: int, options: dict[str, Any], as_json: bool) -> None:
    from tandem.corpus.loaders import iter_corpus
    from tandem.index import add_documents
    from tandem.index.encoder import ENCODERS
    from tandem.index.manifest import Manifest

    if index_dir is None:
        raise typer.BadParameter("--add needs --index DIR, the index to append to")
    stats = ReadStats()
    docs = itertools.chain.from_iterable(
        iter_corpus(f, format=fmt, skip_bad=skip_bad, max_tokens=max_tokens, overlap=overlap, stats=stats) for f in files)
    with owned_output(index_dir, "index"):
        before = Manifest.load(index_dir)
        if options["backend"] is None and before.encoder_backend in ENCODERS:  # Ray workers: the index's backend
            options = {**options, "backend": before.encoder_backend}
        start = time.perf_counter()
        with progress_bar() as bar:
            manifest = add_documents(index_dir, docs, on_progress=bar.callback("encode"),
                                     **_encoding(before.encoder or "", options))
        report_skips(stats, skip_bad)
    added = manifest.doc_count - before.doc_count
    if as_json:
        print_json({"index": str(index_dir), "added": added, "seconds": round(time.perf_counter() - start, 3),
                    **manifest.__dict__})
    console.print(f"[green]added {added} passages to {index_dir} ({manifest.doc_count} in all) "
                  f"in {time.perf_counter() - start:.1f}s")


def _add_extras(names: list[str], index_dir: Path | None, out_dir: Path | None, dataset: Path | None,
                corpus: Path | None, extras: list[str]) -> None:
    from tandem.index import add_extras
    from tandem.index.layers import EXTRAS

    if index_dir is None:
        raise typer.BadParameter("--add-extras needs --index DIR, the index to extend")
    if dataset is not None or corpus is not None or extras:
        raise typer.BadParameter("--add-extras extends an existing index: give no --dataset, --corpus or --extras")
    target = out_dir or index_dir
    with owned_output(target, "index"):
        start = time.perf_counter()
        with progress_bar() as bar:
            manifest = add_extras(index_dir, [EXTRAS[name](on_progress=bar.callback(f"{name} extra")) for name in names],
                                  out=target)
    console.print(f"[green]added {', '.join(names)} to {manifest.doc_count} passages ({manifest.kind}) "
                  f"in {time.perf_counter() - start:.1f}s: {target}")


def verify(
    folder: Annotated[Path, typer.Argument(help="The index folder to check.")],
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Check an index folder: every file against the size and sha256 recorded when it was built, then
    every component opened. A damaged file exits 2 naming it and the fix."""
    from tandem.index import verify_index

    report = verify_index(folder)
    if as_json:
        print_json(report)
        return
    hashed = (f"{report['files']} files match their recorded sha256" if report["files"]
              else "no file records (built by an older tandem): components opened only")
    console.print(f"[green]index {folder} is sound[/green]: {hashed}; {report['documents']} documents; "
                  f"{', '.join(report['components'])} readable")


def retrieve(
    query: Annotated[str, typer.Argument(help="The query.")],
    index_dir: Annotated[Path, typer.Option("--index", help="Index folder.")],
    k: Annotated[int, typer.Option("--k", "-k", help="How many hits.")] = 10,
    retriever: Annotated[Optional[str], typer.Option(help="bm25 | dense | hybrid | graph (default: the index's kind).")] = None,
    fusion: Annotated[str, typer.Option(help="Hybrid fusion: rrf | weighted.")] = "rrf",
    retriever_opt: Annotated[list[str], typer.Option("--retriever-opt", help="Retriever setting KEY=VALUE, repeatable (graph: first_stage, seeds, damping, iterations, fusion_weight, two_hop, ...).")] = [],  # noqa: B006
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Print the top-k passages for a query."""
    from tandem.cli.common import parse_settings
    from tandem.index import open_index
    from tandem.io import check_text
    from tandem.retrieve import open_retriever

    check_text("query", query)
    idx = open_index(index_dir)
    kind = retriever or idx.kind
    options = ({"fusion": fusion} if kind in ("hybrid", "graph") else {}) | parse_settings(retriever_opt)
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

