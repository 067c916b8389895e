"""Training-side tools built on the core: SFT data export from DualRAG runs (``sft_export``), retriever
fine-tuning (``retriever``)."""

from tandem.train.sft_export import DEFAULT_METRICS, export_sft, is_correct, sft_examples

__all__ = ["DEFAULT_METRICS", "export_sft", "is_correct", "sft_examples"]
