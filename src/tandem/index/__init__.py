"""Index folders: BM25 (bm25s), dense (a vector store + encoder), their manifest and atomic builds."""

from tandem.index.build import add_documents, add_extras, build_index
from tandem.index.index import Index, open_index, verify_index
from tandem.index.manifest import Manifest, corpus_hash

__all__ = ["Index", "Manifest", "add_documents", "add_extras", "build_index", "corpus_hash", "open_index", "verify_index"]
