"""MetaRAG, in one folder: the algorithm (``algorithm``, its docstring the algorithm box, with its prompts) and the
settings (``settings``). Importing the package registers the method."""

from tandem.methods.metarag.algorithm import MetaRAG
from tandem.methods.metarag.settings import MetaRAGSettings

__all__ = ["MetaRAG", "MetaRAGSettings"]
