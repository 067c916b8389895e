"""NaiveRAG, in one folder: the algorithm (``algorithm``, its docstring the algorithm box, with its prompts) and the
settings (``settings``). Importing the package registers the method."""

from tandem.methods.naive_rag.algorithm import NaiveRAG
from tandem.methods.naive_rag.settings import NaiveRAGSettings

__all__ = ["NaiveRAG", "NaiveRAGSettings"]
