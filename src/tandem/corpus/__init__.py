"""Corpora and QA datasets: loaders for every supported format, chunking, passage pools."""

from tandem.corpus.loaders import Dataset, load_corpus, load_dataset, load_folder, sniff_format

__all__ = ["Dataset", "load_corpus", "load_dataset", "load_folder", "sniff_format"]
